package ratelimit

import (
	"math/bits"
	"time"
)

// Window is the period of every limit: rpm and tpm are per minute.
const Window = time.Minute

// interval is the time n units of a limit of limit per Window occupy:
// n × Window / limit, computed in 128 bits. n is clamped to 16 × (limit+1)
// so the quotient fits (a cost above the limit is refused anyway, and a
// settle's debt beyond 16 windows changes nothing a client could see).
func interval(n, limit int64) time.Duration {
	if limit <= 0 || n == 0 {
		return 0
	}
	neg := n < 0
	if neg {
		n = -n
	}
	n = min(n, 16*(limit+1))
	hi, lo := bits.Mul64(uint64(n), uint64(Window))
	q, _ := bits.Div64(hi, lo, uint64(limit))
	if neg {
		return -time.Duration(q)
	}
	return time.Duration(q)
}

// take is GCRA's decision for one cell whose theoretical arrival time is
// tat (unix nanoseconds; 0 for a new cell): the new tat when n units are
// admitted, whether they are, and the cell's state for the headers.
func take(tat, now int64, n, limit int64) (next int64, ok bool, st State) {
	base := max(tat, now)
	next = base + int64(interval(n, limit))
	ok = n <= limit && next-now <= int64(Window)
	if !ok {
		next = tat
		st = state(base, now, limit)
		if n <= limit {
			st.RetryAfter = time.Duration(base + int64(interval(n, limit)) - now - int64(Window))
		} else {
			st.RetryAfter = Window // never fits: one window says "not now"
			st.TooLarge = true
		}
		return next, false, st
	}
	return next, true, state(next, now, limit)
}

// adjust moves a cell's tat by delta units (negative: a refund), never
// below now: an empty window has nothing to give back.
func adjust(tat, now int64, delta, limit int64) int64 {
	next := max(tat, now) + int64(interval(delta, limit))
	return max(next, now)
}

// state is what a cell whose tat is tat leaves: the units still admitted
// within a window, and the time until it is empty again.
func state(tat, now int64, limit int64) State {
	busy := max(tat-now, 0)
	slack := int64(Window) - busy
	var rem int64
	if slack > 0 {
		hi, lo := bits.Mul64(uint64(slack), uint64(limit))
		rem, _ = int64Div(hi, lo, uint64(Window))
	}
	return State{Limit: limit, Remaining: min(rem, limit), Reset: time.Duration(busy)}
}

func int64Div(hi, lo, d uint64) (int64, bool) {
	if hi >= d {
		return 0, false
	}
	q, _ := bits.Div64(hi, lo, d)
	return int64(q), true
}
