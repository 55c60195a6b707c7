package telemetry

import (
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// The on-call page's error-rate chart: the rolling 60 s error rate of each
// channel, sampled every ErrorRateStep over the last ErrorRateHistory. It
// is the page's copy of the Grafana board's error-rate panel, computed the
// same way, so the page works without Prometheus.
const (
	ErrorRateWindow  = 60 * time.Second
	ErrorRateStep    = 10 * time.Second
	ErrorRateHistory = 15 * time.Minute
	// ErrorRateThreshold is the line on the page's charts and the board's
	// error-rate panel: the `rate` breaker's default trip point (DESIGN.md §2).
	ErrorRateThreshold = 0.25

	rateSteps       = int(ErrorRateHistory / ErrorRateStep)
	rateWindowSteps = int(ErrorRateWindow / ErrorRateStep)
	rateBuckets     = rateSteps + rateWindowSteps // history plus one window before it
	maxRateChannels = 1024                        // channel ids come from the config
)

// RatePoint is the rolling-window error rate at one instant.
type RatePoint struct {
	At     time.Time // end of the window
	Hops   int64     // hops the breaker counts (ok + retryable + header timeouts)
	Failed int64     // retryable failures and header timeouts
}

// Rate is Failed/Hops, 0 without hops.
func (p RatePoint) Rate() float64 {
	if p.Hops == 0 {
		return 0
	}
	return float64(p.Failed) / float64(p.Hops)
}

// ErrorRates counts hops per channel in ErrorRateStep buckets. The rate
// has the dashboard's (and the rate breaker's) arithmetic: retryable
// failures, header timeouts included, over the hops that count; a final
// error (the client's 400) and a cancellation count on neither side. Safe
// for concurrent use; a nil *ErrorRates counts nothing.
type ErrorRates struct {
	clock clockwork.Clock

	mu sync.Mutex
	m  map[string]*rateSeries
}

type rateBucket struct {
	step        int64 // absolute step index (unix time / step); stale when old
	hops, fails int64
}

type rateSeries struct{ b [rateBuckets]rateBucket }

// NewErrorRates returns counters on clock (nil: the real clock).
func NewErrorRates(clock clockwork.Clock) *ErrorRates {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &ErrorRates{clock: clock, m: make(map[string]*rateSeries)}
}

func stepOf(t time.Time) int64 { return t.UnixNano() / int64(ErrorRateStep) }

// observe counts one hop outcome of channel (a HopX value).
func (r *ErrorRates) observe(channel, outcome string) {
	if r == nil {
		return
	}
	var failed bool
	switch outcome {
	case HopOK:
	case HopRetryable, HopHeaderTimeout:
		failed = true
	default:
		return // final, canceled: neither side, as the breaker does
	}
	step := stepOf(r.clock.Now())
	r.mu.Lock()
	s := r.m[channel]
	if s == nil {
		if len(r.m) >= maxRateChannels {
			r.mu.Unlock()
			return
		}
		s = &rateSeries{}
		r.m[channel] = s
	}
	b := &s.b[step%int64(rateBuckets)]
	if b.step != step {
		*b = rateBucket{step: step}
	}
	b.hops++
	if failed {
		b.fails++
	}
	r.mu.Unlock()
}

// Series returns channel's rolling-window rate at the end of each step of
// the last ErrorRateHistory, oldest first (rateSteps points; zero hops
// where there was no traffic).
func (r *ErrorRates) Series(channel string) []RatePoint {
	if r == nil {
		return nil
	}
	now := r.clock.Now()
	cur := stepOf(now)
	out := make([]RatePoint, rateSteps)
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.m[channel]
	for i := range out {
		end := cur - int64(rateSteps-1-i) // the last point ends in the current step
		p := RatePoint{At: time.Unix(0, (end+1)*int64(ErrorRateStep)).UTC()}
		if i == rateSteps-1 {
			p.At = now.UTC()
		}
		if s != nil {
			for st := end - int64(rateWindowSteps) + 1; st <= end; st++ {
				if b := s.b[st%int64(rateBuckets)]; b.step == st {
					p.Hops += b.hops
					p.Failed += b.fails
				}
			}
		}
		out[i] = p
	}
	return out
}

// Current is channel's rate over the last ErrorRateWindow.
func (r *ErrorRates) Current(channel string) RatePoint {
	s := r.Series(channel)
	if len(s) == 0 {
		return RatePoint{}
	}
	return s[len(s)-1]
}

// Retain drops the counters of the channels keep rejects (a config reload
// removed them) and leaves the others alone. Without it a gateway
// reloaded with new channel ids would reach maxRateChannels and count no
// new channel at all.
func (r *ErrorRates) Retain(keep func(channel string) bool) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for ch := range r.m {
		if !keep(ch) {
			delete(r.m, ch)
		}
	}
}

// Channels lists the channels with counters, sorted.
func (r *ErrorRates) Channels() []string {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	out := make([]string, 0, len(r.m))
	for ch := range r.m {
		out = append(out, ch)
	}
	r.mu.Unlock()
	slices.Sort(out)
	return out
}
