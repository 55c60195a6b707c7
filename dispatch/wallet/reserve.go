package wallet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/money"
	"github.com/hopgate/hopgate/internal/store"
	"github.com/hopgate/hopgate/telemetry"
)

// Request is one request to reserve for.
type Request struct {
	// RequestID keys the hold and the ledger row: unique per request
	// (package api derives it from the trace and server span ids).
	RequestID string
	Tenant    string
	// Config is the configuration the request started with.
	Config *config.Config
	// Model is the model the client asked for: its list price is charged,
	// whichever model or channel served.
	Model  *config.Model
	Sizing Sizing
}

// Reservation is one request's hold, from Reserve to Finish (or Guard).
type Reservation struct {
	w        *Wallet
	req      Request
	amount   int64 // micro-units held
	onCredit bool  // served on credit (fail_open): no hold in the store
	done     atomic.Bool
	// delivering: Deliver ran (once); doubt: it could only write its
	// mark to the journal, which holds the request open until it ends.
	delivering atomic.Bool
	doubt      atomic.Bool
}

// Amount is the reserved amount in micro-units.
func (r *Reservation) Amount() int64 { return r.amount }

// OnCredit reports a reservation served on credit while the store was down.
func (r *Reservation) OnCredit() bool { return r.onCredit }

// Reserve holds the request's estimated cost at the model's list price
// (Reserved × ListPrice) with one conditional update on the store. Errors:
// ErrInsufficientBalance and ErrNoWallet (402), ErrUnavailable (503 when
// fail_closed, or fail_open without credit left), anything else is the
// store refusing the request (logged; the caller answers 503 too). Once
// Close has begun every reservation is refused with ErrUnavailable.
func (w *Wallet) Reserve(ctx context.Context, q Request) (*Reservation, error) {
	return w.reserve(ctx, q, Cost(q.Model, Reserved(q.Model, q.Sizing)))
}

// reserve holds amount micro-units for q (Reserve's, or a realtime
// session's hold).
func (w *Wallet) reserve(ctx context.Context, q Request, amount int64) (_ *Reservation, err error) {
	r := &Reservation{w: w, req: q, amount: amount}
	// In flight from before the hold: Close cannot miss a hold written
	// while it starts.
	if !w.track(r) {
		return nil, errClosing
	}
	defer func() {
		if err != nil {
			w.untrack(r)
		}
	}()
	h := store.Hold{
		RequestID: q.RequestID, Tenant: q.Tenant, AmountMicros: r.amount,
		ExpiresAt: w.clock.Now().Add(positive(q.Config.Billing.HoldTTL, config.DefaultHoldTTL)),
	}
	// No second try here: the store already runs again a transaction that
	// met a stale connection (after a database restart), so an error is an
	// outage or a lost answer.
	err = w.hold(ctx, h)
	switch {
	case err == nil:
		w.nudge()
		return r, nil
	case errors.Is(err, store.ErrInsufficientBalance), errors.Is(err, store.ErrNotFound):
		return nil, err
	case unavailable(err):
		w.tel.Metrics.WalletStoreError(ctx, "hold")
		b := q.Config.Billing
		if b.OnStoreError == config.StoreErrorFailOpen && w.credit(q.Tenant, r.amount, b.FailOpenCredit) {
			// Served on credit. The hold may have been written before the
			// answer was lost: the settle or release of this request
			// removes it either way.
			r.onCredit = true
			w.tel.Metrics.WalletStoreDown(ctx, q.Model.Name, telemetry.StoreDownCredit)
			return r, nil
		}
		w.tel.Metrics.WalletStoreDown(ctx, q.Model.Name, telemetry.StoreDownRefused)
		// The hold may have been written before the answer was lost.
		w.enqueue(&pendingOp{requestID: q.RequestID, tenant: q.Tenant})
		return nil, fmt.Errorf("%w (%w)", ErrUnavailable, err)
	default:
		w.tel.Metrics.WalletStoreError(ctx, "hold")
		w.log.Error("wallet: the store refused a hold", slog.String("request_id", q.RequestID),
			slog.String("tenant", q.Tenant), slog.Int64("amount_micros", r.amount), slog.Any("error", err))
		return nil, err
	}
}

func (w *Wallet) hold(ctx context.Context, h store.Hold) error {
	cctx, cancel := w.callCtx(ctx)
	defer cancel()
	return w.store.Hold(cctx, h)
}

// credit admits amount on credit for tenant when what it has unsettled on
// this replica stays within limit.
func (w *Wallet) credit(tenant string, amount, limit int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.unsettled[tenant]+amount > limit {
		return false
	}
	w.unsettled[tenant] += amount
	return true
}

// Unsettled is what tenant owes this replica that the store has not
// recorded yet (fail_open credit and charges waiting to be settled).
func (w *Wallet) Unsettled(tenant string) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.unsettled[tenant]
}

// addUnsettled moves tenant's unsettled amount by delta.
func (w *Wallet) addUnsettled(tenant string, delta int64) {
	if delta == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if v := w.unsettled[tenant] + delta; v > 0 {
		w.unsettled[tenant] = v
	} else {
		delete(w.unsettled, tenant)
	}
}

// Finish settles an answered request at the model's list price for the
// usage reported (or estimated, see Charged), and releases an unanswered
// one. It returns the charge in micro-units (0 for a release). Only the
// first call of Finish or Guard acts.
func (r *Reservation) Finish(ctx context.Context, o Outcome) int64 {
	if r == nil || !r.done.CompareAndSwap(false, true) {
		return 0
	}
	defer r.w.untrack(r)
	if !o.Answered {
		r.w.release(ctx, r)
		r.w.endDoubt(r)
		return 0
	}
	return r.w.settle(ctx, r, Charged(o, r.req.Sizing.BodyBytes))
}

// Guard runs deferred once Reserve succeeded (directly, or from the
// caller's deferred cleanup): when the handler panicked, or ended without
// Finish, the hold is released (a panic never charges: what was delivered
// is unknown). It does not recover: a panic goes on.
func (r *Reservation) Guard() {
	if r.done.CompareAndSwap(false, true) {
		r.w.release(context.Background(), r)
		r.w.endDoubt(r)
		r.w.untrack(r)
	}
}

func (w *Wallet) settle(ctx context.Context, r *Reservation, t Tokens) int64 {
	m := r.req.Model
	c := chargeOf(r, t)
	basis := telemetry.UsageReported
	if t.Estimated {
		basis = telemetry.UsageEstimated
	}
	w.tel.Metrics.WalletCharge(ctx, m.Name, basis)
	w.tel.Metrics.Revenue(ctx, m.Name, money.Float(c.AmountMicros))
	credit := int64(0)
	if r.onCredit {
		credit = r.amount
	}
	if w.isClosed() {
		// A handler that outlived Close's wait: the store may be closed.
		w.addUnsettled(c.Tenant, -credit)
		if w.journalCharge(&c) {
			w.logUnsettled("unsettled charge: the request ended after the wallet closed; kept in the journal "+
				w.journal.Path()+", applied at the next start", &c, nil)
			return c.AmountMicros
		}
		w.logUnsettled("unsettled charge: the request ended after the wallet closed; apply it by hand", &c, nil)
		return c.AmountMicros
	}
	cctx, cancel := w.callCtx(ctx)
	st, err := w.store.Settle(cctx, c)
	cancel()
	switch {
	case err == nil:
		w.addUnsettled(c.Tenant, -credit)
		if st.Duplicate {
			w.log.Warn("wallet: request settled twice; charged once", slog.String("request_id", c.RequestID))
		}
		w.endDoubt(r)
		w.nudge()
	case unavailable(err):
		w.tel.Metrics.WalletStoreError(ctx, "settle")
		// The charge is owed: it waits in pending (counted as unsettled
		// instead of the reservation) until the store takes it.
		w.addUnsettled(c.Tenant, c.AmountMicros-credit)
		// Journaled first (fsynced): from here a kill loses nothing.
		journaled := w.journalCharge(&c)
		w.enqueue(&pendingOp{requestID: c.RequestID, tenant: c.Tenant, charge: &c, owed: c.AmountMicros, journaled: journaled})
	default:
		w.addUnsettled(c.Tenant, -credit)
		w.tel.Metrics.WalletStoreError(ctx, "settle")
		w.logUnsettled("wallet: the store refused a charge", &c, err)
		w.endDoubt(r)
	}
	return c.AmountMicros
}

func (w *Wallet) release(ctx context.Context, r *Reservation) {
	if r.onCredit {
		w.addUnsettled(r.req.Tenant, -r.amount)
	}
	if w.isClosed() {
		w.log.Warn("wallet: a request ended after the wallet closed; its hold expires after billing.hold_ttl",
			slog.String("request_id", r.req.RequestID), slog.String("tenant", r.req.Tenant))
		return
	}
	cctx, cancel := w.callCtx(ctx)
	_, err := w.store.Release(cctx, r.req.RequestID)
	cancel()
	switch {
	case err == nil:
		w.nudge()
	case unavailable(err):
		w.tel.Metrics.WalletStoreError(ctx, "release")
		w.enqueue(&pendingOp{requestID: r.req.RequestID, tenant: r.req.Tenant})
	default:
		w.tel.Metrics.WalletStoreError(ctx, "release")
		w.log.Error("wallet: the store refused a release", slog.String("request_id", r.req.RequestID), slog.Any("error", err))
	}
}
