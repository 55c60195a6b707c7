package earlywarning

import (
	"fmt"
	"sync"
	"time"
)

// Clock is the only source of time for a Detector. clockwork.Clock (real
// and fake) satisfies it.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Option configures a Detector (or every detector of a Set).
type Option func(*Detector)

// WithClock sets the clock. nil keeps the default, the real clock.
func WithClock(c Clock) Option {
	return func(d *Detector) {
		if c != nil {
			d.clock = c
		}
	}
}

// WithOnTransition sets the transition callback (nil: none). It is called
// once per state change, in order, never while the detector's lock is
// held (the same contract as breaker.WithOnTransition). It should be
// quick: metrics and a log line.
func WithOnTransition(f func(Transition)) Option {
	return func(d *Detector) { d.onTransition = f }
}

// Detector is the early warning of one channel. It is safe for concurrent
// use. Create it with New (or Set.Get).
type Detector struct {
	name         string
	policy       Policy // WithDefaults applied
	clock        Clock
	onTransition func(Transition)
	windowSteps  int64 // buckets of the short window, the current one included
	baseSteps    int64 // buckets of the baseline and the short window

	mu     sync.Mutex
	state  State
	until  time.Time // Demoted: end of the demotion; Probation: end of probation
	reason string    // of the current (or last) demotion
	detail string
	// backoff doubles the cooldown of a demotion that follows probation:
	// the cooldown is Cooldown << backoff.
	backoff uint

	ring     ring
	inflight *Hop // hops in flight, newest first

	// The cached verdict (EvalInterval) and the baselines (per step).
	evalAt   time.Time
	v        verdict
	baseStep int64
	baseHdr  time.Duration // median header latency of the baseline; 0: too few samples
	baseHdrN int
	baseFst  time.Duration // median time to first token of the baseline
	baseFstN int
	badSince time.Time // when the evidence was first seen without a break; zero: none now
	window   Window    // the fullest rate-limit window last stated (ratelimit.go)

	pending    []Transition
	delivering bool
}

// New returns a Detector in the normal state for the channel name. Zero
// fields of p take their defaults (Policy.WithDefaults).
func New(name string, p Policy, opts ...Option) *Detector {
	d := &Detector{name: name, policy: p.WithDefaults(), clock: realClock{}, baseStep: -1 << 62}
	for _, o := range opts {
		o(d)
	}
	d.ring = newRing(d.policy, d.clock.Now())
	w := d.ring.width
	d.windowSteps = int64((d.policy.Window + w - 1) / w)
	d.baseSteps = int64(len(d.ring.buckets))
	return d
}

// Name returns the channel name the detector was created for.
func (d *Detector) Name() string { return d.name }

// Policy returns the effective policy (defaults applied).
func (d *Detector) Policy() Policy { return d.policy }

// Hop is one hop as the detector sees it. The zero Hop records nothing:
// its methods are no-ops until Detector.Begin. It is meant to live inside
// the caller's own per-hop object (no allocation per hop).
type Hop struct {
	d          *Detector
	start      time.Time
	stream     bool
	headers    bool
	first      bool
	prev, next *Hop
}

// Begin starts watching a hop sent now; stream: its answer is a stream, so
// it has a time to first token. Every Begin must be followed by exactly
// one End. A nil Detector records nothing.
func (d *Detector) Begin(h *Hop, stream bool) {
	if d == nil {
		return
	}
	d.mu.Lock()
	*h = Hop{d: d, start: d.clock.Now(), stream: stream, next: d.inflight}
	if d.inflight != nil {
		d.inflight.prev = h
	}
	d.inflight = h
	d.mu.Unlock()
}

// Headers records that the hop's response headers arrived now.
func (h *Hop) Headers() {
	d := h.d
	if d == nil || h.headers {
		return
	}
	d.mu.Lock()
	now := d.clock.Now()
	h.headers = true
	if b := d.ring.at(d.ring.stepOf(now)); b != nil {
		b.header.add(now.Sub(h.start))
	}
	d.mu.Unlock()
}

// FirstToken records that the hop's stream committed now: its first
// decisive frame (or the gate's timeout) arrived.
func (h *Hop) FirstToken() {
	d := h.d
	if d == nil || h.first || !h.stream {
		return
	}
	d.mu.Lock()
	now := d.clock.Now()
	h.first = true
	if b := d.ring.at(d.ring.stepOf(now)); b != nil {
		b.first.add(now.Sub(h.start))
	}
	d.mu.Unlock()
}

// End records how the hop ended. A hop that ended without headers (or,
// for a stream, without a first token) after waiting longer than the slow
// threshold is a slow sample of that signal: a header timeout is exactly
// the latency the detector exists to notice.
func (h *Hop) End(o Outcome) {
	d := h.d
	if d == nil {
		return
	}
	d.mu.Lock()
	now := d.clock.Now()
	d.unlink(h)
	age := now.Sub(h.start)
	if b := d.ring.at(d.ring.stepOf(now)); b != nil {
		if o != Excluded {
			b.hops++
			if o == Failure {
				b.errors++
			}
		}
		if thr := d.threshold(d.baseHdr); !h.headers && thr > 0 && age > thr {
			b.header.add(age)
		}
		if thr := d.threshold(d.baseFst); h.stream && !h.first && thr > 0 && age > thr {
			b.first.add(age)
		}
	}
	h.d = nil
	d.mu.Unlock()
}

func (d *Detector) unlink(h *Hop) {
	if h.prev != nil {
		h.prev.next = h.next
	} else if d.inflight == h {
		d.inflight = h.next
	}
	if h.next != nil {
		h.next.prev = h.prev
	}
	h.prev, h.next = nil, nil
}

// threshold is the slow threshold over a baseline median (0: no baseline).
func (d *Detector) threshold(base time.Duration) time.Duration {
	if base <= 0 {
		return 0
	}
	return time.Duration(float64(base) * d.policy.Multiple)
}

// Signal is one latency signal as last judged.
type Signal struct {
	// Baseline is the median over the baseline window (0: fewer than
	// MinSamples samples there: no judgement) and BaselineSamples its
	// sample count.
	Baseline        time.Duration `json:"baseline"`
	BaselineSamples int           `json:"baseline_samples"`
	// Threshold is Multiple × Baseline: a slower sample is slow.
	Threshold time.Duration `json:"threshold"`
	// Median is the short window's median of completed samples.
	Median time.Duration `json:"median"`
	// Samples counts the short window's samples and Slow the slow ones,
	// both including InFlight: hops still waiting, already past Threshold.
	Samples  int `json:"samples"`
	Slow     int `json:"slow"`
	InFlight int `json:"in_flight"`
}

// bad reports whether the signal is evidence: enough samples on both
// sides, and more than half the short window slow.
func (s Signal) bad(min int) bool {
	return s.Threshold > 0 && s.BaselineSamples >= min && s.Samples >= min && 2*s.Slow > s.Samples
}

// verdict is one evaluation of the evidence.
type verdict struct {
	bad            bool
	reason, detail string
	header, first  Signal
	hops, errors   int
	inflight       int
}

// evaluate sums the evidence as of now, reusing the last verdict for
// EvalInterval. Called with d.mu held.
func (d *Detector) evaluate(now time.Time) verdict {
	if !d.evalAt.IsZero() && !now.Before(d.evalAt) && now.Sub(d.evalAt) < EvalInterval {
		return d.v
	}
	d.evalAt = now
	cur := d.ring.stepOf(now)
	short := cur - d.windowSteps // the short window is (short, cur]
	if d.baseStep != cur {
		var b bucket
		d.ring.sum(cur-d.baseSteps+1, short, true, &b)
		d.baseHdr, d.baseHdrN = baseline(&b.header, d.policy.MinSamples)
		d.baseFst, d.baseFstN = baseline(&b.first, d.policy.MinSamples)
		d.baseStep = cur
	}
	var w bucket
	d.ring.sum(short, cur, false, &w)
	v := verdict{hops: int(w.hops), errors: int(w.errors)}
	v.header = signal(&w.header, d.baseHdr, d.baseHdrN, d.threshold(d.baseHdr))
	v.first = signal(&w.first, d.baseFst, d.baseFstN, d.threshold(d.baseFst))
	for h := d.inflight; h != nil; h = h.next {
		v.inflight++
		age := now.Sub(h.start)
		if t := v.header.Threshold; !h.headers && t > 0 && age > t {
			v.header.Samples++
			v.header.Slow++
			v.header.InFlight++
		}
		if t := v.first.Threshold; h.stream && !h.first && t > 0 && age > t {
			v.first.Samples++
			v.first.Slow++
			v.first.InFlight++
		}
	}
	p := d.policy
	switch {
	case v.hops >= p.MinSamples && (p.ErrorRate > 0 && float64(v.errors) > p.ErrorRate*float64(v.hops) ||
		p.ErrorCount > 0 && v.errors >= p.ErrorCount):
		v.bad, v.reason = true, ReasonErrorRate
		v.detail = fmt.Sprintf("%d errors in %d hops over the last %s", v.errors, v.hops, p.Window)
	case v.header.bad(p.MinSamples):
		v.bad, v.reason, v.detail = true, ReasonHeaderLatency, v.header.describe("header latency")
	case v.first.bad(p.MinSamples):
		v.bad, v.reason, v.detail = true, ReasonFirstToken, v.first.describe("time to first token")
	}
	if !v.bad {
		d.badSince = time.Time{}
	} else if d.badSince.IsZero() {
		d.badSince = now
	}
	if v.bad || d.state == Demoted {
		for s := short + 1; s <= cur; s++ {
			if b := d.ring.at(s); b != nil {
				b.tainted = true
			}
		}
	}
	d.v = v
	return v
}

func baseline(s *sketch, min int) (time.Duration, int) {
	n := s.count()
	if n < min {
		return 0, n
	}
	return s.median(), n
}

func signal(s *sketch, base time.Duration, baseN int, thr time.Duration) Signal {
	sig := Signal{Baseline: base, BaselineSamples: baseN, Threshold: thr, Samples: s.count(), Median: s.median()}
	if thr > 0 {
		sig.Slow = s.above(thr)
	}
	return sig
}

func (s Signal) describe(what string) string {
	return fmt.Sprintf("%s: %d of %d samples above %s (%.4gx the baseline %s; %d still waiting)",
		what, s.Slow, s.Samples, s.Threshold.Round(time.Millisecond), float64(s.Threshold)/float64(s.Baseline),
		s.Baseline.Round(time.Millisecond), s.InFlight)
}

// view is a detector's state and evidence as Order sees it.
type view struct {
	state          State
	suspect        bool // the evidence has lasted long enough to demote
	reason, detail string
	until          time.Time
}

// look advances the state and judges the evidence as of now.
func (d *Detector) look() view {
	d.mu.Lock()
	now := d.clock.Now()
	d.advance(now)
	v := d.judge(now)
	d.unlockAndNotify()
	return v
}

// judge is look with d.mu held.
func (d *Detector) judge(now time.Time) view {
	ev := d.evaluate(now)
	v := view{state: d.state, until: d.until, reason: d.reason, detail: d.detail}
	switch {
	case d.state == Demoted:
	case d.windowFull(now):
		v.suspect, v.reason, v.detail = true, ReasonRateLimit, d.windowDetail(now)
	case ev.bad && (d.state == Probation || now.Sub(d.badSince) >= d.policy.For):
		v.suspect, v.reason, v.detail = true, ev.reason, ev.detail
	}
	return v
}

// demote demotes the channel now for reason (unless it already is) and
// returns its view.
func (d *Detector) demote(reason, detail string) view {
	d.mu.Lock()
	now := d.clock.Now()
	d.advance(now)
	switch {
	case d.state == Demoted:
	case reason == ReasonRateLimit:
		// Until the window resets, whatever came before: a full window
		// is the provider's statement, not a sign of a sick channel.
		d.reason, d.detail = reason, detail
		d.setState(Demoted, now, reason, d.windowUntil(now))
	default:
		if d.state == Probation && 1<<(d.backoff+1) <= MaxBackoff {
			d.backoff++
		}
		d.reason, d.detail = reason, detail
		d.badSince = time.Time{}
		d.setState(Demoted, now, reason, now.Add(d.policy.Cooldown<<d.backoff))
	}
	v := view{state: d.state, until: d.until, reason: d.reason, detail: d.detail}
	d.unlockAndNotify()
	return v
}

// advance applies what time alone does: the end of a demotion (probation
// begins, dated when the cooldown ended) and of probation. d.mu is held.
func (d *Detector) advance(now time.Time) {
	if d.state == Demoted && !now.Before(d.until) {
		if d.reason == ReasonRateLimit {
			d.setState(Normal, d.until, ReasonWindowReset, time.Time{})
		} else {
			d.setState(Probation, d.until, ReasonCooldownElapsed, d.until.Add(d.policy.Probation))
		}
	}
	if d.state == Probation && !now.Before(d.until) {
		d.backoff = 0
		d.setState(Normal, d.until, ReasonProbationPassed, time.Time{})
	}
}

// setState is the one place the state changes. d.mu is held.
func (d *Detector) setState(to State, at time.Time, reason string, until time.Time) {
	from := d.state
	d.state, d.until = to, until
	if d.onTransition != nil {
		t := Transition{Name: d.name, From: from, To: to, At: at, Until: until, Reason: reason}
		if to == Demoted {
			t.Detail = d.detail
		}
		d.pending = append(d.pending, t)
	}
}

// unlockAndNotify releases d.mu and delivers pending transitions outside
// the lock, in order, unless another goroutine is already delivering them.
func (d *Detector) unlockAndNotify() {
	if len(d.pending) == 0 || d.delivering {
		d.mu.Unlock()
		return
	}
	d.delivering = true
	for len(d.pending) > 0 {
		t := d.pending[0]
		n := copy(d.pending, d.pending[1:])
		d.pending = d.pending[:n]
		d.mu.Unlock()
		d.deliver(t)
		d.mu.Lock()
	}
	d.delivering = false
	d.mu.Unlock()
}

// deliver calls the callback; if it panics, later transitions are still
// delivered and the panic goes on.
func (d *Detector) deliver(t Transition) {
	ok := false
	defer func() {
		if !ok {
			d.mu.Lock()
			d.delivering = false
			d.mu.Unlock()
		}
	}()
	d.onTransition(t)
	ok = true
}

// State returns the current state.
func (d *Detector) State() State {
	d.mu.Lock()
	d.advance(d.clock.Now())
	s := d.state
	d.unlockAndNotify()
	return s
}

// Snapshot is a detector as shown on /admin/breakers and the on-call page.
type Snapshot struct {
	Name  string    `json:"name"`
	State State     `json:"state"`
	Until time.Time `json:"until,omitzero"`
	// Reason and Detail: the evidence of the current (or last) demotion,
	// or, when Suspect, the evidence seen now.
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Suspect: the evidence holds now, whether or not for long enough.
	Suspect    bool   `json:"suspect"`
	Header     Signal `json:"header_latency"`
	FirstToken Signal `json:"first_token"`
	Hops       int    `json:"hops"`   // completed hops in the short window
	Errors     int    `json:"errors"` // of which failed
	InFlight   int    `json:"in_flight"`
	// Window is the fullest rate-limit window last stated (zero: none).
	Window Window `json:"ratelimit_window,omitzero"`
}

// Snapshot returns the state and the evidence as of now.
func (d *Detector) Snapshot() Snapshot {
	d.mu.Lock()
	now := d.clock.Now()
	d.advance(now)
	ev := d.evaluate(now)
	s := Snapshot{Name: d.name, State: d.state, Until: d.until, Reason: d.reason, Detail: d.detail,
		Suspect: ev.bad, Header: ev.header, FirstToken: ev.first, Hops: ev.hops, Errors: ev.errors, InFlight: ev.inflight,
		Window: d.window}
	switch {
	case d.state == Demoted:
	case d.windowFull(now):
		s.Suspect, s.Reason, s.Detail = true, ReasonRateLimit, d.windowDetail(now)
	case ev.bad:
		s.Reason, s.Detail = ev.reason, ev.detail
	}
	d.unlockAndNotify()
	return s
}
