package breaker

import "time"

// failureWindow holds the timestamps of the last Failures failures. That is
// all "Failures failures within Window" needs: the breaker opens exactly when
// the oldest of the last Failures failures is still inside the window, and
// while closed fewer than Failures are ever inside it, so the count reported
// by Snapshot is exact. The slice is allocated once; recording never
// allocates.
type failureWindow struct {
	ts   []time.Time // ring, len == Failures
	next int         // slot of the next write
	n    int         // valid entries, ≤ len(ts)
}

func newFailureWindow(failures int) failureWindow {
	return failureWindow{ts: make([]time.Time, failures)}
}

func (w *failureWindow) add(t time.Time) {
	w.ts[w.next] = t
	w.next = (w.next + 1) % len(w.ts)
	if w.n < len(w.ts) {
		w.n++
	}
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
