package gwtest

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// ArmedClock is the gateway's fake clock as the engine sees it: it records
// the duration of every timer armed through it (AfterFunc, NewTimer,
// Reset). A fake timer fires exactly when its duration has passed, so
// "this timeout cannot fire early" is "it was armed with exactly the
// configured duration": a synchronous check, where watching for an early
// failover after Advance would race with the request it is watching.
type ArmedClock struct {
	*clockwork.FakeClock
	mu        sync.Mutex
	durations []time.Duration
}

var _ clockwork.Clock = (*ArmedClock)(nil)

func (c *ArmedClock) record(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.durations = append(c.durations, d)
}

// AfterFunc arms the fake clock's timer and records d: a duration
// recorded is a timer an Advance will fire (WaitArmed).
func (c *ArmedClock) AfterFunc(d time.Duration, f func()) clockwork.Timer {
	t := c.FakeClock.AfterFunc(d, f)
	c.record(d)
	return armedTimer{t, c}
}

// NewTimer arms the fake clock's timer and records d.
func (c *ArmedClock) NewTimer(d time.Duration) clockwork.Timer {
	t := c.FakeClock.NewTimer(d)
	c.record(d)
	return armedTimer{t, c}
}

// Armed returns the durations armed so far, in order.
func (c *ArmedClock) Armed() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.durations)
}

// armedTimer records the durations of Reset too (the idle timer re-arms).
type armedTimer struct {
	clockwork.Timer
	c *ArmedClock
}

func (t armedTimer) Reset(d time.Duration) bool {
	ok := t.Timer.Reset(d)
	t.c.record(d)
	return ok
}

// checkArmed says what is wrong with armed when want is a configured
// timeout: nil when at least one timer was armed for exactly want and
// every timer was armed for want or one of others.
func checkArmed(armed []time.Duration, want time.Duration, others ...time.Duration) error {
	found := false
	for _, d := range armed {
		found = found || d == want
		if d != want && !slices.Contains(others, d) {
			return fmt.Errorf("a timer was armed for %v; configured: %v %v (armed: %v)", d, want, others, armed)
		}
	}
	if !found {
		return fmt.Errorf("no timer armed for %v; armed: %v", want, armed)
	}
	return nil
}
