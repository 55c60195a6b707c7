package breaker

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// A slow request that started before the breaker opened and closed again
// must not re-open it with its late 429 + Retry-After: stale results flip
// nothing, the provider's hold-out included (DESIGN.md §2 L1).
func TestStaleRetryAfterIsIgnored(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	b := New("ch", Policy{}, WithClock(clk))
	slow, ok := b.Allow() // starts before everything below
	if !ok {
		t.Fatal("closed breaker refused")
	}
	for range 3 {
		tk, _ := b.Allow()
		b.Done(tk, Failure)
	}
	if b.State() != Open {
		t.Fatalf("state %v after 3 failures", b.State())
	}
	clk.Advance(DefaultCooldown)
	trial, ok := b.Allow()
	if !ok || !trial.Trial() {
		t.Fatal("no half-open trial")
	}
	b.Done(trial, Success)
	if b.State() != Closed {
		t.Fatalf("state %v after a successful trial", b.State())
	}
	b.DoneRetryAfter(slow, Failure, 2*time.Minute)
	if b.State() != Closed {
		t.Fatalf("a stale 429 re-opened the breaker: %v", b.State())
	}
}

// A current 429 with Retry-After counts as a failure and keeps the channel
// out for that long, below the failure threshold, capped at MaxRetryAfter.
func TestCurrentRetryAfterOpens(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	b := New("ch", Policy{}, WithClock(clk))
	tk, _ := b.Allow()
	b.DoneRetryAfter(tk, Failure, time.Hour)
	if b.State() != Open || !b.ReopenAt().Equal(t0.Add(MaxRetryAfter)) {
		t.Fatalf("state %v reopen %v, want open until +%v", b.State(), b.ReopenAt(), MaxRetryAfter)
	}
	if s := b.Snapshot(); s.Failures != 1 {
		t.Fatalf("failure not recorded: %+v", s)
	}
}
