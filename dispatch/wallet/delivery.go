package wallet

import (
	"context"
	"log/slog"

	"github.com/hopgate/hopgate/internal/store"
)

// The delivery rule (docs/tenants.md): a charge is final only once the
// answer's last byte has been handed to the socket. Before that last write
// the engine calls Deliver, which records on the request's hold the charge
// it is about to become and "delivering"; Finish, after the write, settles
// it. A replica killed in between leaves a delivering hold, which expires
// into an in-doubt row (store.ExpireHolds) that an operator resolves:
// never a silent release, never a silent charge.

// Deliver records, before the answer's last byte is written, the charge
// the request is about to become (o as it stands then). It runs once; a
// store that cannot take it leaves the mark in the journal instead (when
// there is one), so a kill before Finish still leaves the charge in doubt
// rather than forgotten. It never fails the request: the answer is written
// either way.
func (r *Reservation) Deliver(ctx context.Context, o Outcome) {
	if r == nil || r.done.Load() || !r.delivering.CompareAndSwap(false, true) {
		return
	}
	w := r.w
	c := chargeOf(r, Charged(o, r.req.Sizing.BodyBytes))
	if !r.onCredit {
		cctx, cancel := w.callCtx(ctx)
		_, err := w.store.MarkDelivering(cctx, c)
		cancel()
		if err == nil {
			return
		}
		w.tel.Metrics.WalletStoreError(ctx, "deliver")
		if !unavailable(err) {
			w.log.Error("wallet: the store refused a delivering mark", slog.String("request_id", c.RequestID), slog.Any("error", err))
			return
		}
	}
	// On credit (no hold to mark) or the store is down: the journal.
	if w.journal != nil && w.appendJournal(recordOf(opDoubt, &c, w.clock.Now())) {
		r.doubt.Store(true)
	}
}

// chargeOf is r's charge for usage t at the list price of the model asked for.
func chargeOf(r *Reservation, t Tokens) store.Charge {
	m := r.req.Model
	return store.Charge{
		RequestID: r.req.RequestID, Tenant: r.req.Tenant, Model: m.Name,
		AmountMicros: Cost(m, t), InputTokens: t.Input, OutputTokens: t.Output, Estimated: t.Estimated,
	}
}

// endDoubt closes the journal's doubt of r once its request is decided
// (settled, refused, or released).
func (w *Wallet) endDoubt(r *Reservation) {
	if r.doubt.CompareAndSwap(true, false) {
		w.journalDone(r.req.RequestID)
	}
}

// journalCharge keeps c in the journal until the store takes it; false
// without a journal, or when it could not be written (then the charge is
// logged as before).
func (w *Wallet) journalCharge(c *store.Charge) bool {
	return w.journal != nil && w.appendJournal(recordOf(opCharge, c, w.clock.Now()))
}

// journalDone ends a request's journal records.
func (w *Wallet) journalDone(requestID string) {
	if w.journal != nil {
		w.appendJournal(journalRecord{Op: opDone, Time: w.clock.Now().UTC(), RequestID: requestID})
	}
}

func (w *Wallet) appendJournal(rec journalRecord) bool {
	if err := w.journal.append(rec); err != nil {
		w.log.Error("wallet: could not write the journal", slog.String("request_id", rec.RequestID), slog.Any("error", err))
		return false
	}
	return true
}

// replayJournal applies what the journal's last process left open: its
// charges are settled and its doubts recorded, each by request id (both
// idempotent), now if the store answers, else by the retry loop as soon as
// it does.
func (w *Wallet) replayJournal(ctx context.Context) {
	j := w.journal
	if j == nil {
		return
	}
	recs, bad := j.replay, j.bad
	j.replay = nil
	if bad > 0 {
		w.log.Error("wallet: lines of the journal could not be read (torn by a crash while written?); skipped",
			slog.String("journal", j.Path()), slog.Int("lines", bad))
	}
	if len(recs) == 0 {
		return
	}
	w.log.Warn("wallet: applying the journal's unsettled charges", slog.String("journal", j.Path()), slog.Int("requests", len(recs)))
	for i := range recs {
		c := recs[i].charge()
		op := &pendingOp{requestID: c.RequestID, tenant: c.Tenant, charge: &c, journaled: true}
		if recs[i].Op == opDoubt {
			op.doubt, op.since = true, recs[i].Time
		} else {
			op.owed = c.AmountMicros
			w.addUnsettled(c.Tenant, c.AmountMicros)
		}
		w.enqueue(op)
	}
	w.flush(ctx)
}
