package replay

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/hopgate/hopgate/dispatch/earlywarning"
	"github.com/hopgate/hopgate/telemetry"
)

// Summary is one run in numbers: the report's row.
type Summary struct {
	Requests int
	// ClientErrors: requests that did not get a 200.
	ClientErrors int
	// FailedHops: hops that failed (any retryable failure, timeouts included).
	FailedHops int
	// TimedOut: requests that waited out a timeout (header, gate, idle,
	// or the chain deadline) on some hop.
	TimedOut int
	// P50 and P99 of the time to the first byte of the answer, over every
	// request from the incident on (errors included).
	P50, P99 time.Duration
	// OnDear: requests the pricier channel served; Premium what they cost
	// above the cheap channel, at the nominal usage.
	OnDear  int
	Premium float64
	// Demotions, those that were FalseAlarms, and the premium of the
	// requests the false alarms sent to the pricier channel.
	Demotions, FalseAlarms int
	FalseAlarmPremium      float64
	// Openings of the cheap channel's breaker.
	Openings int
}

// timeouts are the failover path labels of a hop that waited out a timer.
var timeouts = []string{"header_timeout", "gate_timeout", "stream_idle_timeout", "deadline"}

// Summarize sums a run up from the incident on. counterfactual is the run
// of the same scenario without early warning (nil for that run itself): a
// demotion is a false alarm when no breaker opening of the channel
// followed within its cooldown in this run or in the counterfactual one —
// a demoted channel gets little traffic, so its own breaker may never see
// the failures that would have opened it.
func Summarize(r *Result, counterfactual *Result) Summary {
	var s Summary
	var lat []time.Duration
	for _, rec := range r.Records {
		if rec.At < 0 {
			continue
		}
		s.Requests++
		lat = append(lat, rec.FirstByte)
		if rec.Status != http.StatusOK {
			s.ClientErrors++
		}
		timedOut := rec.Outcome == telemetry.OutcomeDeadline
		for _, step := range strings.Split(rec.Path, telemetry.PathArrow) {
			_, label, _ := strings.Cut(step, ":")
			switch label {
			case "", "ok", "open", "forced", telemetry.StepDemoted:
				continue
			}
			s.FailedHops++
			timedOut = timedOut || slices.Contains(timeouts, label)
		}
		if timedOut {
			s.TimedOut++
		}
		if rec.Served() == Dear {
			s.OnDear++
		}
	}
	s.Premium = float64(s.OnDear) * PremiumPerRequest
	slices.Sort(lat)
	s.P50, s.P99 = quantile(lat, 0.5), quantile(lat, 0.99)
	for _, o := range r.Openings {
		if o.Channel == Cheap && o.At >= 0 {
			s.Openings++
		}
	}
	for _, d := range r.Demotions {
		if d.At < 0 {
			// A demotion during the warm-up is a false alarm too: nothing
			// is wrong then.
		}
		s.Demotions++
		if d.Reason == earlywarning.ReasonRateLimit {
			// A window demotion is warranted when that window filled:
			// the provider refused in it, in this run or without early
			// warning (where the demoted requests would have used it).
			if w := int64(d.At / r.windowLength()); r.FullWindows[w] || counterfactual != nil && counterfactual.FullWindows[w] {
				continue
			}
		} else if opened(r, d) || counterfactual != nil && opened(counterfactual, d) {
			continue
		}
		s.FalseAlarms++
		for _, rec := range r.Records {
			if rec.At >= d.At && rec.At < d.Until && rec.Served() == Dear && strings.Contains(rec.Path, d.Channel+":"+telemetry.StepDemoted) {
				s.FalseAlarmPremium += PremiumPerRequest
			}
		}
	}
	return s
}

// opened reports whether the channel of demotion d had its breaker open
// between the demotion and the end of its cooldown.
func opened(r *Result, d Event) bool {
	for _, o := range r.Openings {
		if o.Channel == d.Channel && o.At >= d.At && o.At <= d.Until {
			return true
		}
	}
	return false
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)-1) + 0.5)
	return sorted[min(i, len(sorted)-1)]
}

// windowLength is a provider window of the window-fill scenario in the
// run's virtual time (the short mode shortens it with the scenario).
func (r *Result) windowLength() time.Duration {
	if sc := r.Options.Scale; sc > 0 && sc != 1 {
		return time.Duration(float64(time.Minute) * sc)
	}
	return time.Minute
}
