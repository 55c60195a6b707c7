package earlywarning

import (
	"container/heap"
	"time"

	"github.com/jonboulle/clockwork"
)

// sim drives detectors with traffic on a fake clock: hops start at a
// steady rate, each one's headers, first token and end happen at the
// times its shape says, in time order. Before each hop starts, the chain
// is ordered, as the request path does.
type sim struct {
	clk    *clockwork.FakeClock
	chain  []Member
	events eventQueue
	seq    int
	plans  []Plan // every plan Order made, in time order
	trans  []Transition
}

// shape is one hop: when its headers and first token arrive (negative:
// never, the hop ends without them) and how it ends.
type shape struct {
	headers, first, end time.Duration
	outcome             Outcome
}

func newSim() *sim {
	return &sim{clk: clockwork.NewFakeClockAt(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))}
}

// detector returns a detector on the sim's clock that logs transitions.
func (s *sim) detector(name string, p Policy) *Detector {
	return New(name, p, WithClock(s.clk), WithOnTransition(func(t Transition) { s.trans = append(s.trans, t) }))
}

type event struct {
	at  time.Time
	seq int
	f   func()
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func (s *sim) at(t time.Time, f func()) {
	s.seq++
	heap.Push(&s.events, event{at: t, seq: s.seq, f: f})
}

// run processes events until t, then sets the clock to t.
func (s *sim) run(until time.Time) {
	for s.events.Len() > 0 && !s.events[0].at.After(until) {
		e := heap.Pop(&s.events).(event)
		if d := e.at.Sub(s.clk.Now()); d > 0 {
			s.clk.Advance(d)
		}
		e.f()
	}
	if d := until.Sub(s.clk.Now()); d > 0 {
		s.clk.Advance(d)
	}
}

// traffic schedules hops on d every interval for dur from now; shapeOf
// gives the i-th hop's shape. Each hop orders the chain first.
func (s *sim) traffic(d *Detector, dur, interval time.Duration, shapeOf func(i int) shape) {
	start := s.clk.Now()
	for i := 0; time.Duration(i)*interval < dur; i++ {
		i := i
		s.at(start.Add(time.Duration(i)*interval), func() {
			s.order()
			sh := shapeOf(i)
			h := new(Hop)
			d.Begin(h, sh.first >= 0)
			now := s.clk.Now()
			if sh.headers >= 0 {
				s.at(now.Add(sh.headers), h.Headers)
			}
			if sh.first >= 0 {
				s.at(now.Add(sh.first), h.FirstToken)
			}
			s.at(now.Add(sh.end), func() { h.End(sh.outcome) })
		})
	}
}

func (s *sim) order() {
	if len(s.chain) == 0 {
		return
	}
	var p Plan
	Order(&p, s.chain)
	s.plans = append(s.plans, p)
}

// ok is a healthy streamed hop: headers at l, first token at 2l, end at 4l.
func ok(l time.Duration) shape {
	return shape{headers: l, first: 2 * l, end: 4 * l, outcome: Success}
}

// demotions returns the times the detector named name was demoted.
func (s *sim) demotions(name string) []time.Time {
	var out []time.Time
	for _, t := range s.trans {
		if t.Name == name && t.To == Demoted {
			out = append(out, t.At)
		}
	}
	return out
}
