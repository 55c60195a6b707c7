package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/dispatch/config"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// Why: GCRA's arithmetic is the contract of every limit (memory and
// Redis run it): a full window admits exactly the limit, refuses the next
// with the wait until one unit drains, and refills at limit per minute.
func TestTakeWindow(t *testing.T) {
	for _, tc := range []struct {
		name      string
		limit, n  int64
		takes     int           // admitted takes before the probe
		after     time.Duration // elapsed before the probe
		ok        bool
		remaining int64
		retry     time.Duration
	}{
		{"empty window admits", 60, 1, 0, 0, true, 59, 0},
		{"the limit is admitted", 60, 1, 59, 0, true, 0, 0},
		{"one past the limit waits one interval", 60, 1, 60, 0, false, 0, time.Second},
		{"one interval later one more fits", 60, 1, 60, time.Second, true, 0, 0},
		{"a large take waits for its size", 100, 30, 3, 0, false, 10, 12 * time.Second},
		{"a full minute empties the window", 60, 1, 60, time.Minute, true, 59, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tat int64
			now := t0.UnixNano()
			for i := 0; i < tc.takes; i++ {
				var ok bool
				if tat, ok, _ = take(tat, now, tc.n, tc.limit); !ok {
					t.Fatalf("take %d refused", i+1)
				}
			}
			_, ok, st := take(tat, now+int64(tc.after), tc.n, tc.limit)
			if ok != tc.ok || st.Remaining != tc.remaining || st.RetryAfter != tc.retry {
				t.Fatalf("ok %v remaining %d retry %s, want %v %d %s", ok, st.Remaining, st.RetryAfter, tc.ok, tc.remaining, tc.retry)
			}
		})
	}
}

// Why: a request costing more than the whole limit can never fit; it is
// refused at once and said to be too large, not told to wait forever.
func TestTakeTooLarge(t *testing.T) {
	_, ok, st := take(0, t0.UnixNano(), 1001, 1000)
	if ok || !st.TooLarge || st.RetryAfter != Window {
		t.Fatalf("ok %v %+v", ok, st)
	}
	// No overflow at the bounds: the largest limit and a huge cost.
	if _, ok, _ := take(0, t0.UnixNano(), 1<<62, config.MaxRateLimit); ok {
		t.Fatal("a cost above the limit was admitted")
	}
	if d := interval(config.MaxRateLimit, 1); d <= 0 {
		t.Fatalf("interval overflowed: %s", d)
	}
}

func limitsConfig(t *testing.T, yml string) *config.Config {
	t.Helper()
	return limitsConfigEnv(t, yml, "")
}

func limitsConfigB(b *testing.B, yml string) *config.Config {
	b.Helper()
	return limitsConfigEnv(b, yml, "")
}

// limitsConfigEnv is limitsConfig with R, the Redis URL variable, set.
func limitsConfigEnv(t testing.TB, yml, redisURL string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(`auth: {mode: none}
channels: [{id: a, base_url: "http://127.0.0.1:1/v1"}]
models:
  - {name: m, chain: [{channel: a}]}
  - {name: n, chain: [{channel: a}]}
`+yml), func(k string) (string, bool) { return redisURL, k == "R" && redisURL != "" })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Why: the tenant's limit and its per-model limit are taken together or
// not at all: a request refused by the model's limit must not spend the
// tenant's, and another model is not held to the first model's limit.
func TestAdmitAllOrNothing(t *testing.T) {
	cfg := limitsConfig(t, `rate_limits:
  tenants:
    - {tenant: acme, rpm: 3}
    - {tenant: acme, model: m, rpm: 1}
`)
	clk := clockwork.NewFakeClockAt(t0)
	l := New(Options{Clock: clk})
	ctx := context.Background()
	if a := l.Admit(ctx, cfg, "acme", "m", 0); a.Refused || a.Ticket == nil {
		t.Fatalf("first on m: %+v", a)
	}
	a := l.Admit(ctx, cfg, "acme", "m", 0)
	if !a.Refused || a.Cell.Model != "m" || a.Cell.Kind != Requests || a.State.RetryAfter != time.Minute {
		t.Fatalf("second on m: %+v", a)
	}
	// The refusal took nothing from the tenant's 3: n gets two more.
	for i := 0; i < 2; i++ {
		if a := l.Admit(ctx, cfg, "acme", "n", 0); a.Refused {
			t.Fatalf("n %d refused: %+v", i, a)
		}
	}
	if a := l.Admit(ctx, cfg, "acme", "n", 0); !a.Refused || a.Cell.Model != "" {
		t.Fatalf("fourth: %+v", a)
	}
	// Another tenant has no limit: no ticket, no cell.
	if a := l.Admit(ctx, cfg, "other", "m", 0); a.Refused || a.Ticket != nil {
		t.Fatalf("unlimited tenant: %+v", a)
	}
}

// Why: TPM reserves the estimate and settles with the usage: an estimate
// far above the usage must not keep the tenant out for the rest of the
// minute, and usage above the estimate is owed (the next request waits).
func TestTicketSettles(t *testing.T) {
	cfg := limitsConfig(t, "rate_limits: {tenants: [{tenant: acme, tpm: 1000}]}\n")
	clk := clockwork.NewFakeClockAt(t0)
	l := New(Options{Clock: clk})
	ctx := context.Background()
	a := l.Admit(ctx, cfg, "acme", "m", 900)
	if a.Refused || a.Windows[Tokens].Remaining != 100 {
		t.Fatalf("admit 900: %+v", a)
	}
	if b := l.Admit(ctx, cfg, "acme", "m", 500); !b.Refused {
		t.Fatal("500 more fitted in 100")
	}
	a.Ticket.Settle(ctx, 100) // used 100 of the 900 reserved
	b := l.Admit(ctx, cfg, "acme", "m", 500)
	if b.Refused || b.Windows[Tokens].Remaining != 400 {
		t.Fatalf("after the settle: %+v", b)
	}
	b.Ticket.Settle(ctx, 1500) // 1000 above the estimate: owed
	if c := l.Admit(ctx, cfg, "acme", "m", 1); !c.Refused || c.State.RetryAfter <= 0 {
		t.Fatalf("in debt: %+v", c)
	}
	b.Ticket.Settle(ctx, 0) // a second settle changes nothing
	if c := l.Admit(ctx, cfg, "acme", "m", 1); !c.Refused {
		t.Fatal("the second settle refunded")
	}
}

// Why: a request the wallet refuses after admission was never sent: its
// request and tokens are given back.
func TestTicketRelease(t *testing.T) {
	cfg := limitsConfig(t, "rate_limits: {tenants: [{tenant: acme, rpm: 1, tpm: 100}]}\n")
	l := New(Options{Clock: clockwork.NewFakeClockAt(t0)})
	ctx := context.Background()
	a := l.Admit(ctx, cfg, "acme", "m", 100)
	a.Ticket.Release(ctx)
	if b := l.Admit(ctx, cfg, "acme", "m", 100); b.Refused {
		t.Fatalf("after a release: %+v", b)
	}
}

// Why: an idle tenant costs nothing after a window: the sweep forgets
// empty cells, so memory follows the tenants active in the last minute.
func TestMemorySweeps(t *testing.T) {
	cfg := limitsConfig(t, "rate_limits: {tenants: [{tenant: acme, rpm: 10}, {tenant: beta, rpm: 10}]}\n")
	clk := clockwork.NewFakeClockAt(t0)
	m := NewMemory()
	l := New(Options{Clock: clk, Counter: m})
	ctx := context.Background()
	l.Admit(ctx, cfg, "acme", "m", 0)
	l.Admit(ctx, cfg, "beta", "m", 0)
	if m.Len() != 2 {
		t.Fatalf("len %d", m.Len())
	}
	clk.Advance(2 * Window)
	l.Admit(ctx, cfg, "acme", "m", 0)
	if m.Len() != 1 {
		t.Fatalf("after the sweep: len %d, want 1", m.Len())
	}
}

// Why: stored limits (hopgate tenants limits) apply to tenants the file
// does not limit; the file's entry wins for the tenant it names.
func TestStoredLimits(t *testing.T) {
	cfg := limitsConfig(t, "rate_limits: {tenants: [{tenant: acme, rpm: 5}]}\n")
	stored := func(tenant, model string) (*config.TenantLimit, *config.TenantLimit) {
		return &config.TenantLimit{Tenant: tenant, RPM: 1}, nil
	}
	l := New(Options{Clock: clockwork.NewFakeClockAt(t0), Stored: stored})
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if a := l.Admit(ctx, cfg, "acme", "m", 0); a.Refused {
			t.Fatalf("acme %d: the stored rpm 1 overrode the file's 5", i)
		}
	}
	l.Admit(ctx, cfg, "beta", "m", 0)
	if a := l.Admit(ctx, cfg, "beta", "m", 0); !a.Refused {
		t.Fatal("beta's stored rpm 1 did not apply")
	}
}

// Why: a realtime session is charged its tokens as its responses end, on
// top of what it reserved; nothing is charged after it settled.
func TestTicketCharges(t *testing.T) {
	cfg := limitsConfig(t, `rate_limits:
  tenants:
    - {tenant: acme, tpm: 100}
`)
	clk := clockwork.NewFakeClockAt(t0)
	l := New(Options{Clock: clk})
	ctx := context.Background()
	a := l.Admit(ctx, cfg, "acme", "m", 0)
	if a.Refused || a.Ticket == nil {
		t.Fatalf("admission %+v", a)
	}
	a.Ticket.Charge(ctx, 30)
	a.Ticket.Charge(ctx, 30)
	a.Ticket.Settle(ctx, 0)
	a.Ticket.Charge(ctx, 1000) // settled: nothing
	if b := l.Admit(ctx, cfg, "acme", "m", 40); b.Refused || b.Windows[Tokens].Remaining != 0 {
		t.Fatalf("60 charged, 40 more: %+v", b)
	}
	if b := l.Admit(ctx, cfg, "acme", "m", 1); !b.Refused {
		t.Fatal("the window held more than its 100 tokens")
	}
}
