// Package overload is hopgate's overload protection (DESIGN.md §13): one
// process, one memory budget for the bytes it buffers on behalf of
// requests, and admission bounds on requests in flight and open streams.
//
// A gateway's memory is not bounded by its per-request bounds: eight
// concurrent endless 64 MiB bodies exceed a 512 MiB container, and the OOM
// kill takes every open stream of every tenant with it. Envoy answers this
// with an overload manager; this is hopgate's, kept small:
//
//   - Budget counts buffered bytes (held stream-gate frames, non-streaming
//     bodies being read and classified, request bodies kept for replay).
//     A hop whose buffer would cross it fails as retryable (the next
//     channel may be sane); a request whose body cannot be buffered is shed.
//   - Admission bounds requests in flight and open streams; past a bound a
//     new request is shed at once (503 engine_overloaded with Retry-After),
//     never queued, and /readyz says overloaded so a load balancer steers
//     away. Committed streams are never cut to make room.
//
// Both are lock-free counters: a request pays two atomic adds to enter and
// two to leave; a buffered byte range one compare-and-swap loop.
//
// It decides nothing about what a shed request gets: package api writes the
// reply, package dispatch fails the hop.
package overload

import (
	"math"
	"runtime/debug"
	"sync/atomic"
)

// Defaults.
const (
	// DefaultBudgetFraction of GOMEMLIMIT is the budget when GOMEMLIMIT is
	// set (the Kubernetes manifest sets it from the container limit). It is
	// derived from what the heap needs, not from what is left: the budget's
	// bytes are live while held, and the collector (GOGC=100) lets the
	// heap grow to about twice what is live before it collects, so a full
	// budget of B costs about 2B of heap; the rest of the live heap
	// (goroutine stacks, connection and frame buffers, the telemetry
	// pipeline) doubles the same way. At half the limit a full budget put
	// the runtime at its soft limit, where the collector runs without
	// pause and the RSS is the limit plus the binary's pages
	// (docs/reliability.md: the soak at 250/s); a quarter keeps it off it.
	DefaultBudgetFraction = 0.25
	// DefaultBudgetBytes is the budget without GOMEMLIMIT or a configured
	// budget.
	DefaultBudgetBytes = 256 << 20
	// streamCost estimates what one open stream costs beyond its buffered
	// bytes (goroutines, buffers, spans: docs/performance.md measures ~75
	// KiB per idle stream): the default stream bound is budget/streamCost.
	streamCost = 96 << 10
	// minStreams and minInFlight floor the derived bounds.
	minStreams  = 64
	minInFlight = 128
)

// BudgetFor returns the budget in bytes: configured if > 0, else
// fraction × GOMEMLIMIT when one is set, else DefaultBudgetBytes.
func BudgetFor(configured int64, fraction float64) int64 {
	if configured > 0 {
		return configured
	}
	if fraction <= 0 || fraction > 1 {
		fraction = DefaultBudgetFraction
	}
	if lim := debug.SetMemoryLimit(-1); lim > 0 && lim < math.MaxInt64 {
		return int64(float64(lim) * fraction)
	}
	return DefaultBudgetBytes
}

// DefaultStreams is the open-stream bound derived from a budget.
func DefaultStreams(budget int64) int64 { return max(minStreams, budget/streamCost) }

// DefaultInFlight is the in-flight bound derived from a budget: twice the
// stream bound (a non-streaming request holds its buffers only briefly).
func DefaultInFlight(budget int64) int64 { return max(minInFlight, 2*DefaultStreams(budget)) }

// Budget counts the bytes buffered for requests against a limit. The zero
// value and a nil *Budget admit everything. Safe for concurrent use.
type Budget struct {
	limit int64
	used  atomic.Int64
	// denied counts acquisitions refused (for metrics and tests).
	denied atomic.Int64
}

// NewBudget returns a budget of limit bytes (≤ 0: unlimited).
func NewBudget(limit int64) *Budget { return &Budget{limit: limit} }

// Acquire takes n bytes of the budget; false (nothing taken) when they do
// not fit. Bytes taken must be given back with Release.
func (b *Budget) Acquire(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	for {
		used := b.used.Load()
		if b.limit > 0 && used+n > b.limit {
			b.denied.Add(1)
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// Release gives back n bytes taken with Acquire.
func (b *Budget) Release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.used.Add(-n)
}

// Used is the bytes taken now; Limit the budget (0: unlimited); Denied the
// acquisitions refused so far.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

func (b *Budget) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}

func (b *Budget) Denied() int64 {
	if b == nil {
		return 0
	}
	return b.denied.Load()
}

// Hold is bytes held against a budget by one owner (a hop's gate, a body
// being read): it grows with Grow and gives everything back with Release.
// Not safe for concurrent use; the zero Hold with a nil budget admits all.
type Hold struct {
	b *Budget
	n int64
}

// NewHold returns an empty hold on b.
func NewHold(b *Budget) Hold { return Hold{b: b} }

// Grow takes n more bytes; false (nothing more taken) when they do not fit.
func (h *Hold) Grow(n int64) bool {
	if !h.b.Acquire(n) {
		return false
	}
	h.n += n
	return true
}

// Release gives back everything held.
func (h *Hold) Release() {
	h.b.Release(h.n)
	h.n = 0
}

// Shrink gives back n of the bytes held (at most all of them).
func (h *Hold) Shrink(n int64) {
	n = min(n, h.n)
	h.b.Release(n)
	h.n -= n
}

// Held is the bytes held.
func (h *Hold) Held() int64 { return h.n }

// Shed reasons (the reason label of hopgate_shed_requests_total).
const (
	ShedInFlight = "in_flight" // the in-flight bound
	ShedStreams  = "streams"   // the open-stream bound
	ShedBudget   = "budget"    // the request body did not fit the budget
)

// Admission bounds requests in flight and open streams. Safe for
// concurrent use.
type Admission struct {
	maxInFlight, maxStreams int64
	inFlight, streams       atomic.Int64
}

// NewAdmission bounds requests in flight and streams (≤ 0: unbounded).
func NewAdmission(maxInFlight, maxStreams int64) *Admission {
	return &Admission{maxInFlight: maxInFlight, maxStreams: maxStreams}
}

// Enter admits a request past the in-flight bound, or returns the reason
// it is shed. An admitted request must Leave.
func (a *Admission) Enter() (reason string, ok bool) {
	if a == nil {
		return "", true
	}
	if n := a.inFlight.Add(1); a.maxInFlight > 0 && n > a.maxInFlight {
		a.inFlight.Add(-1)
		return ShedInFlight, false
	}
	return "", true
}

// Leave ends a request admitted by Enter.
func (a *Admission) Leave() {
	if a != nil {
		a.inFlight.Add(-1)
	}
}

// OpenStream admits a streaming request past the stream bound, or returns
// the reason it is shed. An admitted stream must CloseStream.
func (a *Admission) OpenStream() (reason string, ok bool) {
	if a == nil {
		return "", true
	}
	if n := a.streams.Add(1); a.maxStreams > 0 && n > a.maxStreams {
		a.streams.Add(-1)
		return ShedStreams, false
	}
	return "", true
}

// CloseStream ends a stream admitted by OpenStream.
func (a *Admission) CloseStream() {
	if a != nil {
		a.streams.Add(-1)
	}
}

// InFlight and Streams are the counts now.
func (a *Admission) InFlight() int64 {
	if a == nil {
		return 0
	}
	return a.inFlight.Load()
}

func (a *Admission) Streams() int64 {
	if a == nil {
		return 0
	}
	return a.streams.Load()
}

// Limits are the bounds (0: unbounded).
func (a *Admission) Limits() (inFlight, streams int64) {
	if a == nil {
		return 0, 0
	}
	return a.maxInFlight, a.maxStreams
}

// Overloaded reports whether a new request would be shed now, and why:
// /readyz answers 503 with the reason while it is so.
func (a *Admission) Overloaded() (string, bool) {
	if a == nil {
		return "", false
	}
	switch {
	case a.maxInFlight > 0 && a.inFlight.Load() >= a.maxInFlight:
		return ShedInFlight, true
	case a.maxStreams > 0 && a.streams.Load() >= a.maxStreams:
		return ShedStreams, true
	}
	return "", false
}
