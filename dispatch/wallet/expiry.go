package wallet

import (
	"context"
	"log/slog"
	"time"

	"github.com/hopgate/hopgate/dispatch/config"
)

// expiryLoop releases expired holds every hold_ttl/4 (at most every
// MaxExpirySweep): the holds of a replica that died (SIGKILL, a lost node)
// free the wallets they blocked within hold_ttl plus one sweep. Every
// replica sweeps; the store releases each hold once.
func (w *Wallet) expiryLoop() {
	for {
		t := w.clock.NewTimer(sweepInterval(positive(w.cfg().Billing.HoldTTL, config.DefaultHoldTTL)))
		select {
		case <-w.stop:
			t.Stop()
			return
		case <-t.Chan():
		}
		w.ExpireHolds(context.Background())
	}
}

// ExpireHolds releases the holds expired as of the wallet's clock.
func (w *Wallet) ExpireHolds(ctx context.Context) {
	cctx, cancel := w.callCtx(ctx)
	n, err := w.store.ExpireHolds(cctx, w.clock.Now())
	cancel()
	if err != nil {
		w.tel.Metrics.WalletStoreError(ctx, "expire")
		w.log.Warn("wallet: releasing expired holds failed", slog.Any("error", err))
		return
	}
	if n > 0 {
		w.tel.Metrics.WalletExpiredHolds(ctx, n)
		w.log.Warn("wallet: released expired holds (a replica stopped without settling them)", slog.Int("holds", n))
	}
}

func sweepInterval(ttl time.Duration) time.Duration {
	return max(min(ttl/4, MaxExpirySweep), time.Second)
}

// positive is d, or def for a zero duration (a Config built in code rather
// than by Parse): a zero period must not turn a loop into a busy one.
func positive(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
