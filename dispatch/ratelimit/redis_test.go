package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/hopgate/hopgate/internal/testkit/redistest"
)

func redisCounter(t *testing.T, srv *redistest.Server) *Redis {
	t.Helper()
	o, err := RedisOptions(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return NewRedis(c, "")
}

// Why: Redis runs the same GCRA as Memory: the same takes and settles at
// the same times give the same verdicts, remaining counts and waits.
func TestRedisMatchesMemory(t *testing.T) {
	srv := redistest.New(t)
	cfg := limitsConfig(t, `rate_limits:
  tenants:
    - {tenant: "ac:me{x}", rpm: 4, tpm: 1000}
    - {tenant: "ac:me{x}", model: m, rpm: 2}
`)
	clk := clockwork.NewFakeClockAt(t0)
	mem := New(Options{Clock: clk, Counter: NewMemory()})
	red := New(Options{Clock: clk, Counter: redisCounter(t, srv), CallTimeout: time.Second})
	ctx := context.Background()
	steps := []struct {
		model  string
		tokens int64
		settle int64 // -1: keep the ticket unsettled
		adv    time.Duration
	}{
		{"m", 100, 10, 0}, {"m", 100, 500, 0}, {"m", 100, -1, 0}, {"n", 300, 0, 0}, {"n", 700, -1, 0},
		{"n", 1, -1, 15 * time.Second}, {"m", 1, -1, 0}, {"n", 2000, -1, 0}, {"n", 1, -1, time.Minute},
	}
	for i, s := range steps {
		clk.Advance(s.adv)
		a, b := mem.Admit(ctx, cfg, "ac:me{x}", s.model, s.tokens), red.Admit(ctx, cfg, "ac:me{x}", s.model, s.tokens)
		if a.StoreError != nil || b.StoreError != nil {
			t.Fatalf("step %d: %v %v", i, a.StoreError, b.StoreError)
		}
		if a.Refused != b.Refused || a.Cell != b.Cell || a.Windows != b.Windows || a.State.RetryAfter.Round(time.Millisecond) != b.State.RetryAfter.Round(time.Millisecond) {
			t.Fatalf("step %d: memory %+v\nredis %+v", i, a, b)
		}
		if s.settle >= 0 {
			a.Ticket.Settle(ctx, s.settle)
			b.Ticket.Settle(ctx, s.settle)
		}
	}
}

// Why: replicas sharing one Redis share the window: two limiters (two
// gateways' worth) admitting concurrently never admit more than the
// limit between them.
func TestRedisSharedAcrossReplicas(t *testing.T) {
	srv := redistest.New(t)
	cfg := limitsConfig(t, "rate_limits: {tenants: [{tenant: acme, rpm: 50}]}\n")
	clk := clockwork.NewFakeClockAt(t0)
	replicas := []*Limiter{
		New(Options{Clock: clk, Counter: redisCounter(t, srv), CallTimeout: time.Second}),
		New(Options{Clock: clk, Counter: redisCounter(t, srv), CallTimeout: time.Second}),
	}
	var admitted, failed atomic.Int64
	var wg sync.WaitGroup
	for _, l := range replicas {
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 25; i++ {
					a := l.Admit(context.Background(), cfg, "acme", "m", 0)
					switch {
					case a.StoreError != nil:
						failed.Add(1)
					case !a.Refused:
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	if admitted.Load() != 50 || failed.Load() != 0 {
		t.Fatalf("admitted %d (store errors %d) of 200, want exactly the limit, 50", admitted.Load(), failed.Load())
	}
}

// Why: a Redis that goes away answers within the call bound and
// on_store_error decides (allow admits, deny refuses); once it is back
// (empty: no persistence) the limits apply again.
func TestRedisGoneAndBack(t *testing.T) {
	srv := redistest.New(t)
	allow := limitsConfigEnv(t, "rate_limits: {store: redis, url_env: R, on_store_error: allow, tenants: [{tenant: acme, rpm: 1}]}\n", srv.URL())
	deny := limitsConfigEnv(t, "rate_limits: {store: redis, url_env: R, on_store_error: deny, tenants: [{tenant: acme, rpm: 1}]}\n", srv.URL())
	l := New(Options{Counter: redisCounter(t, srv), CallTimeout: 500 * time.Millisecond})
	ctx := context.Background()
	if a := l.Admit(ctx, allow, "acme", "m", 0); a.Refused {
		t.Fatalf("first: %+v", a)
	}
	if a := l.Admit(ctx, allow, "acme", "m", 0); !a.Refused || a.StoreError != nil {
		t.Fatalf("second: %+v", a)
	}
	srv.Stop()
	start := time.Now()
	if a := l.Admit(ctx, allow, "acme", "m", 0); a.Refused || a.StoreError == nil || a.Ticket != nil {
		t.Fatalf("allow while gone: %+v", a)
	}
	if a := l.Admit(ctx, deny, "acme", "m", 0); !a.Refused || a.StoreError == nil {
		t.Fatalf("deny while gone: %+v", a)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("two admissions against a dead Redis took %s", d)
	}
	srv.Start()
	var a Admission
	for i := 0; i < 100; i++ { // the client reconnects on its next call
		if a = l.Admit(ctx, allow, "acme", "m", 0); a.StoreError == nil {
			break
		}
	}
	if a.StoreError != nil || a.Refused {
		t.Fatalf("back: %+v", a)
	}
	if a := l.Admit(ctx, allow, "acme", "m", 0); !a.Refused || a.StoreError != nil {
		t.Fatalf("limits after the restart: %+v", a)
	}
}

// Why: admission is all or none, so a request refused by two limits
// waits for the slower: Retry-After is the longest wait of the refused
// cells (it was the first's, and a client retrying then was refused
// again), and the limits it did not break say their window without it.
func TestRefusalWaitsForTheLongest(t *testing.T) {
	srv := redistest.New(t)
	cfg := limitsConfig(t, `rate_limits:
  tenants:
    - {tenant: acme, rpm: 10, tpm: 1000}
    - {tenant: acme, model: m, tpm: 100}
`)
	for name, counter := range map[string]Counter{"memory": NewMemory(), "redis": redisCounter(t, srv)} {
		t.Run(name, func(t *testing.T) {
			clk := clockwork.NewFakeClockAt(t0)
			l := New(Options{Clock: clk, Counter: counter, CallTimeout: time.Second})
			ctx := context.Background()
			for _, s := range []struct {
				model  string
				tokens int64
			}{{"n", 900}, {"m", 60}} {
				if a := l.Admit(ctx, cfg, "acme", s.model, s.tokens); a.Refused {
					t.Fatalf("%s %d refused: %+v", s.model, s.tokens, a)
				}
			}
			// 95 more: the tenant's 1000 tpm frees 55 in 3.3s, the
			// model's 100 tpm in 33s.
			a := l.Admit(ctx, cfg, "acme", "m", 95)
			if !a.Refused || a.Cell.Model != "m" || a.Cell.Kind != Tokens ||
				a.State.RetryAfter.Round(time.Millisecond) != 33*time.Second {
				t.Fatalf("refusal %+v (cell %+v), want the model's 33s", a.State, a.Cell)
			}
			if w := a.Windows[Requests]; !a.Has[Requests] || w.Remaining != 8 {
				t.Fatalf("requests window %+v: the refused request took none of 10, 2 used", w)
			}
		})
	}
}
