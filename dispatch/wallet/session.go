package wallet

import (
	"context"
	"strconv"
	"sync"
)

// Session is a realtime session's wallet (DESIGN.md §15, Wallets): one
// hold of the model's realtime_hold, taken before the upgrade (a tenant
// that cannot cover it gets 402) and released when the session closes,
// however it closes; and one ledger charge per response.done, keyed by
// the session's request id and the response's id, so a response.done
// seen twice is charged once (the store's Settle is idempotent per key,
// and the session skips an id it charged already). Charges go through
// the same settle as a request's: the journal and the retries when the
// store is down, the revenue metrics. The hold bounds what a tenant needs
// to open a session, not what the session may spend: responses are
// charged as they end, whatever the balance, so a long session may take
// it below zero (docs/voice.md).
//
// Charges are settled by the session's own goroutine, in order, so a slow
// or unreachable store never stalls the relay that reports them; Close
// waits for those queued before it releases the hold.
type Session struct {
	r *Reservation

	mu      sync.Mutex
	charged map[string]bool // response ids charged by this session
	unnamed int             // response.done events without an id

	queue chan sessionCharge // to the settling goroutine; closed by Close
	done  chan struct{}      // closed when that goroutine ended
	once  sync.Once
}

// sessionCharge is one response's charge, queued.
type sessionCharge struct {
	ctx context.Context
	res *Reservation
	t   Tokens
}

// sessionQueue bounds the charges waiting for the store: a session that
// outruns the store by more waits in Charge.
const sessionQueue = 64

// ReserveSession holds q.Model's realtime_hold for a session (q.Sizing is
// unused). Errors are Reserve's.
func (w *Wallet) ReserveSession(ctx context.Context, q Request) (*Session, error) {
	r, err := w.reserve(ctx, q, q.Model.RealtimeHold)
	if err != nil {
		return nil, err
	}
	s := &Session{r: r, charged: map[string]bool{}, queue: make(chan sessionCharge, sessionQueue), done: make(chan struct{})}
	go s.settle()
	return s, nil
}

// settle settles the queued charges until Close.
func (s *Session) settle() {
	defer close(s.done)
	for c := range s.queue {
		s.r.w.settle(c.ctx, c.res, c.t)
	}
}

// stop ends the settling goroutine once every queued charge landed (or
// was handed to the wallet's retries).
func (s *Session) stop() {
	s.once.Do(func() { close(s.queue) })
	<-s.done
}

// Amount is the session's hold in micro-units.
func (s *Session) Amount() int64 { return s.r.amount }

// ResponseKey is the ledger key of a session's response: the session's
// request id and the response id.
func ResponseKey(sessionID, responseID string) string { return sessionID + "/" + responseID }

// Charge queues the charge of one response.done's usage at the list price
// of the model asked for and returns its amount (0 for a response charged
// already). A response without an id is keyed by its order in the
// session. Not after Close.
func (s *Session) Charge(ctx context.Context, responseID string, input, output int64) int64 {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	if responseID == "" {
		s.unnamed++
		responseID = "#" + strconv.Itoa(s.unnamed)
	}
	if s.charged[responseID] {
		s.mu.Unlock()
		return 0
	}
	s.charged[responseID] = true
	s.mu.Unlock()
	c := &Reservation{w: s.r.w, req: s.r.req}
	c.req.RequestID = ResponseKey(s.r.req.RequestID, responseID)
	t := Tokens{Input: max(input, 0), Output: max(output, 0)}
	s.queue <- sessionCharge{ctx: ctx, res: c, t: t}
	return Cost(c.req.Model, t)
}

// Close releases the session's hold: at the client's close, an upstream's
// drop, max_session, a client that vanished. Only the first call (of
// Close or Guard) acts; a nil Session (wallets off) does nothing.
func (s *Session) Close(ctx context.Context) {
	if s != nil {
		s.stop()
		s.r.Finish(ctx, Outcome{})
	}
}

// Guard runs deferred: a panic or a forgotten Close releases the hold
// (the charges queued before it are settled first).
func (s *Session) Guard() {
	if s != nil {
		s.stop()
		s.r.Guard()
	}
}
