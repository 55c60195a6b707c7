package breaker

import (
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// Get keeps state across calls with an equal policy (zero fields and explicit
// defaults are equal) and starts over when a reload changes the policy.
func TestSetGet(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	var seen []string
	s := NewSet(WithClock(clk), WithOnTransition(func(tr Transition) { seen = append(seen, tr.Name) }))

	a := s.Get("a", Policy{})
	a.RetryAfter(time.Minute)
	if got := s.Get("a", Policy{Window: 5 * time.Minute, Failures: 3}); got != a || got.State() != Open {
		t.Fatalf("equal policy: got a fresh breaker (state %v)", got.State())
	}
	fresh := s.Get("a", Policy{Failures: 5})
	if fresh == a || fresh.State() != Closed || fresh.Policy().Failures != 5 {
		t.Fatalf("changed policy: want a fresh closed breaker")
	}
	s.Get("c", Policy{Mode: RateMode})
	s.Get("b", Policy{}).RetryAfter(time.Second)

	var names []string
	for _, b := range s.All() {
		names = append(names, b.Name())
	}
	if got := len(names); got != 3 || names[0] != "a" || names[1] != "b" || names[2] != "c" {
		t.Errorf("All() = %v, want [a b c]", names)
	}
	if len(seen) != 2 || seen[0] != "a" || seen[1] != "b" {
		t.Errorf("set options not applied to every breaker: transitions from %v", seen)
	}
}

// Concurrent first use of a name yields one breaker (run with -race).
func TestSetGetConcurrent(t *testing.T) {
	s := NewSet()
	got := make([]*Breaker, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i] = s.Get("x", Policy{}) })
	}
	wg.Wait()
	for _, b := range got {
		if b != got[0] {
			t.Fatal("two breakers for one name")
		}
	}
}
