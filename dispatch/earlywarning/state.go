package earlywarning

import (
	"fmt"
	"time"
)

// State is a channel's early-warning state. The numeric values are not a
// metric contract: hopgate_early_warning_demoted is 1 exactly when the
// state is Demoted.
type State int

const (
	Normal    State = iota // in its place in every chain
	Demoted                // moved to the end of its chains until the cooldown ends
	Probation              // back in its place; fresh evidence demotes it again at once
)

func (s State) String() string {
	switch s {
	case Normal:
		return "normal"
	case Demoted:
		return "demoted"
	case Probation:
		return "probation"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// MarshalText makes State read as its name in JSON (/admin/breakers).
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Outcome is how a hop ended, classified by the caller exactly as for the
// breaker (DESIGN.md §3): client errors, cancellations and the chain
// deadline are Excluded.
type Outcome int

const (
	Success  Outcome = iota
	Failure          // a retryable failure, errors inside a stream included
	Excluded         // counts on neither side of the error rate
)

// Reasons carried by Transition.Reason and the demotion span event
// (hopgate.early_warning.reason); the first four name the evidence of a
// demotion and are the reason label of hopgate_early_warning_demotions_total.
const (
	ReasonHeaderLatency   = "header_latency" // median header latency above Multiple × baseline
	ReasonFirstToken      = "first_token"    // median time to first token above Multiple × baseline
	ReasonErrorRate       = "error_rate"     // error rate past its fraction of the breaker's threshold
	ReasonRateLimit       = "ratelimit"      // a stated rate-limit window past Policy.RateLimit (ratelimit.go)
	ReasonWindowReset     = "window_reset"   // the window a ratelimit demotion waited for has reset
	ReasonCooldownElapsed = "cooldown_elapsed"
	ReasonProbationPassed = "probation_passed"
)

// Transition describes one state change, delivered to the WithOnTransition
// callback.
type Transition struct {
	Name     string
	From, To State
	At       time.Time
	// Until is when the new state ends by itself: the end of a demotion
	// (To == Demoted) or of probation (To == Probation); zero for Normal.
	Until  time.Time
	Reason string // one of the Reason* constants
	// Detail is the evidence in words, e.g. "header latency p50 2.4s is
	// 4.8x the baseline 500ms (31 samples)".
	Detail string
}
