package ratelimit

import (
	"context"
	"time"
)

// Kind is what a limit counts.
type Kind uint8

const (
	Requests Kind = iota // rpm
	Tokens               // tpm
)

// String is the kind's name in headers, error types and metric labels:
// requests or tokens, as OpenAI's x-ratelimit-* headers spell them.
func (k Kind) String() string {
	if k == Tokens {
		return "tokens"
	}
	return "requests"
}

// MaxCells bounds the cells of one admission: requests and tokens, for
// the tenant and for the tenant on one model.
const MaxCells = 4

// Cell is one limit a request takes from.
type Cell struct {
	Tenant string
	Model  string // empty: all of the tenant's models
	Kind   Kind
	Limit  int64 // per Window
	N      int64 // what this request takes
}

// State is a cell's window: what the x-ratelimit-* headers say.
type State struct {
	Limit, Remaining int64
	// Reset is the time until the window is empty again.
	Reset time.Duration
	// RetryAfter (refused cells only) is the time until the request
	// would fit.
	RetryAfter time.Duration
	// TooLarge: the request costs more than the whole limit.
	TooLarge bool
}

// Verdict is the answer of one Take.
type Verdict struct {
	// Allowed: every cell took its units. Otherwise none did.
	Allowed bool
	// Denied is the index of the refused cell the request waits longest
	// for (not Allowed): one that can never fit, else the longest
	// RetryAfter, since the admission is all or none. The other cells'
	// States are their windows without this request.
	Denied int
	States [MaxCells]State
}

// deny completes a refused verdict whose States are take's for cells
// (fits: take's answers; tats: the cells' arrival times before, unix ns):
// Denied is the refused cell the request waits longest for, and the cells
// that fitted say their window as it is, since nothing was taken. false
// when no cell was refused here (Redis' script, rounding to the
// microsecond, refused what this arithmetic admits).
func (v *Verdict) deny(cells []Cell, fits []bool, tats []int64, now int64) bool {
	v.Allowed = false
	refused := false
	for i := range cells {
		if !fits[i] && (!refused || longerWait(v.States[i], v.States[v.Denied])) {
			v.Denied, refused = i, true
		}
	}
	for i, c := range cells {
		if fits[i] {
			v.States[i] = state(max(tats[i], now), now, c.Limit)
		}
	}
	return refused
}

// longerWait: a waits longer than b (never fitting is longest).
func longerWait(a, b State) bool {
	if a.TooLarge != b.TooLarge {
		return a.TooLarge
	}
	return a.RetryAfter > b.RetryAfter
}

// Counter keeps the cells' windows. Take admits a request on every cell
// or on none, in one step (one lock, one round trip); Adjust moves one
// cell by delta units (a settle: reported usage less the estimate taken).
// Errors are the store's (Redis down); Memory never fails.
type Counter interface {
	Take(ctx context.Context, now time.Time, cells []Cell) (Verdict, error)
	Adjust(ctx context.Context, now time.Time, c Cell, delta int64) error
}
