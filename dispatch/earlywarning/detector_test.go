package earlywarning

import (
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// testPolicy is small enough to read: a 2-minute baseline, a 10 s window,
// 3×, 5 s of evidence, 5 samples, 30 s cooldown and probation.
var testPolicy = Policy{
	Baseline: 2 * time.Minute, Window: 10 * time.Second, Multiple: 3, For: 5 * time.Second,
	MinSamples: 5, Cooldown: 30 * time.Second, Probation: 30 * time.Second, ErrorRate: 0.125,
}

// warm gives d two minutes of healthy 100 ms traffic, 2 per second.
func warm(s *sim, d *Detector) {
	s.traffic(d, 2*time.Minute, 500*time.Millisecond, func(int) shape { return ok(100 * time.Millisecond) })
	s.run(s.clk.Now().Add(2 * time.Minute))
}

// A channel whose latency stays within its usual range is never demoted,
// however long it runs.
func TestHealthyTrafficNeverDemotes(t *testing.T) {
	s := newSim()
	d := s.detector("a", testPolicy)
	s.chain = []Member{{Detector: d, Closed: true}, {Closed: true}}
	warm(s, d)
	jitter := []time.Duration{80, 100, 120, 250, 90} // ms; 250 ms is under 3× the median
	s.traffic(d, 10*time.Minute, 500*time.Millisecond, func(i int) shape { return ok(jitter[i%len(jitter)] * time.Millisecond) })
	s.run(s.clk.Now().Add(10 * time.Minute))
	if n := len(s.demotions("a")); n != 0 {
		t.Fatalf("%d demotions of a healthy channel: %+v", n, s.trans)
	}
}

// The incident the detector exists for: header latency turns 10× worse
// and stays there. The channel is demoted after the evidence lasted For,
// moved behind the healthy peer with the reason, and returns after the
// cooldown on probation.
func TestSlowHeadersDemoteAfterFor(t *testing.T) {
	s := newSim()
	d := s.detector("a", testPolicy)
	s.chain = []Member{{Detector: d, Closed: true}, {Closed: true}}
	warm(s, d)
	began := s.clk.Now()
	s.traffic(d, 40*time.Second, 500*time.Millisecond, func(int) shape { return ok(time.Second) })
	s.run(began.Add(20 * time.Second))
	dem := s.demotions("a")
	if len(dem) != 1 {
		t.Fatalf("demotions = %v, want one", dem)
	}
	// Slow hops count from their start (in flight); the window needs 5
	// samples and a majority of them slow, then For (5 s) more.
	if lag := dem[0].Sub(began); lag < testPolicy.For || lag > 15*time.Second {
		t.Errorf("demoted %v after the latency jump, want between For and 15 s", lag)
	}
	var moved *Move
	for _, p := range s.plans {
		if len(p.Moves) > 0 {
			moved = &p.Moves[0]
			if p.Order[0] != 1 || p.Order[1] != 0 {
				t.Fatalf("order = %v, want the peer first", p.Order)
			}
			break
		}
	}
	if moved == nil || moved.Reason != ReasonHeaderLatency || !strings.Contains(moved.Detail, "header latency") {
		t.Fatalf("move = %+v, want header_latency with its evidence", moved)
	}
	if got := d.State(); got != Demoted {
		t.Fatalf("state = %v during the cooldown", got)
	}
	s.events = nil // the channel recovers: no more traffic
	s.run(dem[0].Add(testPolicy.Cooldown))
	if got := d.State(); got != Probation {
		t.Fatalf("state = %v after the cooldown, want probation", got)
	}
}

// Hops that never get headers count while they wait: a channel that hangs
// completes nothing, and is demoted all the same.
func TestHangingHopsCountInFlight(t *testing.T) {
	s := newSim()
	d := s.detector("a", testPolicy)
	s.chain = []Member{{Detector: d, Closed: true}, {Closed: true}}
	warm(s, d)
	began := s.clk.Now()
	// Nothing answers within the test: every hop still waits at the end.
	s.traffic(d, 20*time.Second, 500*time.Millisecond, func(int) shape {
		return shape{headers: -1, first: -1, end: time.Hour, outcome: Failure}
	})
	s.run(began.Add(20 * time.Second))
	dem := s.demotions("a")
	if len(dem) != 1 {
		t.Fatalf("demotions = %v, want one while every hop is still in flight", dem)
	}
	if snap := d.Snapshot(); snap.InFlight == 0 || snap.Hops != 0 {
		t.Errorf("snapshot = %+v, want hops in flight and none completed", snap)
	}
}

// A blip shorter than For is not an incident.
func TestBlipShorterThanForIsIgnored(t *testing.T) {
	s := newSim()
	p := testPolicy
	p.For = 15 * time.Second
	d := s.detector("a", p)
	s.chain = []Member{{Detector: d, Closed: true}, {Closed: true}}
	warm(s, d)
	began := s.clk.Now()
	s.traffic(d, 6*time.Second, 500*time.Millisecond, func(int) shape { return ok(time.Second) })
	s.run(began.Add(6 * time.Second))
	s.traffic(d, time.Minute, 500*time.Millisecond, func(int) shape { return ok(100 * time.Millisecond) })
	s.run(began.Add(90 * time.Second))
	if dem := s.demotions("a"); len(dem) != 0 {
		t.Fatalf("demoted at %v by a 6 s blip with For 15 s", dem)
	}
}

// Below MinSamples there is no judgement, however bad the few samples look.
func TestNoJudgementBelowMinSamples(t *testing.T) {
	s := newSim()
	p := testPolicy
	p.MinSamples = 30 // the 10 s window at 2/s never holds 30
	d := s.detector("a", p)
	s.chain = []Member{{Detector: d, Closed: true}, {Closed: true}}
	warm(s, d)
	s.traffic(d, time.Minute, 500*time.Millisecond, func(int) shape {
		return shape{headers: 5 * time.Second, first: 6 * time.Second, end: 7 * time.Second, outcome: Failure}
	})
	s.run(s.clk.Now().Add(time.Minute))
	if dem := s.demotions("a"); len(dem) != 0 {
		t.Fatalf("demoted at %v with fewer samples than MinSamples", dem)
	}
}

// Errors count toward the error evidence whether they came before or
// inside a stream; a client's own errors (Excluded) never do.
func TestErrorRateEvidence(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outcome Outcome
		want    int
	}{
		{"failures demote", Failure, 1},
		{"excluded outcomes do not", Excluded, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim()
			d := s.detector("a", testPolicy)
			s.chain = []Member{{Detector: d, Closed: true}, {Closed: true}}
			warm(s, d)
			// One hop in four fails after its first token: 25 % > 12.5 %.
			s.traffic(d, 30*time.Second, 500*time.Millisecond, func(i int) shape {
				sh := ok(100 * time.Millisecond)
				if i%4 == 0 {
					sh.outcome = tc.outcome
				}
				return sh
			})
			s.run(s.clk.Now().Add(30 * time.Second))
			if got := s.demotions("a"); len(got) != tc.want {
				t.Fatalf("demotions = %v, want %d", got, tc.want)
			}
			if tc.want > 0 {
				if r := s.trans[0].Reason; r != ReasonErrorRate {
					t.Errorf("reason = %q, want error_rate", r)
				}
			}
		})
	}
}

// A count breaker's evidence is a number of errors in the window.
func TestErrorCountEvidence(t *testing.T) {
	s := newSim()
	p := testPolicy
	p.ErrorRate, p.ErrorCount = 0, 2
	d := s.detector("a", p)
	s.chain = []Member{{Detector: d, Closed: true}, {Closed: true}}
	warm(s, d)
	s.traffic(d, 10*time.Second, 500*time.Millisecond, func(i int) shape {
		sh := ok(100 * time.Millisecond)
		if i == 3 || i == 7 {
			sh.outcome = Failure
		}
		return sh
	})
	s.run(s.clk.Now().Add(20 * time.Second))
	if got := s.demotions("a"); len(got) != 1 {
		t.Fatalf("demotions = %v, want one after 2 errors", got)
	}
}

// When every channel of the chain is slow, the chain is slow: nobody is
// demoted (a slow day is not an outage).
func TestEveryChannelSlowIsNotAnOutage(t *testing.T) {
	s := newSim()
	a, b := s.detector("a", testPolicy), s.detector("b", testPolicy)
	s.chain = []Member{{Detector: a, Closed: true}, {Detector: b, Closed: true}}
	s.traffic(a, 2*time.Minute, 500*time.Millisecond, func(int) shape { return ok(100 * time.Millisecond) })
	s.traffic(b, 2*time.Minute, 500*time.Millisecond, func(int) shape { return ok(100 * time.Millisecond) })
	s.run(s.clk.Now().Add(2 * time.Minute))
	s.traffic(a, time.Minute, 500*time.Millisecond, func(int) shape { return ok(time.Second) })
	s.traffic(b, time.Minute, 500*time.Millisecond, func(int) shape { return ok(time.Second) })
	s.run(s.clk.Now().Add(time.Minute))
	if len(s.trans) != 0 {
		t.Fatalf("transitions on a uniformly slow chain: %+v", s.trans)
	}
	if sa, sb := a.Snapshot(), b.Snapshot(); !sa.Suspect || !sb.Suspect {
		t.Fatalf("both should show the evidence (suspect) without being demoted: %+v %+v", sa, sb)
	}
}

// The last healthy channel keeps its place: with its peer's breaker open,
// a slow channel is not demoted, and a demoted one is not moved.
func TestLastHealthyChannelKeepsItsPlace(t *testing.T) {
	s := newSim()
	d := s.detector("a", testPolicy)
	s.chain = []Member{{Detector: d, Closed: true}, {Closed: false}}
	warm(s, d)
	s.traffic(d, time.Minute, 500*time.Millisecond, func(int) shape { return ok(time.Second) })
	s.run(s.clk.Now().Add(time.Minute))
	if dem := s.demotions("a"); len(dem) != 0 {
		t.Fatalf("the last healthy channel was demoted at %v", dem)
	}
	// Demoted while the peer was up, then the peer's breaker opens: the
	// demoted channel is tried first again.
	s.chain[1].Closed = true
	s.traffic(d, 20*time.Second, 500*time.Millisecond, func(int) shape { return ok(time.Second) })
	s.run(s.clk.Now().Add(20 * time.Second))
	if d.State() != Demoted {
		t.Fatalf("state = %v, want demoted with the peer back", d.State())
	}
	s.chain[1].Closed = false
	var p Plan
	Order(&p, s.chain)
	if len(p.Moves) != 0 || p.Order[0] != 0 {
		t.Fatalf("plan = %v/%v: a demoted channel must serve first when the others cannot", p.Order, p.Moves)
	}
}

// Evidence during probation demotes again at once, for twice the cooldown;
// a clean probation resets that.
func TestProbationBacksOff(t *testing.T) {
	s := newSim()
	d := s.detector("a", testPolicy)
	s.chain = []Member{{Detector: d, Closed: true}, {Closed: true}}
	warm(s, d)
	slow := func(int) shape { return ok(time.Second) }
	s.traffic(d, 10*time.Minute, 500*time.Millisecond, slow)
	s.run(s.clk.Now().Add(3 * time.Minute))
	var got []time.Duration
	for _, tr := range s.trans {
		if tr.To == Demoted {
			got = append(got, tr.Until.Sub(tr.At))
		}
	}
	if len(got) < 3 || got[0] != testPolicy.Cooldown || got[1] != 2*testPolicy.Cooldown || got[2] != 4*testPolicy.Cooldown {
		t.Fatalf("demotion lengths = %v, want 30s, 1m, 2m, …", got)
	}
}

// A channel that keeps failing is demoted again the moment each probation
// begins (no For), each cooldown twice the previous one up to MaxBackoff ×;
// a clean probation then resets the cooldown to its base. Error evidence
// needs no baseline, so the failures can last as long as the cap takes.
func TestProbationBackoffCapAndReset(t *testing.T) {
	s := newSim()
	d := s.detector("a", testPolicy)
	s.chain = []Member{{Detector: d, Closed: true}, {Closed: true}}
	warm(s, d)
	failing := func(int) shape { sh := ok(100 * time.Millisecond); sh.outcome = Failure; return sh }
	s.traffic(d, 12*time.Minute, 500*time.Millisecond, failing)
	s.run(s.clk.Now().Add(12 * time.Minute))
	var dem []Transition
	for _, tr := range s.trans {
		if tr.To == Demoted {
			dem = append(dem, tr)
		}
	}
	c := testPolicy.Cooldown
	want := []time.Duration{c, 2 * c, 4 * c, MaxBackoff * c, MaxBackoff * c}
	if len(dem) < len(want) {
		t.Fatalf("%d demotions in 12 min of failures, want at least %d: %+v", len(dem), len(want), dem)
	}
	for i, w := range want {
		if got := dem[i].Until.Sub(dem[i].At); got != w {
			t.Errorf("demotion %d lasted %v, want %v", i+1, got, w)
		}
		if i == 0 {
			continue
		}
		// Probation began when the previous demotion ended; the evidence
		// was there, so the next demotion came at once, not For later.
		if gap := dem[i].At.Sub(dem[i-1].Until); gap < 0 || gap >= testPolicy.For {
			t.Errorf("demotion %d came %v into probation, want at once (< For %v)", i+1, gap, testPolicy.For)
		}
	}

	// The channel recovers: its last demotion ends, probation passes clean.
	s.traffic(d, 10*time.Minute, 500*time.Millisecond, func(int) shape { return ok(100 * time.Millisecond) })
	s.run(s.clk.Now().Add(10 * time.Minute))
	if last := s.trans[len(s.trans)-1]; d.State() != Normal || last.Reason != ReasonProbationPassed {
		t.Fatalf("state %v after a clean probation (last transition %+v)", d.State(), last)
	}
	n := len(s.trans)
	s.traffic(d, time.Minute, 500*time.Millisecond, failing)
	s.run(s.clk.Now().Add(time.Minute))
	var again []Transition
	for _, tr := range s.trans[n:] {
		if tr.To == Demoted {
			again = append(again, tr)
		}
	}
	if len(again) == 0 || again[0].Until.Sub(again[0].At) != c {
		t.Fatalf("after a clean probation the next demotion = %+v, want one of the base cooldown %v", again, c)
	}
}

// Evidence that comes back during probation demotes at once: For is not
// waited again (TestProbationBackoffCapAndReset's evidence never cleared,
// so For had long passed by the time probation began).
func TestFreshEvidenceOnProbationDemotesAtOnce(t *testing.T) {
	s := newSim()
	d := s.detector("a", testPolicy)
	s.chain = []Member{{Detector: d, Closed: true}, {Closed: true}}
	warm(s, d)
	failing := func(int) shape { sh := ok(100 * time.Millisecond); sh.outcome = Failure; return sh }
	s.traffic(d, 10*time.Second, 500*time.Millisecond, failing)
	s.run(s.clk.Now().Add(10 * time.Second))
	dem := s.demotions("a")
	if len(dem) != 1 {
		t.Fatalf("demotions = %v, want one", dem)
	}
	// Healthy through the cooldown (the window clears), into probation.
	probation := dem[0].Add(testPolicy.Cooldown)
	s.traffic(d, probation.Sub(s.clk.Now())+2*time.Second, 500*time.Millisecond, func(int) shape { return ok(100 * time.Millisecond) })
	s.run(probation.Add(2 * time.Second))
	if d.State() != Probation || len(s.demotions("a")) != 1 {
		t.Fatalf("state %v, demotions %v: want probation after one demotion", d.State(), s.demotions("a"))
	}
	began := s.clk.Now()
	s.traffic(d, 20*time.Second, 500*time.Millisecond, failing)
	s.run(began.Add(20 * time.Second))
	dem = s.demotions("a")
	if len(dem) != 2 {
		t.Fatalf("demotions = %v, want a second one on probation", dem)
	}
	if lag := dem[1].Sub(began); lag >= testPolicy.For {
		t.Errorf("demoted %v after the failures came back on probation, want at once (< For %v)", lag, testPolicy.For)
	}
}

// Excluded outcomes (client errors, cancellations, the chain deadline)
// count on neither side of the error rate: they do not dilute it.
func TestExcludedDoNotDiluteErrorRate(t *testing.T) {
	s := newSim()
	d := s.detector("a", testPolicy)
	s.chain = []Member{{Detector: d, Closed: true}, {Closed: true}}
	warm(s, d)
	// Per 10 hops: 1 failure, 1 success, 8 excluded: 50 % of the counted
	// hops fail (10 % if the excluded counted, under the 12.5 % line).
	s.traffic(d, 30*time.Second, 100*time.Millisecond, func(i int) shape {
		sh := ok(100 * time.Millisecond)
		switch i % 10 {
		case 0:
			sh.outcome = Failure
		case 1:
		default:
			sh.outcome = Excluded
		}
		return sh
	})
	s.run(s.clk.Now().Add(30 * time.Second))
	if got := s.demotions("a"); len(got) != 1 || s.trans[0].Reason != ReasonErrorRate {
		t.Fatalf("demotions = %v (%+v), want one for error_rate", got, s.trans)
	}
}

// The window is bad when MORE than half its samples are slow: half is not
// enough (a noisy provider's tail must not tip it).
func TestHalfSlowIsNotEvidence(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	d := New("a", testPolicy, WithClock(clk))
	hop := func(latency time.Duration) {
		var h Hop
		d.Begin(&h, false)
		clk.Advance(latency)
		h.Headers()
		h.End(Success)
	}
	for i := 0; i < 20; i++ { // the baseline: 100 ms
		hop(100 * time.Millisecond)
		clk.Advance(time.Second)
	}
	clk.Advance(testPolicy.Window) // the baseline leaves the short window
	for i := 0; i < 3; i++ {
		hop(time.Second)
		hop(100 * time.Millisecond)
	}
	clk.Advance(time.Second)
	if s := d.Snapshot(); s.Header.Samples != 6 || s.Header.Slow != 3 || s.Suspect {
		t.Fatalf("3 slow of 6: %+v, want no evidence", s)
	}
	hop(time.Second)
	clk.Advance(time.Second)
	if s := d.Snapshot(); s.Header.Slow != 4 || !s.Suspect || s.Reason != ReasonHeaderLatency {
		t.Fatalf("4 slow of 7: %+v, want header latency evidence", s)
	}
}
