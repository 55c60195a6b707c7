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
// charged as they end, and a long session may take the balance below
// zero by at most its last response (docs/tenants.md).
type Session struct {
	r *Reservation

	mu      sync.Mutex
	charged map[string]bool // response ids charged by this session
	unnamed int             // response.done events without an id
}

// ReserveSession holds q.Model's realtime_hold for a session (q.Sizing is
// unused). Errors are Reserve's.
func (w *Wallet) ReserveSession(ctx context.Context, q Request) (*Session, error) {
	r, err := w.reserve(ctx, q, q.Model.RealtimeHold)
	if err != nil {
		return nil, err
	}
	return &Session{r: r, charged: map[string]bool{}}, nil
}

// Amount is the session's hold in micro-units.
func (s *Session) Amount() int64 { return s.r.amount }

// ResponseKey is the ledger key of a session's response: the session's
// request id and the response id.
func ResponseKey(sessionID, responseID string) string { return sessionID + "/" + responseID }

// Charge charges one response.done's usage at the list price of the model
// asked for and returns the amount (0 for a response charged already).
// A response without an id is keyed by its order in the session.
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
	return s.r.w.settle(ctx, c, Tokens{Input: max(input, 0), Output: max(output, 0)})
}

// Close releases the session's hold: at the client's close, an upstream's
// drop, max_session, a client that vanished. Only the first call (of
// Close or Guard) acts; a nil Session (wallets off) does nothing.
func (s *Session) Close(ctx context.Context) {
	if s != nil {
		s.r.Finish(ctx, Outcome{})
	}
}

// Guard runs deferred: a panic or a forgotten Close releases the hold.
func (s *Session) Guard() {
	if s != nil {
		s.r.Guard()
	}
}
