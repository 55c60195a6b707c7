package gateway

import (
	"context"
	"log/slog"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/ratelimit"
)

// startLimiter sets the tenant limiter up (DESIGN §16): the counters in
// this process (rate_limits.store: memory), on the gateway's clock.
func (g *Gateway) startLimiter(_ context.Context, cfg *config.Config, clock clockwork.Clock) error {
	g.api.SetLimiter(ratelimit.New(ratelimit.Options{Clock: clock, Telemetry: g.tel, Logger: g.log}))
	if len(cfg.RateLimits.Tenants) > 0 {
		g.log.Info("tenant limits on", slog.String("store", cfg.RateLimits.Store), slog.Int("limits", len(cfg.RateLimits.Tenants)))
	}
	return nil
}
