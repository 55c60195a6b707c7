package earlywarning

import (
	"strings"
	"testing"
	"time"
)

// rlPolicy is testPolicy with rate-limit demotion at 90 %.
var rlPolicy = func() Policy { p := testPolicy; p.RateLimit = 0.9; return p }()

// orderOf returns the order Order makes of a (with d) and a healthy peer.
func orderOf(d *Detector) Plan {
	var p Plan
	Order(&p, []Member{{Detector: d, Closed: true}, {Closed: true}})
	return p
}

// The contract of DESIGN §16: a window stated past the threshold demotes
// the channel at once (no samples, no For) until the window resets, then
// the channel is back in its place, in the normal state.
func TestRateLimitWindowDemotesUntilReset(t *testing.T) {
	s := newSim()
	d := s.detector("a", rlPolicy)
	now := s.clk.Now()
	reset := now.Add(20 * time.Second)
	d.Window(Window{Kind: "requests", Utilization: 0.92, ResetAt: reset})
	p := orderOf(d)
	if len(p.Moves) != 1 || p.Order[0] != 1 || p.Order[1] != 0 {
		t.Fatalf("plan = %+v, want a moved behind its peer", p)
	}
	mv := p.Moves[0]
	if mv.Reason != ReasonRateLimit || !mv.Until.Equal(reset) || !strings.Contains(mv.Detail, "requests window 92% used") {
		t.Fatalf("move = %+v, want ratelimit until the reset %v", mv, reset)
	}
	s.clk.Advance(19 * time.Second)
	if p := orderOf(d); len(p.Moves) != 1 {
		t.Fatalf("moves a second before the reset = %+v, want still demoted", p.Moves)
	}
	s.clk.Advance(time.Second)
	if p := orderOf(d); len(p.Moves) != 0 || p.Order[0] != 0 {
		t.Fatalf("plan at the reset = %+v, want a back in place", p)
	}
	if st := d.State(); st != Normal {
		t.Fatalf("state after the reset = %v, want normal (no probation)", st)
	}
	last := s.trans[len(s.trans)-1]
	if last.From != Demoted || last.To != Normal || last.Reason != ReasonWindowReset || !last.At.Equal(reset) {
		t.Fatalf("last transition = %+v, want demoted → normal by window_reset at the reset", last)
	}
}

// Which windows are evidence, table-driven: each case states one window
// and says whether the channel is moved.
func TestRateLimitWindowEvidence(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		limit  float64 // Policy.RateLimit
		w      Window
		demote bool
	}{
		// below the threshold: a busy window is not a full one
		{"below", 0.9, Window{Kind: "tokens", Utilization: 0.89, ResetAt: at.Add(time.Minute)}, false},
		// exactly at the threshold counts
		{"at", 0.9, Window{Kind: "tokens", Utilization: 0.9, ResetAt: at.Add(time.Minute)}, true},
		// a stale window (its reset passed) says nothing about now
		{"reset passed", 0.9, Window{Kind: "requests", Utilization: 1, ResetAt: at.Add(-time.Second)}, false},
		// no reset stated: evidence, demoted for one cooldown
		{"no reset", 0.9, Window{Kind: "requests", Utilization: 0.95}, true},
		// RateLimit 0 is off, however full the window
		{"off", 0, Window{Kind: "requests", Utilization: 1, ResetAt: at.Add(time.Minute)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim()
			p := testPolicy
			p.RateLimit = tc.limit
			d := s.detector("a", p)
			d.Window(tc.w)
			plan := orderOf(d)
			if got := len(plan.Moves) == 1; got != tc.demote {
				t.Fatalf("moved = %v, want %v (plan %+v)", got, tc.demote, plan)
			}
			if tc.demote && tc.w.ResetAt.IsZero() {
				if want := at.Add(p.WithDefaults().Cooldown); !plan.Moves[0].Until.Equal(want) {
					t.Fatalf("until = %v, want one cooldown (%v)", plan.Moves[0].Until, want)
				}
			}
		})
	}
}

// The guards hold for windows too: when the peer's window is as full, the
// chain is full, not the channel, and nobody moves; a window never makes a
// channel skipped.
func TestRateLimitWindowGuards(t *testing.T) {
	s := newSim()
	a, b := s.detector("a", rlPolicy), s.detector("b", rlPolicy)
	reset := s.clk.Now().Add(30 * time.Second)
	a.Window(Window{Kind: "requests", Utilization: 0.95, ResetAt: reset})
	b.Window(Window{Kind: "tokens", Utilization: 0.97, ResetAt: reset})
	var p Plan
	Order(&p, []Member{{Detector: a, Closed: true}, {Detector: b, Closed: true}})
	if len(p.Moves) != 0 || len(p.Order) != 2 {
		t.Fatalf("plan = %+v, want both in place when both windows are full", p)
	}
	// the peer's breaker is open: a is the last healthy one and stays
	Order(&p, []Member{{Detector: a, Closed: true}, {Closed: false}})
	if len(p.Moves) != 0 || p.Order[0] != 0 {
		t.Fatalf("plan = %+v, want a in place before an open peer", p)
	}
}

// A ratelimit demotion after probation neither lengthens itself nor
// doubles the next cooldown: the backoff is for a channel that keeps
// failing, a full window is the provider's statement.
func TestRateLimitDemotionKeepsBackoff(t *testing.T) {
	s := newSim()
	d := s.detector("a", rlPolicy)
	d.mu.Lock()
	d.state, d.until = Probation, s.clk.Now().Add(time.Minute)
	d.mu.Unlock()
	reset := s.clk.Now().Add(5 * time.Second)
	d.Window(Window{Kind: "requests", Utilization: 1, ResetAt: reset})
	p := orderOf(d)
	if len(p.Moves) != 1 || !p.Moves[0].Until.Equal(reset) {
		t.Fatalf("plan = %+v, want a demoted until the reset", p)
	}
	if d.backoff != 0 {
		t.Fatalf("backoff = %d after a ratelimit demotion, want 0", d.backoff)
	}
	if snap := d.Snapshot(); snap.Window.Utilization != 1 || snap.Reason != ReasonRateLimit || snap.State != Demoted {
		t.Fatalf("snapshot = %+v, want the window and the ratelimit reason", snap)
	}
}
