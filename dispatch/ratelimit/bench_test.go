package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// BenchmarkAdmit is the in-process limiter's cost per request on the
// admission path: a tenant with rpm and tpm, taken and settled.
func BenchmarkAdmit(b *testing.B) {
	cfg := limitsConfigB(b, "rate_limits: {tenants: [{tenant: acme, rpm: 1000000000, tpm: 1000000000}]}\n")
	clk := clockwork.NewFakeClockAt(t0)
	l := New(Options{Clock: clk})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		a := l.Admit(ctx, cfg, "acme", "m", 100)
		a.Ticket.Settle(ctx, 50)
		clk.Advance(time.Microsecond)
	}
}

// BenchmarkAdmitUnlimited is the cost for a tenant without limits: one
// lookup.
func BenchmarkAdmitUnlimited(b *testing.B) {
	cfg := limitsConfigB(b, "rate_limits: {tenants: [{tenant: acme, rpm: 10}]}\n")
	l := New(Options{Clock: clockwork.NewFakeClockAt(t0)})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l.Admit(ctx, cfg, "other", "m", 100)
	}
}
