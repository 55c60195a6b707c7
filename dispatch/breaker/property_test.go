package breaker

import (
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"pgregory.net/rapid"
)

// model is the reference: the contract of DESIGN.md §2 L1 written as plainly
// as possible. Windows are slices of every event since the last close,
// filtered on each use: no rings, no capped buffers.
type model struct {
	p     Policy
	epoch time.Time

	state      State
	gen        int
	reopenAt   time.Time
	halfSince  time.Time
	holder     int       // trial id holding the half-open slot, 0: free
	holderAt   time.Time // when it took the slot (TrialTimeout frees it)
	trials     int
	goodTrials int

	failures []time.Time // count mode
	events   []event     // rate mode

	log []string // "from>to:reason", compared with the callback
}

type event struct {
	at     time.Time
	failed bool
}

type refTicket struct {
	gen, trial int
	forced     bool
}

func (m *model) to(s State, at time.Time, reason string) {
	m.log = append(m.log, fmt.Sprintf("%v>%v:%s", m.state, s, reason))
	m.state = s
	m.gen++
	m.holder, m.goodTrials = 0, 0
	switch s {
	case Closed:
		m.failures, m.events = nil, nil
	case HalfOpen:
		m.halfSince = at
	}
}

func (m *model) open(at, until time.Time, reason string) {
	m.to(Open, at, reason)
	m.reopenAt = until
}

// tick applies what time alone does.
func (m *model) tick(now time.Time) {
	if m.state == Open && !now.Before(m.reopenAt) {
		m.to(HalfOpen, m.reopenAt, ReasonCooldownElapsed)
	}
	if m.state == HalfOpen && m.p.Mode == RateMode && m.goodTrials > 0 && now.Sub(m.halfSince) >= m.p.Cooldown/2 {
		m.to(Closed, now, ReasonTrialSucceeded)
	}
}

// sec is the one-second bucket of t; an event counts while its second is one
// of the last ceil(Window/1s) seconds, the current one included.
func (m *model) sec(t time.Time) int64 {
	return int64(t.Sub(m.epoch) / time.Second) // the fake clock never goes before epoch
}

func (m *model) rateIn(now time.Time) (req, errs int) {
	n := int64((m.p.Window + time.Second - 1) / time.Second)
	for _, e := range m.events {
		if m.sec(e.at) > m.sec(now)-n {
			req++
			if e.failed {
				errs++
			}
		}
	}
	return req, errs
}

func (m *model) failuresIn(now time.Time) int {
	c := 0
	for _, f := range m.failures {
		if now.Sub(f) < m.p.Window {
			c++
		}
	}
	return c
}

func (m *model) allow(now time.Time) (refTicket, bool) {
	m.tick(now)
	switch {
	case m.state == Closed:
		return refTicket{gen: m.gen}, true
	case m.state == HalfOpen:
		if m.holder != 0 && now.Sub(m.holderAt) >= m.p.TrialTimeout {
			m.holder = 0 // abandoned: its late Done is a duplicate
		}
		if m.holder == 0 {
			m.trials++
			m.holder, m.holderAt = m.trials, now
			return refTicket{gen: m.gen, trial: m.trials}, true
		}
	}
	return refTicket{}, false
}

func (m *model) force(now time.Time) refTicket {
	m.tick(now)
	return refTicket{gen: m.gen, forced: m.state != Closed}
}

func (m *model) done(now time.Time, t refTicket, o Outcome) {
	m.tick(now)
	if t.gen != m.gen {
		return
	}
	switch m.state {
	case Closed:
		if o == Excluded {
			return
		}
		if m.p.Mode == CountMode {
			if o == Failure {
				m.failures = append(m.failures, now)
				if m.failuresIn(now) >= m.p.Failures {
					m.open(now, now.Add(m.p.Cooldown), ReasonFailures)
				}
			}
			return
		}
		m.events = append(m.events, event{now, o == Failure})
		if req, errs := m.rateIn(now); o == Failure && req >= m.p.MinRequests && float64(errs)/float64(req) > m.p.Threshold {
			m.open(now, now.Add(m.p.Cooldown), ReasonErrorRate)
		}
	case HalfOpen:
		mine := t.trial != 0 && t.trial == m.holder
		if !mine && !t.forced {
			return
		}
		if mine {
			m.holder = 0
		}
		switch o {
		case Failure:
			m.open(now, now.Add(m.p.Cooldown), ReasonTrialFailed)
		case Success:
			m.goodTrials++
			if t.forced || m.p.Mode == CountMode || m.goodTrials >= 3 || now.Sub(m.halfSince) >= m.p.Cooldown/2 {
				m.to(Closed, now, ReasonTrialSucceeded)
			}
		}
	case Open:
		if !t.forced {
			return
		}
		switch o {
		case Failure:
			if until := now.Add(m.p.Cooldown); until.After(m.reopenAt) {
				m.reopenAt = until
			}
		case Success:
			m.to(Closed, now, ReasonTrialSucceeded)
		}
	}
}

func (m *model) retryAfter(now time.Time, d time.Duration) {
	if d <= 0 {
		return
	}
	if d > 5*time.Minute {
		d = 5 * time.Minute
	}
	m.tick(now)
	until := now.Add(d)
	if m.state != Open {
		m.open(now, until, ReasonRetryAfter)
	} else if until.After(m.reopenAt) {
		m.reopenAt = until
	}
}

func (m *model) currentState(now time.Time) State {
	m.tick(now)
	return m.state
}

type pair struct {
	real Ticket
	ref  refTicket
}

// checkAgainstModel drives the real breaker and the model with the same random
// sequence of calls and asserts they agree after every step.
func checkAgainstModel(rt *rapid.T, p Policy, maxStep time.Duration) {
	clk := clockwork.NewFakeClockAt(t0)
	var log []string
	b := New("ch", p, WithClock(clk), WithOnTransition(func(tr Transition) {
		log = append(log, fmt.Sprintf("%v>%v:%s", tr.From, tr.To, tr.Reason))
	}))
	m := &model{p: p.WithDefaults(), epoch: t0, gen: 1}
	var held []pair
	// The mix of outcomes is drawn per run: failure-heavy runs open often,
	// success-heavy runs get through several half-open trials in a row.
	mix := rapid.SampledFrom([][]Outcome{
		{Success, Failure, Failure, Excluded},
		{Success, Success, Success, Success, Failure, Excluded},
	}).Draw(rt, "outcome mix")

	rt.Repeat(map[string]func(*rapid.T){
		"advance": func(rt *rapid.T) {
			if rapid.Bool().Draw(rt, "coarse") {
				clk.Advance(time.Duration(rapid.Int64Range(0, int64(maxStep/time.Second)).Draw(rt, "seconds")) * time.Second)
			} else {
				clk.Advance(time.Duration(rapid.Int64Range(0, 3000).Draw(rt, "ms")) * time.Millisecond)
			}
		},
		"allow": func(rt *rapid.T) {
			tk, ok := b.Allow()
			rtk, rok := m.allow(clk.Now())
			if ok != rok {
				rt.Fatalf("Allow = %v, model %v (state %v)", ok, rok, m.state)
			}
			if ok {
				if tk.Trial() != (rtk.trial != 0) {
					rt.Fatalf("Trial() = %v, model %+v", tk.Trial(), rtk)
				}
				held = append(held, pair{tk, rtk})
			}
		},
		"allow and done": func(rt *rapid.T) {
			o := rapid.SampledFrom(mix).Draw(rt, "outcome")
			tk, ok := b.Allow()
			rtk, rok := m.allow(clk.Now())
			if ok != rok {
				rt.Fatalf("Allow = %v, model %v (state %v)", ok, rok, m.state)
			}
			if ok {
				b.Done(tk, o)
				m.done(clk.Now(), rtk, o)
			}
		},
		"done": func(rt *rapid.T) {
			if len(held) == 0 {
				rt.Skip("nothing in flight")
			}
			i := rapid.IntRange(0, len(held)-1).Draw(rt, "ticket")
			o := rapid.SampledFrom(mix).Draw(rt, "outcome")
			h := held[i]
			held = append(held[:i], held[i+1:]...)
			b.Done(h.real, o)
			m.done(clk.Now(), h.ref, o)
		},
		"retry after": func(rt *rapid.T) {
			d := time.Duration(rapid.Int64Range(-1, 420).Draw(rt, "seconds")) * time.Second
			b.RetryAfter(d)
			m.retryAfter(clk.Now(), d)
		},
		"force trial": func(rt *rapid.T) {
			tk := b.ForceTrial()
			rtk := m.force(clk.Now())
			if tk.Forced() != rtk.forced {
				rt.Fatalf("Forced() = %v, model %v", tk.Forced(), rtk.forced)
			}
			held = append(held, pair{tk, rtk})
		},
		"": func(rt *rapid.T) {
			now := clk.Now()
			if got, want := b.State(), m.currentState(now); got != want {
				rt.Fatalf("State() = %v, model %v", got, want)
			}
			wantReopen := time.Time{}
			if m.state == Open {
				wantReopen = m.reopenAt
			}
			if got := b.ReopenAt(); !got.Equal(wantReopen) {
				rt.Fatalf("ReopenAt() = %v, model %v", got, wantReopen)
			}
			s := b.Snapshot()
			if s.Generation != uint64(m.gen) {
				rt.Fatalf("generation %d, model %d", s.Generation, m.gen)
			}
			if m.p.Mode == CountMode && m.state == Closed && s.Failures != m.failuresIn(now) {
				rt.Fatalf("failures in window %d, model %d", s.Failures, m.failuresIn(now))
			}
			if m.p.Mode == RateMode && m.state == Closed {
				if req, errs := m.rateIn(now); s.Requests != req || s.Errors != errs {
					rt.Fatalf("window %d/%d, model %d/%d", s.Errors, s.Requests, errs, req)
				}
			}
			if len(log) != len(m.log) || (len(log) > 0 && log[len(log)-1] != m.log[len(m.log)-1]) {
				rt.Fatalf("transitions %v, model %v", log, m.log)
			}
		},
	})
}

// longerRuns raises rapid's default of ~30 actions per run to 300 unless
// -rapid.steps was given: reaching three successful half-open trials in a row
// after an opening takes more than 30 random actions.
func longerRuns() {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "rapid.steps" })
	if !given {
		_ = flag.Set("rapid.steps", "300")
	}
}

// The count policy agrees with the reference model on random call sequences,
// including sub-second steps, window boundaries, stale tickets and forced
// trials.
func TestCountPolicyMatchesModel(t *testing.T) {
	longerRuns()
	rapid.Check(t, func(rt *rapid.T) {
		p := Policy{
			Window:   rapid.SampledFrom([]time.Duration{10 * time.Second, time.Minute, 5 * time.Minute}).Draw(rt, "window"),
			Failures: rapid.IntRange(1, 4).Draw(rt, "failures"),
			Cooldown: rapid.SampledFrom([]time.Duration{time.Second, 7 * time.Second, time.Minute}).Draw(rt, "cooldown"),
		}
		checkAgainstModel(rt, p, 2*p.Window)
	})
}

// The rate policy agrees with the reference model: the ring of buckets counts
// exactly what a slice of timestamps filtered by second counts.
func TestRatePolicyMatchesModel(t *testing.T) {
	longerRuns()
	rapid.Check(t, func(rt *rapid.T) {
		p := Policy{
			Mode:        RateMode,
			Window:      rapid.SampledFrom([]time.Duration{time.Second, 2500 * time.Millisecond, 10 * time.Second, time.Minute}).Draw(rt, "window"),
			Cooldown:    rapid.SampledFrom([]time.Duration{2 * time.Second, 7 * time.Second, time.Minute}).Draw(rt, "cooldown"),
			Threshold:   rapid.SampledFrom([]float64{0.1, 0.25, 0.5}).Draw(rt, "threshold"),
			MinRequests: rapid.IntRange(1, 6).Draw(rt, "min requests"),
		}
		checkAgainstModel(rt, p, p.Window+p.Window/2)
	})
}
