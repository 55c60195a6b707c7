package breaker

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// t0 is the fake clock's start; a round second, so rate buckets line up with
// the durations written in the scripts.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// harness drives one breaker on a fake clock and records its transitions.
type harness struct {
	t     *testing.T
	clk   *clockwork.FakeClock
	b     *Breaker
	held  []Ticket
	trans []Transition
}

func newHarness(t *testing.T, p Policy) *harness {
	t.Helper()
	h := &harness{t: t, clk: clockwork.NewFakeClockAt(t0)}
	h.b = New("ch", p, WithClock(h.clk), WithOnTransition(func(tr Transition) { h.trans = append(h.trans, tr) }))
	return h
}

// run executes a script of space-separated steps:
//
//	F S X        Allow (must be granted) then Done with Failure / Success / Excluded
//	F*7          the same step 7 times
//	A  FT        Allow (must be granted) / ForceTrial, and hold the ticket
//	dS dF dX     Done on the most recently held ticket (LIFO)
//	deny         Allow must be refused
//	+90s         advance the clock
//	R90s         RetryAfter(90s)
//	closed half-open open   State() must be this
//	reopen=60s   ReopenAt() must be now+60s
func (h *harness) run(script string) {
	h.t.Helper()
	for i, tok := range strings.Fields(script) {
		n := 1
		if base, count, ok := strings.Cut(tok, "*"); ok {
			c, err := strconv.Atoi(count)
			if err != nil || c < 1 {
				h.t.Fatalf("step %d %q: bad count", i, tok)
			}
			tok, n = base, c
		}
		for range n {
			h.step(i, tok)
		}
	}
}

func (h *harness) step(i int, tok string) {
	h.t.Helper()
	fail := func(format string, args ...any) {
		h.t.Helper()
		h.t.Fatalf("step %d %q: "+format, append([]any{i + 1, tok}, args...)...)
	}
	dur := func(s string) time.Duration {
		d, err := time.ParseDuration(s)
		if err != nil {
			fail("%v", err)
		}
		return d
	}
	outcome := map[string]Outcome{"S": Success, "F": Failure, "X": Excluded}
	switch {
	case tok == "S" || tok == "F" || tok == "X":
		tk, ok := h.b.Allow()
		if !ok {
			fail("Allow refused in state %v", h.b.State())
		}
		h.b.Done(tk, outcome[tok])
	case tok == "A":
		tk, ok := h.b.Allow()
		if !ok {
			fail("Allow refused in state %v", h.b.State())
		}
		h.held = append(h.held, tk)
	case tok == "FT":
		h.held = append(h.held, h.b.ForceTrial())
	case tok == "dS" || tok == "dF" || tok == "dX":
		if len(h.held) == 0 {
			fail("no held ticket")
		}
		tk := h.held[len(h.held)-1]
		h.held = h.held[:len(h.held)-1]
		h.b.Done(tk, outcome[tok[1:]])
	case tok == "deny":
		if _, ok := h.b.Allow(); ok {
			fail("Allow granted in state %v", h.b.State())
		}
	case strings.HasPrefix(tok, "+"):
		h.clk.Advance(dur(tok[1:]))
	case strings.HasPrefix(tok, "R"):
		h.b.RetryAfter(dur(tok[1:]))
	case strings.HasPrefix(tok, "reopen="):
		want := h.clk.Now().Add(dur(strings.TrimPrefix(tok, "reopen=")))
		if got := h.b.ReopenAt(); !got.Equal(want) {
			fail("ReopenAt = now%+v, want now%+v", got.Sub(h.clk.Now()), want.Sub(h.clk.Now()))
		}
	case tok == "closed" || tok == "half-open" || tok == "open":
		if got := h.b.State(); got.String() != tok {
			fail("state %v, want %s", got, tok)
		}
	default:
		fail("unknown step")
	}
}

type scriptCase struct {
	name   string
	why    string // the one-line reason this case exists
	script string
}

func runScripts(t *testing.T, p Policy, cases []scriptCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			newHarness(t, p).run(c.script)
		})
	}
}
