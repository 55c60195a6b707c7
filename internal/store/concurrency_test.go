package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/hopgate/hopgate/internal/testkit/pgtest"
)

// 200 requests of one tenant at once, through two Stores on one database
// (two replicas on one PostgreSQL; two processes on one SQLite file),
// whose balance covers only part of them. Each holds, then fails (release)
// or settles twice at once, once through each Store, like a replica that
// retries a settle whose answer it lost. The overspend stays within the
// documented bound, the balance is the top-up minus the charges, and each
// request is charged once.
func TestConcurrentRequestsOnTwoStores(t *testing.T) {
	const (
		requests = 200
		topUp    = 100_000
		hold     = 2_000
		usual    = 1_500 // most charges: below the hold
		above    = 2_400 // every 10th: above the hold, the only way to overspend
	)
	eachBackend(t, func(t *testing.T, b backend) {
		cfg := b.newDB(t)
		stores := [2]*Store{openStore(t, cfg), openStore(t, cfg)}
		newTenant(t, stores[0], "acme", topUp)

		var (
			mu       sync.Mutex
			charged  = map[string]int64{} // request id → amount, from the settle that charged
			excess   int64                // Σ (charge − hold) over charges above their hold
			refused  int
			released int
			wg       sync.WaitGroup
		)
		for i := range requests {
			wg.Go(func() {
				id := fmt.Sprint("req-", i)
				s := stores[i%2]
				err := s.Hold(context.Background(), Hold{RequestID: id, Tenant: "acme", AmountMicros: hold, ExpiresAt: time.Now().Add(time.Hour)})
				if errors.Is(err, ErrInsufficientBalance) {
					mu.Lock()
					refused++
					mu.Unlock()
					return
				}
				if err != nil {
					t.Errorf("%s: Hold: %v", id, err)
					return
				}
				if i%9 == 0 { // the request failed: no charge
					if ok, err := s.Release(context.Background(), id); !ok || err != nil {
						t.Errorf("%s: Release = %v, %v", id, ok, err)
					}
					mu.Lock()
					released++
					mu.Unlock()
					return
				}
				amount := int64(usual)
				if i%10 == 0 {
					amount = above
				}
				var settles [2]Settlement
				var errs [2]error
				var both sync.WaitGroup
				for k := range 2 {
					both.Go(func() {
						settles[k], errs[k] = stores[k].Settle(context.Background(),
							Charge{RequestID: id, Tenant: "acme", Model: "m", AmountMicros: amount, OutputTokens: 100})
					})
				}
				both.Wait()
				if errs[0] != nil || errs[1] != nil {
					t.Errorf("%s: Settle: %v, %v", id, errs[0], errs[1])
					return
				}
				if settles[0].Duplicate == settles[1].Duplicate || settles[0].Entry != settles[1].Entry {
					t.Errorf("%s: two settles %+v and %+v; want one charge and one duplicate of it", id, settles[0], settles[1])
					return
				}
				mu.Lock()
				charged[id] = amount
				excess += max(0, amount-hold)
				mu.Unlock()
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}

		var total int64
		for _, a := range charged {
			total += a
		}
		w, err := stores[1].Tenant(ctx(t), "acme")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d charged (%d micro-units), %d released, %d refused; balance %d, bound -%d",
			b.name, len(charged), total, released, refused, w.BalanceMicros, excess)
		if refused == 0 || len(charged) == 0 {
			t.Fatalf("the balance should cover part of the requests: %d charged, %d refused", len(charged), refused)
		}
		if w.BalanceMicros != topUp-total {
			t.Fatalf("balance %d, want top-up − charges = %d", w.BalanceMicros, topUp-total)
		}
		if w.BalanceMicros < -excess {
			t.Fatalf("overspent: balance %d below the bound −%d (Σ charge − hold)", w.BalanceMicros, excess)
		}
		if w.ReservedMicros != 0 {
			t.Fatalf("%d micro-units still reserved after every request ended", w.ReservedMicros)
		}
		rows := charges(t, stores[0], "acme")
		seen := map[string]bool{}
		for _, e := range rows {
			if seen[e.RequestID] || charged[e.RequestID] != -e.AmountMicros {
				t.Fatalf("ledger row %+v: duplicate, or not the charge settled", e)
			}
			seen[e.RequestID] = true
		}
		if len(rows) != len(charged) {
			t.Fatalf("%d charge rows for %d charged requests", len(rows), len(charged))
		}
		if err := stores[0].Verify(ctx(t)); err != nil {
			t.Fatal(err)
		}
	})
}

// PostgreSQL stopped under load and started again: while it is down every
// call fails with ErrUnavailable (the 503 of a charged request), and once
// it is back the same Store serves again, without being reopened. Settles
// that failed are retried and charge exactly once; holds whose outcome was
// lost expire. Nothing is charged twice or lost.
func TestPostgresStoppedAndRestartedUnderLoad(t *testing.T) {
	cluster := pgtest.New(t)
	clock := newClock()
	cfg := Config{Driver: DriverPostgres, DSN: cluster.NewDatabase(t), Clock: clock.Now}
	s := openStore(t, cfg)
	const topUp = 1_000_000_000
	newTenant(t, s, "acme", topUp)

	var (
		ok, down    atomic.Int64 // calls that succeeded, calls that failed unavailable
		mu          sync.Mutex
		charged     = map[string]int64{}
		unsettled   []string // holds made, settles that failed
		unexpected  []error
		stop        = make(chan struct{})
		load        sync.WaitGroup
		seq         atomic.Int64
		recordError = func(err error) {
			if errors.Is(err, ErrUnavailable) {
				down.Add(1)
				return
			}
			mu.Lock()
			unexpected = append(unexpected, err)
			mu.Unlock()
		}
	)
	for range 8 {
		load.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprint("req-", seq.Add(1))
				err := s.Hold(context.Background(), Hold{RequestID: id, Tenant: "acme", AmountMicros: 5_000, ExpiresAt: clock.Now().Add(time.Minute)})
				if err != nil {
					recordError(err) // a hold whose commit was lost expires below
					continue
				}
				st, err := s.Settle(context.Background(), Charge{RequestID: id, Tenant: "acme", Model: "m", AmountMicros: 3_000})
				mu.Lock()
				if err != nil {
					unsettled = append(unsettled, id)
				} else {
					charged[id] = -st.Entry.AmountMicros
				}
				mu.Unlock()
				if err != nil {
					recordError(err)
					continue
				}
				ok.Add(1)
			}
		})
	}
	// waitFor polls a condition of the load, for readiness, never for time.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				close(stop)
				load.Wait()
				t.Fatalf("timed out waiting for %s (ok %d, unavailable %d)", what, ok.Load(), down.Load())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	waitFor("requests served", func() bool { return ok.Load() >= 50 })
	if err := cluster.Stop(); err != nil {
		t.Fatal(err)
	}
	okWhenStopped := ok.Load()
	waitFor("requests failing", func() bool { return down.Load() >= 50 })
	if n := ok.Load(); n > okWhenStopped+8 { // a call in flight at Stop may still have committed
		t.Fatalf("%d calls succeeded while PostgreSQL was down", n-okWhenStopped)
	}
	for name, call := range map[string]func() error{
		"Ping":   func() error { return s.Ping(ctx(t)) },
		"Tenant": func() error { _, err := s.Tenant(ctx(t), "acme"); return err },
		"TopUp":  func() error { _, err := s.TopUp(ctx(t), "acme", 1, actor); return err },
		"Open": func() error {
			s2, err := Open(ctx(t), cfg)
			if err == nil {
				s2.Close()
			}
			return err
		},
	} {
		if err := call(); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s while PostgreSQL is down: %v, want ErrUnavailable", name, err)
		}
	}

	if err := cluster.Start(); err != nil {
		t.Fatal(err)
	}
	okWhenStarted := ok.Load()
	waitFor("requests served again", func() bool { return ok.Load() >= okWhenStarted+50 })
	close(stop)
	load.Wait()
	if len(unexpected) > 0 {
		t.Fatalf("errors other than ErrUnavailable: %v", errors.Join(unexpected...))
	}

	// The caller's duty after ErrUnavailable on Settle: retry it. A settle
	// whose commit happened before the connection died answers Duplicate.
	for _, id := range unsettled {
		st, err := s.Settle(ctx(t), Charge{RequestID: id, Tenant: "acme", Model: "m", AmountMicros: 3_000})
		if err != nil {
			t.Fatalf("retried settle of %s: %v", id, err)
		}
		charged[id] = -st.Entry.AmountMicros
	}
	clock.Advance(time.Hour)
	if _, err := s.ExpireHolds(ctx(t), clock.Now()); err != nil {
		t.Fatal(err)
	}

	var total int64
	for _, a := range charged {
		total += a
	}
	w, err := s.Tenant(ctx(t), "acme")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d charged, %d settles retried, %d calls failed unavailable", len(charged), len(unsettled), down.Load())
	if w.BalanceMicros != topUp-total || w.ReservedMicros != 0 {
		t.Fatalf("balance %d reserved %d; want %d and 0", w.BalanceMicros, w.ReservedMicros, topUp-total)
	}
	if rows := charges(t, s, "acme"); len(rows) != len(charged) {
		t.Fatalf("%d charge rows for %d charged requests", len(rows), len(charged))
	}
	if err := s.Verify(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// An SQLite file locked by another process past busy_timeout is
// unavailable, and usable again once the lock is gone.
func TestSQLiteLockedIsUnavailable(t *testing.T) {
	cfg := backends[0].newDB(t)
	cfg.BusyTimeout = 50 * time.Millisecond
	s := openStore(t, cfg)
	newTenant(t, s, "acme", 1_000)

	other := openStore(t, cfg) // another process, holding the write lock
	conn, err := other.db.Conn(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx(t), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TopUp(ctx(t), "acme", 1, actor); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("TopUp on a locked file: %v, want ErrUnavailable", err)
	}
	if _, err := conn.ExecContext(ctx(t), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TopUp(ctx(t), "acme", 1, actor); err != nil {
		t.Fatalf("TopUp after the lock went: %v", err)
	}
}

// Why: after PostgreSQL restarts (or fails over), every pooled connection
// used within the last second fails once with the server's goodbye
// (57P01) before database/sql drops it. A gateway in steady traffic would
// answer that many requests 503 wallet_unavailable for a restart that
// lasted a tenth of a second. Every kind of call — a transaction, a row, a
// query, a ping — must instead run again on a live connection and succeed
// the first time it is made after the restart.
func TestPostgresRestartCostsNoCall(t *testing.T) {
	cluster := pgtest.New(t)
	clock := newClock()
	const pool = 4
	cfg := Config{Driver: DriverPostgres, DSN: cluster.NewDatabase(t), Clock: clock.Now, MaxConns: pool}
	newTenant(t, openStore(t, cfg), "acme", 1_000_000)
	// Each case has a Store of its own, and warm fills its pool with
	// connections used a moment ago, as steady traffic does. pgx pings a
	// connection idle over a second (by the wall clock) before reusing it
	// and drops it quietly when the ping fails; one used within the second
	// is not pinged. A restart on a loaded machine can take over a second,
	// so the case's Store never pings: every connection stays one used a
	// moment ago, however long the restart took.
	cfg.shouldPing = func(context.Context, stdlib.ShouldPingParams) bool { return false }
	var s *Store
	warm := func() {
		for range 2 {
			conns := make([]*sql.Conn, pool)
			for i := range conns {
				c, err := s.db.Conn(ctx(t))
				if err != nil {
					t.Fatal(err)
				}
				if err := c.PingContext(ctx(t)); err != nil {
					t.Fatal(err)
				}
				conns[i] = c
			}
			for _, c := range conns {
				c.Close()
			}
		}
	}
	n := 0
	for name, call := range map[string]func() error{
		"Hold (a transaction)": func() error {
			n++
			return s.Hold(ctx(t), Hold{RequestID: fmt.Sprint("req-", n), Tenant: "acme", AmountMicros: 1, ExpiresAt: clock.Now().Add(time.Minute)})
		},
		"Tenant (a row)":   func() error { _, err := s.Tenant(ctx(t), "acme"); return err },
		"Keys (a query)":   func() error { _, err := s.Keys(ctx(t)); return err },
		"Ping":             func() error { return s.Ping(ctx(t)) },
		"TopUp (a change)": func() error { _, err := s.TopUp(ctx(t), "acme", 1, actor); return err },
	} {
		s = openStore(t, cfg)
		warm()
		if err := cluster.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := cluster.Start(); err != nil {
			t.Fatal(err)
		}
		before := s.stale.Load()
		if err := call(); err != nil {
			t.Errorf("%s, first call after the restart: %v", name, err)
		}
		if s.stale.Load() == before {
			t.Errorf("%s met no stale connection: the restart was not felt, so this case proves nothing", name)
		}
	}
	if err := openStore(t, cfg).Verify(ctx(t)); err != nil {
		t.Fatal(err)
	}
}
