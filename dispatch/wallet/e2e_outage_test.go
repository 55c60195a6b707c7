package wallet_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hopgate/hopgate/internal/testkit/pgtest"
)

// Why: PostgreSQL stopped and restarted under load. While it is down,
// charged requests fail clearly (503 wallet_unavailable, Retry-After,
// nothing sent upstream); charges of requests that were already served
// are kept and land when it is back; service resumes without restarting
// hopgate; every served request is charged exactly once and nothing stays
// reserved.
func TestPostgresRestartUnderLoad(t *testing.T) {
	cluster := pgtest.New(t) // our own server: this test stops it
	e := newE2E(t, "postgres")
	e.dsn = cluster.NewDatabase(t)
	e.st = e.openStore()
	ctx := context.Background()
	e.st.CreateTenant(ctx, "acme", "test")
	e.st.TopUp(ctx, "acme", 1_000_000_000, "test")
	g := e.start(e.configYAML("m|tokens=6|frame-delay=2ms", "ok", ""), t0)

	var ok, refused, upstreamCalls atomic.Int64
	var mu sync.Mutex
	var failures []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				status, body, err := streamOnce(g.Addr(), acmeKey, chatBody(i%2 == 0, 6))
				switch {
				case err == nil && status == http.StatusOK && strings.Contains(body, "tok6 "):
					ok.Add(1)
				case err == nil && status == http.StatusServiceUnavailable && errorCode(body) == "wallet_unavailable":
					refused.Add(1)
				default:
					mu.Lock()
					failures = append(failures, body)
					mu.Unlock()
				}
			}
		}()
	}
	waitFor(t, "load before the outage", func() bool { return ok.Load() >= 40 })
	if err := cluster.Stop(); err != nil {
		t.Fatal(err)
	}
	upBefore := len(e.ups["a"].Log())
	waitFor(t, "refusals during the outage", func() bool { return refused.Load() >= 20 })
	if r := post(t, g.Addr(), acmeKey, chatBody(false, 6)); r.status != http.StatusServiceUnavailable ||
		r.header.Get("Retry-After") != "5" || errorCode(r.body) != "wallet_unavailable" {
		t.Fatalf("during the outage: %d %v %s", r.status, r.header, r.body)
	}
	okDuring := ok.Load()
	// Nothing refused reached the upstream: only requests admitted before
	// the stop may still have been in flight.
	upstreamCalls.Store(int64(len(e.ups["a"].Log()) - upBefore))
	if err := cluster.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "service to resume", func() bool { return ok.Load() >= okDuring+40 })
	close(stop)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d requests failed otherwise, e.g. %q", len(failures), failures[0])
	}
	if upstreamCalls.Load() > 4 {
		t.Fatalf("%d upstream calls while the store was down (4 workers: at most 4 in flight)", upstreamCalls.Load())
	}
	waitFor(t, "pending charges to land", func() bool { return g.Wallet().Pending() == 0 })

	r := post(t, g.Addr(), acmeKey, chatBody(false, 6))
	if r.status != http.StatusOK {
		t.Fatalf("after the restart: %d %s", r.status, r.body)
	}
	served := ok.Load() + 1
	// The test's own pool still holds connections from before the
	// restart: each fails once (57P01) and is replaced.
	waitFor(t, "the test's store to reconnect", func() bool {
		for range 12 {
			if _, err := e.st.Tenant(ctx, "acme"); err != nil {
				return false
			}
		}
		return true
	})
	tn := e.tenant()
	led, err := e.st.Ledger(ctx, "acme", 0)
	if err != nil {
		t.Fatal(err)
	}
	var charges int64
	for _, row := range led {
		if row.Kind == "charge" {
			charges++
		}
	}
	t.Logf("served %d, refused %d while PostgreSQL was down", served, refused.Load())
	if charges != served || tn.ReservedMicros != 0 {
		t.Fatalf("%d charges for %d served requests; reserved %d", charges, served, tn.ReservedMicros)
	}
	if err := e.st.Verify(ctx); err != nil {
		t.Fatal(err)
	}
}
