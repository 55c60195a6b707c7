package gateway

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/dispatch/admin"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/wallet"
	"github.com/hopgate/hopgate/internal/store"
)

// openStore opens the configured store (and migrates it) before anything
// listens: a gateway that cannot reach its wallets at start says so at
// once. Once running, a store outage is the wallet's to handle.
func (g *Gateway) openStore(ctx context.Context, cfg *config.Config, clock clockwork.Clock) error {
	if !cfg.Store.Enabled {
		return nil
	}
	st, err := store.Open(ctx, store.Config{
		Driver: cfg.Store.Driver, Path: cfg.Store.Path, DSN: cfg.Store.DSN,
		Currency: cfg.Billing.Currency, Clock: clock.Now,
	})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	g.store = st
	if dir := cfg.Billing.JournalDir; dir != "" && cfg.Wallets() {
		j, err := wallet.OpenJournal(dir)
		if err != nil {
			st.Close()
			g.store = nil
			return fmt.Errorf("billing.journal_dir: %w", err)
		}
		g.journal = j
	}
	return nil
}

// startWallet starts charging (with auth.mode keys) once the API server
// exists; without auth the store only serves /admin/tenants.
func (g *Gateway) startWallet(ctx context.Context, clock clockwork.Clock) {
	if g.store == nil {
		return
	}
	cfg := g.api.Config()
	g.wallet = wallet.New(wallet.Options{Store: g.store, Config: g.api.Config, Clock: clock, Telemetry: g.tel, Logger: g.log,
		Journal: g.journal})
	g.wallet.Start(ctx)
	g.api.SetWallet(g.wallet)
	g.admin.Tenants = g.tenantsAPI()
	where := cfg.Store.Path
	if cfg.Store.Driver == config.StorePostgres {
		where = "env " + cfg.Store.DSNEnv
	}
	if !cfg.Wallets() {
		g.log.Warn("a store is configured but auth.mode is none: nothing is charged", slog.String("store", cfg.Store.Driver))
		return
	}
	g.log.Info("wallets on", slog.String("store", cfg.Store.Driver), slog.String("where", where),
		slog.String("currency", cfg.Billing.Currency), slog.String("on_store_error", cfg.Billing.OnStoreError),
		slog.Duration("hold_ttl", cfg.Billing.HoldTTL), slog.Duration("key_refresh", cfg.Store.KeyRefresh))
}

// closeWallet lands what it can of pending charges, then closes the store.
func (g *Gateway) closeWallet(ctx context.Context) {
	if g.wallet != nil {
		g.wallet.Close(ctx)
	}
	if g.store != nil {
		if err := g.store.Close(); err != nil {
			g.log.Warn("store close", slog.Any("error", err))
		}
		g.store = nil
	}
	if g.journal != nil {
		g.journal.Close()
		g.journal = nil
	}
}

// Wallet exposes the wallet (nil without a store), for tests.
func (g *Gateway) Wallet() *wallet.Wallet { return g.wallet }

// tenantsAPI is /admin/tenants over the store; keys issued or revoked there
// are known to this replica at once.
func (g *Gateway) tenantsAPI() *admin.Tenants {
	return &admin.Tenants{Store: g.store, Refresh: g.wallet.Refresh, Limits: g.tenantLimits}
}
