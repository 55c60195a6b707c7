package gateway

import (
	"context"
	"log/slog"
	"time"
)

// StreamCutWait bounds how long a drain that ran out of time waits, after
// DrainTimeout, for the committed streams it cuts to write their in-band
// gateway_shutting_down frame before the connections close: a flush to a
// client that reads nothing must not hold the exit.
const StreamCutWait = time.Second

// cutStreams ends the committed streams still open when the drain ran out
// of time with the in-band error frame, so a client sees an answer that
// says it is incomplete (not one that stops), and logs how many.
func (g *Gateway) cutStreams(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), StreamCutWait)
	defer cancel()
	if n := g.engine.CutStreams(cctx); n > 0 {
		g.log.Warn("drain timeout: streams still open end with gateway_shutting_down", slog.Int("streams", n))
	}
}

// endSessions waits for the realtime sessions until the drain ends, then
// ends those still open with gateway_shutting_down and close 1012
// (service restart: reconnect), waiting at most StreamCutWait for them.
func (g *Gateway) endSessions(drain, ctx context.Context) {
	g.engine.Sessions().Wait(drain)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), StreamCutWait)
	defer cancel()
	if n := g.engine.Sessions().End(cctx); n > 0 {
		g.log.Warn("drain: realtime sessions still open end with gateway_shutting_down and 1012", slog.Int("sessions", n))
	}
}

// waitHandlers waits, at most StreamCutWait, for the handlers the drain
// cut to return: their request log lines and counters come after their
// last frame, and the process must not exit under them.
func (g *Gateway) waitHandlers(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), StreamCutWait)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for g.inFlight.InFlight() > 0 {
		select {
		case <-cctx.Done():
			g.log.Warn("drain timeout: handlers still running at exit", slog.Int64("in_flight", g.inFlight.InFlight()))
			return
		case <-tick.C:
		}
	}
}
