package breaker

import "time"

// failureWindow holds the timestamps of the last Failures failures. That is
// all "Failures failures within Window" needs: the breaker opens exactly when
// the oldest of the last Failures failures is still inside the window, and
// while closed fewer than Failures are ever inside it, so the count reported
// by Snapshot is exact. The slice is allocated once (config validation caps
// Failures, see MaxFailures); recording and the open check are O(1) and never
// allocate, only Snapshot's count walks the ring.
type failureWindow struct {
	ts   []time.Time // ring, len == Failures
	next int         // slot of the next write; the oldest entry once full
	n    int         // valid entries, ≤ len(ts)
}

// MaxFailures bounds Policy.Failures: the window keeps one timestamp per
// failure, so an absurd value would allocate that many up front. Config
// validation rejects larger values; newFailureWindow clamps as a backstop.
const MaxFailures = 1000

func newFailureWindow(failures int) failureWindow {
	return failureWindow{ts: make([]time.Time, min(max(failures, 1), MaxFailures))}
}

// add records a failure at t and reports whether the last len(ts) failures
// all fall inside window ending at t (t-window < oldest): the open condition.
// Timestamps come from one clock in order, so the oldest entry is the only
// one that can have left the window.
func (w *failureWindow) add(t time.Time, window time.Duration) bool {
	w.ts[w.next] = t
	w.next = (w.next + 1) % len(w.ts)
	if w.n < len(w.ts) {
		w.n++
		if w.n < len(w.ts) {
			return false
		}
	}
	return t.Sub(w.ts[w.next]) < window
}

// count returns the failures with now-window < t ≤ now: a failure exactly
// Window old has left the window.
func (w *failureWindow) count(now time.Time, window time.Duration) int {
	c := 0
	for i := 0; i < w.n; i++ {
		if now.Sub(w.ts[i]) < window {
			c++
		}
	}
	return c
}

func (w *failureWindow) reset() {
	w.n, w.next = 0, 0
}
