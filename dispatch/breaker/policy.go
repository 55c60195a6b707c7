package breaker

import (
	"fmt"
	"time"
)

// Mode selects the policy that opens a closed breaker.
type Mode int

const (
	CountMode Mode = iota // Failures failures within a sliding Window
	RateMode              // error rate above Threshold over a rolling Window
)

func (m Mode) String() string {
	switch m {
	case CountMode:
		return "count"
	case RateMode:
		return "rate"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode maps the config spelling ("count", "rate"; "" is count) to a Mode.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "count":
		return CountMode, nil
	case "rate":
		return RateMode, nil
	}
	return 0, fmt.Errorf("breaker: unknown mode %q (want count or rate)", s)
}

// Defaults of DESIGN.md §2 L1.
const (
	DefaultCountWindow = 5 * time.Minute
	DefaultRateWindow  = 60 * time.Second
	DefaultFailures    = 3
	DefaultCooldown    = 60 * time.Second
	DefaultThreshold   = 0.25
	DefaultMinRequests = 10

	// DefaultTrialTimeout frees a half-open trial slot whose ticket never
	// came back (Done was not called): longer than any hop the defaults
	// allow to wait for headers (240 s), so only a leak reaches it.
	DefaultTrialTimeout = 5 * time.Minute

	// MaxRetryAfter caps how long a Retry-After can keep a channel out.
	MaxRetryAfter = 5 * time.Minute

	// rateTrialSuccesses consecutive successful half-open trials close a
	// rate-mode breaker.
	rateTrialSuccesses = 3
)

// Policy configures a Breaker. Zero (or negative) fields take the default of
// the mode, so Policy{} is the count policy of the contract.
type Policy struct {
	Mode        Mode
	Window      time.Duration // count: 5m default; rate: 60s default (zero value → mode default)
	Failures    int           // count: 3
	Cooldown    time.Duration // 60s
	Threshold   float64       // rate: 0.25; the rate must be strictly greater
	MinRequests int           // rate: 10
	// TrialTimeout frees the half-open trial slot when its ticket has not
	// been handed back to Done by then (5m).
	TrialTimeout time.Duration
}

// WithDefaults returns p with every unset field replaced by its default. Two
// policies that are equal after WithDefaults behave identically.
func (p Policy) WithDefaults() Policy {
	if p.Mode != RateMode {
		p.Mode = CountMode
	}
	if p.Window <= 0 {
		if p.Mode == RateMode {
			p.Window = DefaultRateWindow
		} else {
			p.Window = DefaultCountWindow
		}
	}
	if p.Failures <= 0 {
		p.Failures = DefaultFailures
	}
	if p.Cooldown <= 0 {
		p.Cooldown = DefaultCooldown
	}
	if p.Threshold <= 0 {
		p.Threshold = DefaultThreshold
	}
	if p.MinRequests <= 0 {
		p.MinRequests = DefaultMinRequests
	}
	if p.TrialTimeout <= 0 {
		p.TrialTimeout = DefaultTrialTimeout
	}
	return p
}
