package earlywarning

import "time"

// Defaults, chosen from the replay report (docs/early-warning.md, where the
// reasoning is written down). The config file's defaults are these
// (package config refers to them).
const (
	DefaultBaseline   = 10 * time.Minute
	DefaultWindow     = 30 * time.Second
	DefaultMultiple   = 3.0
	DefaultFor        = 40 * time.Second
	DefaultMinSamples = 5
	DefaultCooldown   = 2 * time.Minute
	DefaultProbation  = 2 * time.Minute
	DefaultRateLimit  = 0.95

	// MaxBackoff bounds the cooldown of a channel demoted again during
	// probation: each such demotion doubles it, up to this multiple.
	MaxBackoff = 8

	// EvalInterval is how long a verdict is reused: the evidence is summed
	// at most this often per channel, whatever the request rate.
	EvalInterval = 250 * time.Millisecond
)

// Policy configures a Detector. Zero (or negative) fields take their
// defaults, except For and Probation, where zero is a value (no wait), and
// ErrorRate and ErrorCount, where zero means no error evidence.
type Policy struct {
	// Baseline is the span of history the baseline is the median of
	// (the short window excluded, so an incident does not become its own
	// baseline at once).
	Baseline time.Duration
	// Window is the short window: the view judged against the baseline.
	Window time.Duration
	// Multiple: a sample is slow when it is above Multiple × the baseline
	// median; the window is bad when more than half its samples are slow.
	Multiple float64
	// For is how long the evidence must last before a demotion (0 while
	// on probation).
	For time.Duration
	// MinSamples is the minimum number of samples in the short window (and
	// in the baseline, for a latency signal) before any judgement.
	MinSamples int
	// Cooldown is how long a demotion lasts; Probation how long the
	// channel then stays on probation.
	Cooldown, Probation time.Duration
	// ErrorRate > 0: an error rate above it over the short window is
	// evidence (a rate breaker's threshold × the configured fraction).
	ErrorRate float64
	// ErrorCount > 0: that many errors in the short window are evidence (a
	// count breaker's failures × the configured fraction, rounded up).
	ErrorCount int
	// RateLimit > 0: a rate-limit window the channel stated used at least
	// this much (DESIGN §16; ratelimit.go) is evidence at once, and the
	// demotion lasts until the window resets.
	RateLimit float64
}

// WithDefaults returns p with every unset field replaced by its default.
func (p Policy) WithDefaults() Policy {
	if p.Baseline <= 0 {
		p.Baseline = DefaultBaseline
	}
	if p.Window <= 0 {
		p.Window = DefaultWindow
	}
	if p.Baseline < 2*p.Window {
		p.Baseline = 2 * p.Window
	}
	if !(p.Multiple > 1) {
		p.Multiple = DefaultMultiple
	}
	if p.For < 0 {
		p.For = 0
	}
	if p.MinSamples <= 0 {
		p.MinSamples = DefaultMinSamples
	}
	if p.Cooldown <= 0 {
		p.Cooldown = DefaultCooldown
	}
	if p.Probation < 0 {
		p.Probation = 0
	}
	if p.ErrorRate < 0 {
		p.ErrorRate = 0
	}
	if p.ErrorCount < 0 {
		p.ErrorCount = 0
	}
	if !(p.RateLimit > 0) {
		p.RateLimit = 0
	}
	p.RateLimit = min(p.RateLimit, 1)
	return p
}

// step is the width of one bucket of the ring: a sixth of the short
// window, or wider so the baseline needs at most maxSteps buckets, and at
// least a second.
func (p Policy) step() time.Duration {
	s := max(p.Window/6, p.Baseline/maxSteps, time.Second)
	return s.Truncate(time.Second)
}
