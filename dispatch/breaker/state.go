package breaker

import (
	"fmt"
	"time"
)

// State is the breaker state. The numeric values are the values of the
// hopgate_breaker_state gauge (DESIGN.md §5).
type State int

const (
	Closed   State = iota // requests flow; outcomes are counted
	HalfOpen              // one trial request at a time decides
	Open                  // the channel is skipped until ReopenAt
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// MarshalText makes State read as "closed" / "half-open" / "open" in JSON
// (/admin/breakers).
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Outcome is how a request through the breaker ended, as classified by the
// caller (DESIGN.md §3).
type Outcome int

const (
	Success  Outcome = iota
	Failure          // retryable upstream failure: counts against the channel
	Excluded         // client cancellation or client error: no effect at all
)

func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Excluded:
		return "excluded"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Reasons carried by Transition.Reason (also usable as a metric label).
const (
	ReasonFailures        = "failures"         // count: Failures failures within Window
	ReasonErrorRate       = "error_rate"       // rate: error rate above Threshold
	ReasonTrialFailed     = "trial_failed"     // half-open (or forced) trial failed
	ReasonTrialSucceeded  = "trial_succeeded"  // half-open (or forced) trial(s) succeeded
	ReasonCooldownElapsed = "cooldown_elapsed" // open → half-open
	ReasonRetryAfter      = "retry_after"      // upstream said when to come back
)

// Transition describes one state change, delivered to the WithOnTransition
// callback.
type Transition struct {
	Name       string
	From, To   State
	At         time.Time
	ReopenAt   time.Time // zero unless To == Open
	Reason     string    // one of the Reason* constants
	Generation uint64    // generation after the change; strictly increasing per breaker
}
