package wallet

import (
	"context"
	"log/slog"
	"time"

	"github.com/hopgate/hopgate/internal/store"
)

// pendingOp is a settle (charge set) or a release the store could not take
// yet. Both are idempotent per request id, so retrying until one lands
// neither loses a charge nor takes it twice.
type pendingOp struct {
	requestID, tenant string
	charge            *store.Charge
	owed              int64 // counted in Wallet.unsettled while pending
	tries             int
	// doubt: a journal's undecided charge, recorded with RecordInDoubt
	// (since: when its delivery began) rather than settled.
	doubt bool
	since time.Time
	// journaled: the journal holds the op open; its end is written there
	// once the store took it.
	journaled bool
}

// enqueue keeps op for the retry loop, or for Close's last tries. Once
// Close has returned nothing retries: a charge is then logged at once as
// unsettled, like those Close gave up on (a handler that outlived the
// drain).
func (w *Wallet) enqueue(op *pendingOp) {
	w.mu.Lock()
	closed := w.closed
	if !closed {
		w.pending = append(w.pending, op)
	}
	w.mu.Unlock()
	if closed && op.charge != nil && !op.journaled {
		w.logUnsettled("unsettled charge: the store was unavailable after shutdown; apply it by hand", op.charge, nil)
	}
}

// nudge wakes the retry loop after a store call succeeded: the store is
// back, so what waits can land now rather than at the next interval.
func (w *Wallet) nudge() {
	if w.Pending() == 0 {
		return
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// retryLoop retries pending operations every RetryInterval, and at once
// when nudged.
func (w *Wallet) retryLoop() {
	for {
		t := w.clock.NewTimer(w.retry)
		select {
		case <-w.stop:
			t.Stop()
			return
		case <-t.Chan():
		case <-w.kick:
			t.Stop()
		}
		w.flush(context.Background())
	}
}

// flush tries every pending operation in order, and stops at the first the
// store cannot take (it is still down). It reports whether nothing is left.
func (w *Wallet) flush(ctx context.Context) bool {
	w.mu.Lock()
	ops := append([]*pendingOp(nil), w.pending...)
	w.mu.Unlock()
	for _, op := range ops {
		cctx, cancel := w.callCtx(ctx)
		var err error
		switch {
		case op.doubt:
			var added bool
			if added, err = w.store.RecordInDoubt(cctx, *op.charge, op.since); err == nil && added {
				w.log.Warn("wallet: a charge the journal left undecided is in doubt: an operator resolves it",
					slog.String("request_id", op.requestID), slog.String("tenant", op.tenant),
					slog.Int64("amount_micros", op.charge.AmountMicros))
			}
		case op.charge != nil:
			var st store.Settlement
			st, err = w.store.Settle(cctx, *op.charge)
			if err == nil && st.Duplicate {
				// The first attempt committed before its answer was lost.
				w.log.Info("wallet: a retried charge had landed already", slog.String("request_id", op.requestID))
			}
		default:
			_, err = w.store.Release(cctx, op.requestID)
		}
		cancel()
		op.tries++
		if err != nil && unavailable(err) {
			return false
		}
		switch {
		case err != nil && op.charge != nil:
			w.logUnsettled("wallet: the store refused a retried charge; dropped", op.charge, err)
		case err != nil:
			w.log.Error("wallet: the store refused a retried release; dropped", slog.String("request_id", op.requestID),
				slog.Any("error", err))
		case op.charge != nil:
			w.log.Info("wallet: charge settled after the store came back", slog.String("request_id", op.requestID),
				slog.Int("tries", op.tries))
		}
		w.remove(op)
		w.addUnsettled(op.tenant, -op.owed)
		if op.journaled {
			w.journalDone(op.requestID)
		}
	}
	return w.Pending() == 0
}

func (w *Wallet) remove(op *pendingOp) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, p := range w.pending {
		if p == op {
			w.pending = append(w.pending[:i], w.pending[i+1:]...)
			return
		}
	}
}
