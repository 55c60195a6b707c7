package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/hopgate/hopgate/dispatch/admin"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/ratelimit"
	"github.com/hopgate/hopgate/telemetry"
)

// startLimiter sets the tenant limiter up (DESIGN §16) on the gateway's
// clock: its counters in this process (rate_limits.store: memory) or in
// the Redis replicas share (redis). A Redis that does not answer at start
// is logged, not fatal: rate_limits.on_store_error decides per request
// until it is back.
func (g *Gateway) startLimiter(ctx context.Context, cfg *config.Config, clock clockwork.Clock) error {
	var counter ratelimit.Counter
	rl := cfg.RateLimits
	if rl.Store == config.RateLimitRedis {
		o, err := ratelimit.RedisOptions(rl.URL)
		if err != nil {
			return err
		}
		c := redis.NewClient(o)
		g.limits = func() { _ = c.Close() }
		counter = ratelimit.NewRedis(c, "")
		pctx, cancel := context.WithTimeout(ctx, ratelimit.DefaultCallTimeout)
		err = c.Ping(pctx).Err()
		cancel()
		if err != nil {
			g.log.Warn("rate limits: Redis does not answer; on_store_error decides until it does",
				slog.String("url_env", rl.URLEnv), slog.String("on_store_error", rl.OnStoreError), slog.Any("error", err))
		}
	}
	var stored func(tenant, model string) (*config.TenantLimit, *config.TenantLimit)
	if g.store != nil {
		stored = g.refreshLimits(ctx, cfg.Store.KeyRefresh, clock)
	}
	g.tel.Metrics.ObserveRateLimitWindows(func() []telemetry.WindowObservation {
		return liveWindows(g.engine.WindowObservations(), clock.Now())
	})
	g.api.SetLimiter(ratelimit.New(ratelimit.Options{Counter: counter, Clock: clock, Stored: stored, Telemetry: g.tel, Logger: g.log}))
	if len(rl.Tenants) > 0 || rl.Store == config.RateLimitRedis {
		g.log.Info("tenant limits", slog.String("store", rl.Store), slog.Int("limits", len(rl.Tenants)),
			slog.String("on_store_error", rl.OnStoreError))
	}
	return nil
}

// closeLimiter stops the stored limits' refresh and closes the Redis
// client, if any.
func (g *Gateway) closeLimiter() {
	if g.limits != nil {
		g.limits()
		g.limits = nil
	}
}

type limitKey struct{ tenant, model string }

// refreshLimits reads the limits stored with tenants (`hopgate tenants
// limits`) now and every key_refresh after, like the keys: a limit set on
// any replica's store applies everywhere within that period, and an
// admission never waits on the database. A store that does not answer
// keeps the last limits read.
func (g *Gateway) refreshLimits(ctx context.Context, every time.Duration, clock clockwork.Clock) func(tenant, model string) (*config.TenantLimit, *config.TenantLimit) {
	var snap atomic.Pointer[map[limitKey]*config.TenantLimit]
	load := func() {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
		ls, err := g.store.Limits(lctx)
		cancel()
		if err != nil {
			g.log.Warn("rate limits: could not read the stored tenant limits; keeping the last ones", slog.Any("error", err))
			return
		}
		m := make(map[limitKey]*config.TenantLimit, len(ls))
		for _, l := range ls {
			m[limitKey{l.Tenant, l.Model}] = &config.TenantLimit{Tenant: l.Tenant, Model: l.Model, RPM: l.RPM, TPM: l.TPM}
		}
		snap.Store(&m)
	}
	load()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := clock.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.Chan():
				load()
			}
		}
	}()
	prev := g.limits
	g.limits = func() {
		close(stop)
		<-done
		if prev != nil {
			prev()
		}
	}
	return func(tenant, model string) (*config.TenantLimit, *config.TenantLimit) {
		m := snap.Load()
		if m == nil || len(*m) == 0 {
			return nil, nil
		}
		return (*m)[limitKey{tenant, ""}], (*m)[limitKey{tenant, model}]
	}
}

// checkLimiterReload refuses a reload that moves the counters: they live
// for the process (a new store would start every window empty).
func checkLimiterReload(cur, next *config.Config) error {
	a, b := cur.RateLimits, next.RateLimits
	if a.Store != b.Store || a.URL != b.URL {
		return fmt.Errorf("rate_limits.store and its url cannot change on reload; restart instead")
	}
	return nil
}

// tenantLimits is /admin/tenants' view of a tenant's limits: the file's,
// then the stored ones the file does not override, read from the store.
func (g *Gateway) tenantLimits(ctx context.Context, tenant string) []admin.LimitView {
	var stored []admin.LimitView
	if ls, err := g.store.Limits(ctx); err == nil {
		for _, l := range ls {
			if l.Tenant == tenant {
				stored = append(stored, admin.LimitView{Model: l.Model, RPM: l.RPM, TPM: l.TPM})
			}
		}
	}
	return admin.LimitsInForce(g.api.Config(), tenant, stored)
}

// liveWindows drops the windows whose stated reset has passed: their
// count is history until the channel's next answer states a new one, and
// a gauge still at 92 % would keep a demoted channel's tile red long after
// its window emptied (/admin greys the same tile, "reset since").
func liveWindows(obs []telemetry.WindowObservation, now time.Time) []telemetry.WindowObservation {
	out := obs[:0]
	for _, o := range obs {
		if o.ResetAt.IsZero() || now.Before(o.ResetAt) {
			out = append(out, o)
		}
	}
	return out
}
