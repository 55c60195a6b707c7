package gwtest

import (
	"context"
	"slices"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/telemetry"
)

// WaitTimers waits until the gateway's clock has at least n timers armed.
func (g *Gateway) WaitTimers(n int) {
	g.tb.Helper()
	if err := blockUntil(g.Clock, n); err != nil {
		g.tb.Fatalf("gateway never armed %d timers", n)
	}
}

// WaitArmed waits until the gateway armed a timer for exactly d (the gate's
// timeout, an idle timer): unlike WaitTimers, a timer armed earlier for
// something else (the chain deadline) does not satisfy it, so an Advance
// after it fires the timer waited for. It counts every timer armed since
// the gateway started: a test that sent an earlier request arming d has
// to wait on something of its own.
func (g *Gateway) WaitArmed(d time.Duration) {
	g.tb.Helper()
	testkit.Eventually(g.tb, func() bool { return slices.Contains(g.Armed.Armed(), d) }, "a timer armed for "+d.String())
}

// WaitUpstreamTimers waits until at least n fake-provider waits (stall,
// slow first token) are pending on the providers' clock.
func (g *Gateway) WaitUpstreamTimers(n int) {
	g.tb.Helper()
	if err := blockUntil(g.UpClock, n); err != nil {
		g.tb.Fatalf("providers never waited on their clock (%d)", n)
	}
}

func blockUntil(c *clockwork.FakeClock, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Bound)
	defer cancel()
	return c.BlockUntilContext(ctx, n)
}

// WaitNoTimers waits until the gateway finished its requests: no timer is
// left on its clock.
func (g *Gateway) WaitNoTimers() {
	g.tb.Helper()
	testkit.Eventually(g.tb, func() bool { return !g.busy() }, "the gateway's timers stopped")
}

// busy reports whether a timer is armed on the gateway's clock.
func (g *Gateway) busy() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	return g.Clock.BlockUntilContext(ctx, 1) == nil
}

// WaitAttempts waits until the fake provider id has received n requests
// for model.
func (g *Gateway) WaitAttempts(id, model string, n int) {
	g.tb.Helper()
	testkit.Eventually(g.tb, func() bool { return g.Attempts(id, model) >= n },
		id+" saw "+itoa(n)+" requests for "+model)
}

// WaitInGate waits until hop number hops (1-based) has its response
// headers and the gateway armed its timers: timers is how many the
// gateway's clock must hold then (gate timer, plus the chain deadline when
// set). The header timer is stopped before "await headers" ends, so the
// count is exact.
func (g *Gateway) WaitInGate(hops, timers int) {
	g.tb.Helper()
	g.WaitSpanEnd(telemetry.SpanAwaitHeaders, hops)
	g.WaitTimers(timers)
}

// WantArmed fails the test unless the engine armed at least one timer of
// exactly want and every timer it armed has one of the configured
// durations (want and others): a timeout armed early, late, halved or off
// by a millisecond shows up here, whichever timer it was.
func (g *Gateway) WantArmed(want time.Duration, others ...time.Duration) {
	g.tb.Helper()
	if err := checkArmed(g.Armed.Armed(), want, others...); err != nil {
		g.tb.Fatal(err)
	}
}

// LastSent is the body of the last request the fake provider id received.
func (g *Gateway) LastSent(id string) []byte {
	g.tb.Helper()
	log := g.Ups[id].Log()
	if len(log) == 0 {
		g.tb.Fatalf("%s received nothing", id)
	}
	return log[len(log)-1].Body
}
