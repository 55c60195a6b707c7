package breaker

import (
	"sync"
	"time"
)

// Ticket is the permission to send one request, returned by Allow or
// ForceTrial and handed back to Done with the outcome. The zero Ticket is
// stale: Done ignores it.
type Ticket struct {
	gen    uint64 // generation at issue; Done ignores a ticket from an older one
	trial  uint64 // non-zero: the half-open trial slot this ticket holds
	forced bool   // issued by ForceTrial while the breaker was not closed
}

// Trial reports whether this request's outcome decides the state: a
// half-open trial or a forced trial.
func (t Ticket) Trial() bool { return t.trial != 0 || t.forced }

// Forced reports whether the ticket came from ForceTrial on a breaker that was
// not closed (for the hopgate.breaker.forced_trial span attribute).
func (t Ticket) Forced() bool { return t.forced }

// Generation is the breaker generation the ticket was issued in.
func (t Ticket) Generation() uint64 { return t.gen }

// Option configures a Breaker (or every breaker of a Set).
type Option func(*Breaker)

// WithClock sets the clock. nil keeps the default, the real clock.
func WithClock(c Clock) Option {
	return func(b *Breaker) {
		if c != nil {
			b.clock = c
		}
	}
}

// WithOnTransition sets the transition callback (nil: none). It is called once
// per state change, in generation order, one call at a time, never while the
// breaker's lock is held, so it may call back into the Breaker. It runs on the
// goroutine whose call made the change before that call returns, unless
// another goroutine is already delivering transitions of this breaker, in
// which case that goroutine delivers it right after its own (this keeps the
// order without holding the lock). It should be quick: metrics and spans.
func WithOnTransition(f func(Transition)) Option {
	return func(b *Breaker) { b.onTransition = f }
}

// Breaker is the L1 circuit breaker of one channel. It is safe for concurrent
// use. Create it with New (or Set.Get).
type Breaker struct {
	name         string
	policy       Policy // WithDefaults applied
	clock        Clock
	onTransition func(Transition)
	epoch        time.Time // second 0 of the rate ring

	mu       sync.Mutex
	state    State
	gen      uint64
	reopenAt time.Time // Open: when it becomes half-open

	// Half-open bookkeeping, reset by setState.
	halfOpenSince  time.Time
	trialInFlight  uint64    // id of the trial holding the slot, 0: free
	trialSince     time.Time // when that trial took the slot
	lastTrialID    uint64
	trialSuccesses int // rate: successful trials in this half-open period

	failures failureWindow // count mode
	rate     rateRing      // rate mode

	// Transitions waiting for delivery outside the lock (see WithOnTransition).
	pending    []Transition
	delivering bool
}

// New returns a closed breaker for the channel name. Zero fields of p take
// their defaults (Policy.WithDefaults).
func New(name string, p Policy, opts ...Option) *Breaker {
	b := &Breaker{name: name, policy: p.WithDefaults(), clock: realClock{}, gen: 1}
	for _, o := range opts {
		o(b)
	}
	b.epoch = b.clock.Now()
	if b.policy.Mode == RateMode {
		b.rate = newRateRing(b.policy.Window)
	} else {
		b.failures = newFailureWindow(b.policy.Failures)
	}
	if b.onTransition != nil {
		b.pending = make([]Transition, 0, 4)
	}
	return b
}

// Name returns the channel name the breaker was created for.
func (b *Breaker) Name() string { return b.name }

// Policy returns the effective policy (defaults applied).
func (b *Breaker) Policy() Policy { return b.policy }

// Allow asks to send one request. false: skip this channel, send nothing.
// When closed every request is allowed; when half-open only one trial at a
// time; when open none (see ForceTrial).
func (b *Breaker) Allow() (Ticket, bool) {
	b.mu.Lock()
	b.advanceIfNotClosed()
	var t Ticket
	ok := false
	switch b.state {
	case Closed:
		t, ok = Ticket{gen: b.gen}, true
	case HalfOpen:
		now := b.clock.Now()
		if b.trialInFlight != 0 && now.Sub(b.trialSince) >= b.policy.TrialTimeout {
			// A trial that never reported (a leaked ticket, a request
			// stuck far beyond any timeout) must not hold the slot
			// forever; its late Done no longer holds the slot and is
			// ignored.
			b.trialInFlight = 0
		}
		if b.trialInFlight == 0 {
			b.lastTrialID++
			b.trialInFlight = b.lastTrialID
			b.trialSince = now
			t, ok = Ticket{gen: b.gen, trial: b.trialInFlight}, true
		}
	}
	b.unlockAndNotify()
	return t, ok
}

// ForceTrial returns a ticket for a request sent although the breaker does
// not allow it: the dispatcher's way out when every channel of a chain is
// open (it picks the one whose ReopenAt is earliest). It does not change the
// state by itself. If the breaker is open or half-open, the ticket is a forced
// trial: success closes the breaker, failure re-opens it for a full Cooldown
// from then (never shortening a longer Retry-After). It does not take the
// half-open trial slot. On a closed breaker it is an ordinary ticket.
func (b *Breaker) ForceTrial() Ticket {
	b.mu.Lock()
	b.advance(b.clock.Now())
	t := Ticket{gen: b.gen, forced: b.state != Closed}
	b.unlockAndNotify()
	return t
}

// Done reports the outcome of the request of ticket t. Call it exactly once
// per ticket. A ticket from an older generation is ignored: a slow request
// that started before the last state change must not flip the state.
func (b *Breaker) Done(t Ticket, o Outcome) {
	b.mu.Lock()
	if b.state == Closed && t.gen == b.gen && (o == Excluded || (o == Success && b.policy.Mode == CountMode)) {
		// Nothing to record and nothing time can change: skip the clock.
		b.mu.Unlock()
		return
	}
	now := b.clock.Now()
	b.advance(now)
	if t.gen == b.gen {
		b.done(now, t, o)
	}
	b.unlockAndNotify()
}

func (b *Breaker) done(now time.Time, t Ticket, o Outcome) {
	switch b.state {
	case Closed:
		b.record(now, o)
	case HalfOpen:
		holdsSlot := t.trial != 0 && t.trial == b.trialInFlight
		if !holdsSlot && !t.forced {
			return // a duplicate Done of an earlier trial
		}
		if holdsSlot {
			b.trialInFlight = 0 // every outcome, Excluded included, frees the slot
		}
		switch o {
		case Failure:
			b.setState(Open, now, ReasonTrialFailed, now.Add(b.policy.Cooldown))
		case Success:
			b.trialSuccesses++
			if t.forced || b.policy.Mode == CountMode || b.trialSuccesses >= rateTrialSuccesses ||
				now.Sub(b.halfOpenSince) >= b.policy.Cooldown/2 {
				b.setState(Closed, now, ReasonTrialSucceeded, time.Time{})
			}
		}
	case Open:
		if !t.forced {
			return
		}
		switch o {
		case Failure:
			// Already open: no state change, only a later reopen time.
			if until := now.Add(b.policy.Cooldown); until.After(b.reopenAt) {
				b.reopenAt = until
			}
		case Success:
			b.setState(Closed, now, ReasonTrialSucceeded, time.Time{})
		}
	}
}

// record counts an outcome while closed and opens the breaker when the policy
// says so. Only a failure can open it: a success never opens, even when it
// completes MinRequests over an already bad error rate.
func (b *Breaker) record(now time.Time, o Outcome) {
	if o == Excluded {
		return
	}
	failed := o == Failure
	if b.policy.Mode == RateMode {
		sec := b.second(now)
		b.rate.add(sec, failed)
		if !failed {
			return
		}
		req, errs := b.rate.totals(sec)
		if req >= b.policy.MinRequests && float64(errs)/float64(req) > b.policy.Threshold {
			b.setState(Open, now, ReasonErrorRate, now.Add(b.policy.Cooldown))
		}
		return
	}
	if !failed {
		return // failures in the window, not consecutive failures
	}
	if b.failures.add(now, b.policy.Window) {
		b.setState(Open, now, ReasonFailures, now.Add(b.policy.Cooldown))
	}
}

// RetryAfter keeps the channel out for d (capped at MaxRetryAfter), whatever
// the failure count: the provider said when to come back. A closed or
// half-open breaker opens until now+d; an open one stays open at least until
// now+d. d ≤ 0 is ignored.
func (b *Breaker) RetryAfter(d time.Duration) {
	if d <= 0 {
		return
	}
	b.mu.Lock()
	now := b.clock.Now()
	b.advance(now)
	b.retryAfter(now, d)
	b.unlockAndNotify()
}

// DoneRetryAfter is Done followed by RetryAfter, atomically and under the
// same generation rule: the result of a request that started before the
// last state change flips nothing, its Retry-After included (a slow 429
// must not re-open a breaker that a successful trial just closed).
func (b *Breaker) DoneRetryAfter(t Ticket, o Outcome, d time.Duration) {
	b.mu.Lock()
	now := b.clock.Now()
	b.advance(now)
	if t.gen == b.gen {
		b.done(now, t, o)
		if d > 0 {
			b.retryAfter(now, d)
		}
	}
	b.unlockAndNotify()
}

// retryAfter raises the cooldown floor; b.mu is held.
func (b *Breaker) retryAfter(now time.Time, d time.Duration) {
	d = min(d, MaxRetryAfter)
	until := now.Add(d)
	if b.state == Open {
		if until.After(b.reopenAt) {
			b.reopenAt = until
		}
		return
	}
	b.setState(Open, now, ReasonRetryAfter, until)
}

// State returns the current state, after the lazy open → half-open (and, in
// rate mode, half-open → closed) evaluation.
func (b *Breaker) State() State {
	b.mu.Lock()
	b.advanceIfNotClosed()
	s := b.state
	b.unlockAndNotify()
	return s
}

// ReopenAt returns, when open, the time it becomes half-open; else zero.
func (b *Breaker) ReopenAt() time.Time {
	b.mu.Lock()
	b.advance(b.clock.Now())
	var t time.Time
	if b.state == Open {
		t = b.reopenAt
	}
	b.unlockAndNotify()
	return t
}

// Snapshot is the breaker as shown on /admin/breakers.
type Snapshot struct {
	Name          string    `json:"name"`
	Mode          string    `json:"mode"`
	State         State     `json:"state"`
	ReopenAt      time.Time `json:"reopen_at,omitzero"`
	Failures      int       `json:"failures"` // count mode: failures in the window
	Requests      int       `json:"requests"` // rate mode: requests in the window
	Errors        int       `json:"errors"`   // rate mode: errors in the window
	TrialInFlight bool      `json:"trial_in_flight"`
	Generation    uint64    `json:"generation"`
}

// Snapshot returns the current state and window counters.
func (b *Breaker) Snapshot() Snapshot {
	b.mu.Lock()
	now := b.clock.Now()
	b.advance(now)
	s := Snapshot{
		Name:          b.name,
		Mode:          b.policy.Mode.String(),
		State:         b.state,
		TrialInFlight: b.trialInFlight != 0,
		Generation:    b.gen,
	}
	if b.state == Open {
		s.ReopenAt = b.reopenAt
	}
	if b.policy.Mode == RateMode {
		s.Requests, s.Errors = b.rate.totals(b.second(now))
	} else {
		s.Failures = b.failures.count(now, b.policy.Window)
	}
	b.unlockAndNotify()
	return s
}

// advanceIfNotClosed is advance without reading the clock when closed, where
// time alone changes nothing: reading the clock is most of Allow's cost.
func (b *Breaker) advanceIfNotClosed() {
	if b.state != Closed {
		b.advance(b.clock.Now())
	}
}

// advance applies the transitions that only need time to pass: open →
// half-open at reopenAt, and in rate mode half-open → closed once half-open
// has lasted Cooldown/2 with a successful trial (a failed one would have
// re-opened it). Called with b.mu held at the start of every public method.
func (b *Breaker) advance(now time.Time) {
	if b.state == Open && !now.Before(b.reopenAt) {
		// Dated at reopenAt, not at the call that noticed it: the half-open
		// period (and its Cooldown/2 rule) starts when the cooldown ended.
		b.setState(HalfOpen, b.reopenAt, ReasonCooldownElapsed, time.Time{})
	}
	if b.state == HalfOpen && b.policy.Mode == RateMode && b.trialSuccesses > 0 &&
		now.Sub(b.halfOpenSince) >= b.policy.Cooldown/2 {
		b.setState(Closed, now, ReasonTrialSucceeded, time.Time{})
	}
}

// setState is the one place the state changes. Called with b.mu held.
// reopenAt is used only when to == Open.
func (b *Breaker) setState(to State, now time.Time, reason string, reopenAt time.Time) {
	from := b.state
	b.state = to
	b.gen++
	b.trialInFlight = 0
	b.trialSuccesses = 0
	b.reopenAt = time.Time{}
	switch to {
	case Open:
		b.reopenAt = reopenAt
	case HalfOpen:
		b.halfOpenSince = now
	case Closed:
		// A closed breaker starts from a clean window: the failures that
		// opened it were already paid for with a cooldown.
		b.failures.reset()
		b.rate.reset()
	}
	if b.onTransition != nil {
		tr := Transition{Name: b.name, From: from, To: to, At: now, Reason: reason, Generation: b.gen}
		if to == Open {
			tr.ReopenAt = reopenAt
		}
		b.pending = append(b.pending, tr)
	}
}

// unlockAndNotify releases b.mu and delivers pending transitions outside the
// lock, in order, unless another goroutine is already delivering them (it
// will pick these up before it stops).
func (b *Breaker) unlockAndNotify() {
	if len(b.pending) == 0 || b.delivering {
		b.mu.Unlock()
		return
	}
	b.delivering = true
	for len(b.pending) > 0 {
		t := b.pending[0]
		n := copy(b.pending, b.pending[1:])
		b.pending = b.pending[:n]
		b.mu.Unlock()
		b.deliver(t)
		b.mu.Lock()
	}
	b.delivering = false
	b.mu.Unlock()
}

// deliver calls the callback; if it panics, the delivering flag is cleared so
// later transitions are still delivered, and the panic goes on.
func (b *Breaker) deliver(t Transition) {
	ok := false
	defer func() {
		if !ok {
			b.mu.Lock()
			b.delivering = false
			b.mu.Unlock()
		}
	}()
	b.onTransition(t)
	ok = true
}

// second is now's bucket number: whole bucket widths (one second unless
// the window is long, see maxBuckets) since the breaker's epoch, rounded
// down.
func (b *Breaker) second(now time.Time) int64 {
	d := now.Sub(b.epoch)
	w := b.rate.width
	if w <= 0 {
		w = minBucketWidth
	}
	s := int64(d / w)
	if d < 0 && d%w != 0 {
		s--
	}
	return s
}
