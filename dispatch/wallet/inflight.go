package wallet

import (
	"context"
	"fmt"
	"log/slog"
)

// errClosing refuses a reservation once Close has begun: the process is
// shutting down, and the store may be closed right after Close returns.
var errClosing = fmt.Errorf("%w: the wallet is closing (shutdown)", ErrUnavailable)

// track counts r as in flight, from Reserve until its Finish or Guard has
// settled or released it: Close waits for it. It reports false once Close
// has begun.
func (w *Wallet) track(r *Reservation) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return false
	}
	w.inflight[r] = struct{}{}
	return true
}

// isClosed reports that Close has returned: the store must not be called
// any more (the gateway closes it next).
func (w *Wallet) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// InFlight is the number of reservations not yet settled or released:
// a request's charge lands after its answer's last byte was written (the
// delivery rule), so a client may read the answer before it is 0.
func (w *Wallet) InFlight() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.inflight)
}

// untrack ends r's flight, and wakes Close when it was the last.
func (w *Wallet) untrack(r *Reservation) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.inflight, r)
	if len(w.inflight) == 0 && w.idle != nil {
		close(w.idle)
		w.idle = nil
	}
}

// awaitInFlight waits until every reservation in flight has been settled
// or released, CloseWait has passed (on the clock) or ctx has ended. The
// gateway closes the wallet after its drain timeout has cut the requests
// still running, so their handlers are on their way out: without this
// wait the store would be closed under their settles. Those still in
// flight when the wait ends are logged at ERROR: unless a settle already
// under way lands, a charge for them is logged as unsettled if their
// handler ends before the process does, and lost otherwise (their hold
// expires after billing.hold_ttl).
func (w *Wallet) awaitInFlight(ctx context.Context) {
	w.mu.Lock()
	n := len(w.inflight)
	if n == 0 {
		w.mu.Unlock()
		return
	}
	idle := make(chan struct{})
	w.idle = idle
	w.mu.Unlock()
	w.log.Info("wallet: waiting for the requests in flight to settle", slog.Int("requests", n),
		slog.Duration("at_most", w.closeWait))
	t := w.clock.NewTimer(w.closeWait)
	defer t.Stop()
	select {
	case <-idle:
		return
	case <-t.Chan():
	case <-ctx.Done():
	}
	w.mu.Lock()
	left := make([]*Reservation, 0, len(w.inflight))
	for r := range w.inflight {
		left = append(left, r)
	}
	w.idle = nil
	w.mu.Unlock()
	for _, r := range left {
		w.log.Error("wallet: a request still in flight at shutdown: its charge may not be applied", slog.String("request_id", r.req.RequestID),
			slog.String("tenant", r.req.Tenant), slog.String("model", r.req.Model.Name), slog.Int64("reserved_micros", r.amount))
	}
}
