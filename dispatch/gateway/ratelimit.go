package gateway

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/ratelimit"
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
	g.api.SetLimiter(ratelimit.New(ratelimit.Options{Counter: counter, Clock: clock, Telemetry: g.tel, Logger: g.log}))
	if len(rl.Tenants) > 0 || rl.Store == config.RateLimitRedis {
		g.log.Info("tenant limits", slog.String("store", rl.Store), slog.Int("limits", len(rl.Tenants)),
			slog.String("on_store_error", rl.OnStoreError))
	}
	return nil
}

// closeLimiter closes the Redis client, if any.
func (g *Gateway) closeLimiter() {
	if g.limits != nil {
		g.limits()
		g.limits = nil
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
