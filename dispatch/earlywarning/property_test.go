package earlywarning

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// phase is a stretch of traffic with one shape.
type phase struct {
	dur, interval time.Duration
	shape         func(i int) shape
}

// drawPolicy draws a policy around testPolicy's scale.
func drawPolicy(t *rapid.T) Policy {
	return Policy{
		Baseline:   time.Duration(rapid.IntRange(60, 300).Draw(t, "baseline_s")) * time.Second,
		Window:     time.Duration(rapid.IntRange(5, 30).Draw(t, "window_s")) * time.Second,
		Multiple:   rapid.Float64Range(2, 5).Draw(t, "multiple"),
		For:        time.Duration(rapid.IntRange(0, 20).Draw(t, "for_s")) * time.Second,
		MinSamples: rapid.IntRange(3, 20).Draw(t, "min_samples"),
		Cooldown:   time.Duration(rapid.IntRange(5, 120).Draw(t, "cooldown_s")) * time.Second,
		Probation:  time.Duration(rapid.IntRange(0, 120).Draw(t, "probation_s")) * time.Second,
		ErrorRate:  rapid.Float64Range(0.05, 0.5).Draw(t, "error_rate"),
	}
}

// run plays phases on a fresh sim with one watched channel a in a chain
// whose other members' breakers flip at random between phases.
func runPhases(t *rapid.T, p Policy, peers int, phases []phase) (*sim, *Detector) {
	s := newSim()
	d := s.detector("a", p)
	s.chain = []Member{{Detector: d, Closed: true}}
	for range peers {
		s.chain = append(s.chain, Member{Closed: true})
	}
	for i, ph := range phases {
		for j := 1; j < len(s.chain); j++ {
			s.chain[j].Closed = rapid.Bool().Draw(t, "peer_closed")
		}
		s.traffic(d, ph.dur, ph.interval, ph.shape)
		s.run(s.clk.Now().Add(ph.dur))
		_ = i
	}
	s.run(s.clk.Now().Add(time.Hour)) // every hop ends
	return s, d
}

// No demotion without the configured evidence: traffic whose latency never
// strays past Multiple × its usual level, with no errors, is never demoted,
// whatever the policy, the timing, the peers and the mix of streams.
func TestPropertyNoDemotionWithoutEvidence(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawPolicy(t)
		// Latencies in [base, base·(Multiple/1.6)]: the median is at least
		// base, so the threshold is at least base·Multiple, and the bins'
		// 25 % slack on either side still keeps every sample below it.
		base := time.Duration(rapid.IntRange(50, 2000).Draw(t, "base_ms")) * time.Millisecond
		spread := p.Multiple / 1.6
		var phases []phase
		for range rapid.IntRange(1, 4).Draw(t, "phases") {
			lat := rapid.SliceOfN(rapid.Float64Range(1, spread), 1, 20).Draw(t, "latencies")
			stream := rapid.Bool().Draw(t, "stream")
			phases = append(phases, phase{
				dur:      time.Duration(rapid.IntRange(1, 150).Draw(t, "dur_s")) * time.Second,
				interval: time.Duration(rapid.IntRange(200, 3000).Draw(t, "interval_ms")) * time.Millisecond,
				shape: func(i int) shape {
					l := time.Duration(float64(base) * lat[i%len(lat)])
					sh := shape{headers: l, first: -1, end: l + time.Millisecond, outcome: Success}
					if stream {
						sh.first, sh.end = l+time.Millisecond, l+2*time.Millisecond
					}
					if i%7 == 3 {
						sh.outcome = Excluded // a client's 400: not evidence
					}
					return sh
				},
			})
		}
		s, _ := runPhases(t, p, rapid.IntRange(0, 2).Draw(t, "peers"), phases)
		if dem := s.demotions("a"); len(dem) > 0 {
			t.Fatalf("demoted at %v without evidence (policy %+v)", dem, p)
		}
	})
}

// No judgement below MinSamples: traffic too sparse to ever fill the short
// window is never demoted, however slow and failing it is.
func TestPropertyNoJudgementBelowMinSamples(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawPolicy(t)
		p.MinSamples = rapid.IntRange(3, 20).Draw(t, "min")
		// One hop per window at most, each over before the next starts: a
		// window holds at most two samples (one done, one in flight).
		interval := p.Window + time.Duration(rapid.IntRange(1, 5000).Draw(t, "gap_ms"))*time.Millisecond
		var phases []phase
		for range rapid.IntRange(1, 4).Draw(t, "phases") {
			phases = append(phases, phase{
				dur:      time.Duration(rapid.IntRange(60, 600).Draw(t, "dur_s")) * time.Second,
				interval: interval,
				shape: func(i int) shape {
					l := time.Duration(rapid.Int64Range(int64(time.Millisecond), int64(interval-time.Millisecond)).Draw(t, "latency"))
					return shape{headers: l / 2, first: -1, end: l, outcome: Failure}
				},
			})
		}
		s, _ := runPhases(t, p, 1, phases)
		if dem := s.demotions("a"); len(dem) > 0 {
			t.Fatalf("demoted at %v with at most 2 samples per window, MinSamples %d", dem, p.MinSamples)
		}
	})
}

// flapRunsWithDemotions counts the flapping property's runs that demoted
// at all: a property that never sees a demotion proves nothing.
var flapRunsWithDemotions int

// No flapping faster than the cooldown: whatever the traffic (healthy,
// slow, hanging, failing, in any order), two demotions of a channel start
// at least Cooldown apart, and each lasts at least Cooldown.
func TestPropertyNoFlappingFasterThanCooldown(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawPolicy(t)
		shapes := []func(i int) shape{
			func(int) shape { return ok(100 * time.Millisecond) },
			func(int) shape { return ok(2 * time.Second) },
			func(int) shape { return shape{headers: -1, first: -1, end: 30 * time.Second, outcome: Failure} },
			func(i int) shape {
				sh := ok(100 * time.Millisecond)
				if i%2 == 0 {
					sh.outcome = Failure
				}
				return sh
			},
		}
		var phases []phase
		for range rapid.IntRange(2, 10).Draw(t, "phases") {
			phases = append(phases, phase{
				dur:      time.Duration(rapid.IntRange(1, 90).Draw(t, "dur_s")) * time.Second,
				interval: time.Duration(rapid.IntRange(200, 1000).Draw(t, "interval_ms")) * time.Millisecond,
				shape:    shapes[rapid.IntRange(0, len(shapes)-1).Draw(t, "shape")],
			})
		}
		s, _ := runPhases(t, p, 1, phases)
		if len(s.demotions("a")) > 0 {
			flapRunsWithDemotions++
		}
		var last time.Time
		for _, tr := range s.trans {
			switch tr.To {
			case Demoted:
				if !last.IsZero() && tr.At.Sub(last) < p.Cooldown {
					t.Fatalf("demoted at %v, %v after the previous demotion (cooldown %v): %+v", tr.At, tr.At.Sub(last), p.Cooldown, s.trans)
				}
				if tr.Until.Sub(tr.At) < p.Cooldown {
					t.Fatalf("demotion for %v, shorter than the cooldown %v", tr.Until.Sub(tr.At), p.Cooldown)
				}
				last = tr.At
			case Probation:
				if tr.From != Demoted || tr.At.Sub(last) < p.Cooldown {
					t.Fatalf("probation at %v from %v, %v after the demotion (cooldown %v)", tr.At, tr.From, tr.At.Sub(last), p.Cooldown)
				}
			}
		}
	})
	if flapRunsWithDemotions == 0 {
		t.Fatal("no run demoted the channel: the property was never exercised")
	}
	t.Logf("%d runs demoted the channel", flapRunsWithDemotions)
}

// A demoted channel still serves when it is the only healthy one, and
// nothing is ever skipped: Order returns every member exactly once, moves
// a member only while another can serve in its place, and moves nothing
// when no other member's breaker is closed.
func TestPropertyOrderNeverStrandsAChain(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := newSim()
		n := rapid.IntRange(1, 3).Draw(t, "members")
		ms := make([]Member, n)
		demoted := make([]bool, n)
		for i := range ms {
			ms[i].Closed = rapid.Bool().Draw(t, "closed")
			if rapid.Bool().Draw(t, "watched") {
				ms[i].Detector = s.detector(string(rune('a'+i)), testPolicy)
				if rapid.Bool().Draw(t, "demoted") {
					ms[i].Detector.demote(ReasonHeaderLatency, "drawn")
					demoted[i] = true
				}
			}
		}
		s.clk.Advance(time.Duration(rapid.IntRange(0, 60).Draw(t, "later_s")) * time.Second)
		for i := range ms {
			if demoted[i] {
				demoted[i] = ms[i].Detector.State() == Demoted
			}
		}
		var p Plan
		Order(&p, ms)
		got := slices.Clone(p.Order)
		slices.Sort(got)
		for i := range n {
			if len(got) != n || got[i] != i {
				t.Fatalf("order %v is not a permutation of %d members", p.Order, n)
			}
		}
		others := func(i int) bool {
			for j := range ms {
				if j != i && ms[j].Closed && !demoted[j] {
					return true
				}
			}
			return false
		}
		for k, mv := range p.Moves {
			if !demoted[mv.Index] || !others(mv.Index) {
				t.Fatalf("moved %d (demoted %v) with no other member able to serve: %+v", mv.Index, demoted[mv.Index], ms)
			}
			if p.Order[n-len(p.Moves)+k] != mv.Index {
				t.Fatalf("moves %v are not at the end of %v", p.Moves, p.Order)
			}
		}
		for i := range ms {
			if demoted[i] && others(i) && !slices.ContainsFunc(p.Moves, func(m Move) bool { return m.Index == i }) {
				t.Fatalf("demoted member %d with a healthy peer was not moved: %v", i, p.Order)
			}
		}
	})
}
