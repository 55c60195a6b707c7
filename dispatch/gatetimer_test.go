package dispatch

import "testing"

// TestGateTimerBetweenReads: the gate's timer acts on the hop only while
// a read is in flight (TestGateTimeout's cases: the commit written during
// the read, the failover that ends it). Fired between reads, while the
// hop's goroutine judges a frame, it only marks the gate, and the next
// read does not start: the goroutine decides itself. The gate here has no
// hop (g.a is nil), so a timer that touched it between reads panics.
func TestGateTimerBetweenReads(t *testing.T) {
	g := &gateHold{}
	if !g.enter() {
		t.Fatal("a gate whose timer did not fire refused a read")
	}
	if g.leave() {
		t.Fatal("a read reported the timer, which did not fire")
	}
	g.fire() // between reads
	if g.enter() {
		t.Fatal("a read started after the timer fired between reads: the timeout waits for the next frame")
	}
	g.fire() // fired again (a timer that fired as the gate decided): still only a mark
	if g.enter() {
		t.Fatal("a read started after the timer fired")
	}
}
