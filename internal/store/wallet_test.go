package store

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// newTenant creates tenant with balance micro-units.
func newTenant(t *testing.T, s *Store, tenant string, balance int64) {
	t.Helper()
	if _, err := s.CreateTenant(ctx(t), tenant, actor); err != nil {
		t.Fatal(err)
	}
	if balance > 0 {
		if _, err := s.TopUp(ctx(t), tenant, balance, actor); err != nil {
			t.Fatal(err)
		}
	}
}

// wantWallet fails unless tenant's balance and reservation are as given.
func wantWallet(t *testing.T, s *Store, tenant string, balance, reserved int64) {
	t.Helper()
	w, err := s.Tenant(ctx(t), tenant)
	if err != nil {
		t.Fatal(err)
	}
	if w.BalanceMicros != balance || w.ReservedMicros != reserved {
		t.Fatalf("wallet %q: balance %d reserved %d, want %d and %d", tenant, w.BalanceMicros, w.ReservedMicros, balance, reserved)
	}
}

// charges returns tenant's charge rows, newest first.
func charges(t *testing.T, s *Store, tenant string) []LedgerEntry {
	t.Helper()
	all, err := s.Ledger(ctx(t), tenant, 0)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(all, func(e LedgerEntry) bool { return e.Kind != KindCharge })
}

// Every path of a hold, on both drivers: each case starts with a tenant
// holding 10 000 micro-units in a database of its own, and the ledger must
// agree with the balances after it.
func TestHoldSettleRelease(t *testing.T) {
	type env struct {
		s      *Store
		clock  *fakeClock
		tenant string
	}
	hold := func(e env, id string, amount int64) Hold {
		return Hold{RequestID: e.tenant + "/" + id, Tenant: e.tenant, AmountMicros: amount, ExpiresAt: e.clock.Now().Add(time.Minute)}
	}
	charge := func(e env, id string, amount int64) Charge {
		return Charge{RequestID: e.tenant + "/" + id, Tenant: e.tenant, Model: "gpt-4o-mini", AmountMicros: amount, InputTokens: 12, OutputTokens: 34}
	}
	cases := []struct {
		name string
		run  func(t *testing.T, e env)
	}{
		{"a hold that fits reserves it", func(t *testing.T, e env) {
			if err := e.s.Hold(ctx(t), hold(e, "r1", 4_000)); err != nil {
				t.Fatal(err)
			}
			wantWallet(t, e.s, e.tenant, 10_000, 4_000)
			if w, _ := e.s.Tenant(ctx(t), e.tenant); w.AvailableMicros() != 6_000 {
				t.Fatalf("available %d, want 6000", w.AvailableMicros())
			}
		}},
		{"a hold of exactly what is available fits", func(t *testing.T, e env) {
			if err := e.s.Hold(ctx(t), hold(e, "r1", 4_000)); err != nil {
				t.Fatal(err)
			}
			if err := e.s.Hold(ctx(t), hold(e, "r2", 6_000)); err != nil {
				t.Fatal(err)
			}
			wantWallet(t, e.s, e.tenant, 10_000, 10_000)
		}},
		{"a hold that does not fit is refused and reserves nothing", func(t *testing.T, e env) {
			if err := e.s.Hold(ctx(t), hold(e, "r1", 6_000)); err != nil {
				t.Fatal(err)
			}
			if err := e.s.Hold(ctx(t), hold(e, "r2", 4_001)); !errors.Is(err, ErrInsufficientBalance) {
				t.Fatalf("Hold = %v, want ErrInsufficientBalance", err)
			}
			wantWallet(t, e.s, e.tenant, 10_000, 6_000)
			if ok, err := e.s.Release(ctx(t), e.tenant+"/r2"); ok || err != nil {
				t.Fatalf("the refused hold was stored: Release = %v, %v", ok, err)
			}
		}},
		{"a hold is idempotent per request id", func(t *testing.T, e env) {
			if err := e.s.Hold(ctx(t), hold(e, "r1", 4_000)); err != nil {
				t.Fatal(err)
			}
			if err := e.s.Hold(ctx(t), hold(e, "r1", 9_000)); err != nil {
				t.Fatalf("second Hold of r1: %v", err)
			}
			wantWallet(t, e.s, e.tenant, 10_000, 4_000)
		}},
		{"an unknown tenant holds nothing", func(t *testing.T, e env) {
			h := hold(e, "r1", 1)
			h.Tenant = "nobody"
			if err := e.s.Hold(ctx(t), h); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Hold = %v, want ErrNotFound", err)
			}
		}},
		{"bad holds are invalid", func(t *testing.T, e env) {
			noID := hold(e, "", 1)
			noID.RequestID = ""
			for _, h := range []Hold{noID, hold(e, "r1", -1), hold(e, "r1", maxAmount+1)} {
				if err := e.s.Hold(ctx(t), h); !errors.Is(err, ErrInvalid) {
					t.Errorf("Hold(%+v) = %v, want ErrInvalid", h, err)
				}
			}
		}},
		{"settle releases the hold and charges the usage", func(t *testing.T, e env) {
			if err := e.s.Hold(ctx(t), hold(e, "r1", 4_000)); err != nil {
				t.Fatal(err)
			}
			got, err := e.s.Settle(ctx(t), charge(e, "r1", 2_500))
			if err != nil {
				t.Fatal(err)
			}
			want := Settlement{HeldMicros: 4_000, Entry: LedgerEntry{
				Time: e.clock.Now().Truncate(time.Microsecond), Tenant: e.tenant, Kind: KindCharge, RequestID: e.tenant + "/r1",
				Model: "gpt-4o-mini", AmountMicros: -2_500, BalanceMicros: 7_500, InputTokens: 12, OutputTokens: 34, HeldMicros: 4_000}}
			if got != want {
				t.Fatalf("Settle = %+v\nwant     %+v", got, want)
			}
			wantWallet(t, e.s, e.tenant, 7_500, 0)
			if c := charges(t, e.s, e.tenant); len(c) != 1 || c[0] != want.Entry {
				t.Fatalf("ledger charges %+v", c)
			}
		}},
		{"a second settle is a no-op that returns the first", func(t *testing.T, e env) {
			if err := e.s.Hold(ctx(t), hold(e, "r1", 4_000)); err != nil {
				t.Fatal(err)
			}
			first, err := e.s.Settle(ctx(t), charge(e, "r1", 2_500))
			if err != nil {
				t.Fatal(err)
			}
			e.clock.Advance(time.Second)
			again, err := e.s.Settle(ctx(t), charge(e, "r1", 3_000))
			if err != nil || !again.Duplicate || again.Entry != first.Entry {
				t.Fatalf("second Settle = %+v, %v; want Duplicate with %+v", again, err, first.Entry)
			}
			wantWallet(t, e.s, e.tenant, 7_500, 0)
			if c := charges(t, e.s, e.tenant); len(c) != 1 {
				t.Fatalf("%d charge rows, want 1", len(c))
			}
		}},
		{"a hold made again after the settle is released by the next settle", func(t *testing.T, e env) {
			if _, err := e.s.Settle(ctx(t), charge(e, "r1", 1_000)); err != nil {
				t.Fatal(err)
			}
			if err := e.s.Hold(ctx(t), hold(e, "r1", 2_000)); err != nil {
				t.Fatal(err)
			}
			if got, err := e.s.Settle(ctx(t), charge(e, "r1", 1_000)); err != nil || !got.Duplicate {
				t.Fatalf("Settle = %+v, %v; want Duplicate", got, err)
			}
			wantWallet(t, e.s, e.tenant, 9_000, 0)
		}},
		{"a charge above its hold is taken whole, below zero if need be", func(t *testing.T, e env) {
			if err := e.s.Hold(ctx(t), hold(e, "r1", 10_000)); err != nil {
				t.Fatal(err)
			}
			got, err := e.s.Settle(ctx(t), charge(e, "r1", 10_700))
			if err != nil || got.Entry.BalanceMicros != -700 {
				t.Fatalf("Settle = %+v, %v; want balance -700", got, err)
			}
			wantWallet(t, e.s, e.tenant, -700, 0)
			h := hold(e, "r2", 0)
			if err := e.s.Hold(ctx(t), h); !errors.Is(err, ErrInsufficientBalance) {
				t.Fatalf("a wallet below zero held %v: %v", h, err)
			}
		}},
		{"a charge whose hold expired is still charged", func(t *testing.T, e env) {
			if err := e.s.Hold(ctx(t), hold(e, "r1", 4_000)); err != nil {
				t.Fatal(err)
			}
			if n, err := e.s.ExpireHolds(ctx(t), e.clock.Now().Add(time.Hour)); n != 1 || err != nil {
				t.Fatalf("ExpireHolds = %d, %v", n, err)
			}
			got, err := e.s.Settle(ctx(t), charge(e, "r1", 2_500))
			if err != nil || got.HeldMicros != 0 || got.Entry.BalanceMicros != 7_500 {
				t.Fatalf("Settle = %+v, %v", got, err)
			}
			wantWallet(t, e.s, e.tenant, 7_500, 0)
		}},
		{"a charge without a hold is charged", func(t *testing.T, e env) {
			got, err := e.s.Settle(ctx(t), charge(e, "r1", 2_500))
			if err != nil || got.HeldMicros != 0 || got.Entry.BalanceMicros != 7_500 {
				t.Fatalf("Settle = %+v, %v", got, err)
			}
		}},
		{"a charge to another tenant than the hold's is refused", func(t *testing.T, e env) {
			newTenant(t, e.s, e.tenant+"-other", 5_000)
			if err := e.s.Hold(ctx(t), hold(e, "r1", 4_000)); err != nil {
				t.Fatal(err)
			}
			c := charge(e, "r1", 100)
			c.Tenant = e.tenant + "-other"
			if _, err := e.s.Settle(ctx(t), c); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Settle = %v, want ErrInvalid", err)
			}
			wantWallet(t, e.s, e.tenant, 10_000, 4_000)
			wantWallet(t, e.s, e.tenant+"-other", 5_000, 0)
		}},
		{"a charge to an unknown tenant is not found", func(t *testing.T, e env) {
			c := charge(e, "r1", 100)
			c.Tenant = "nobody"
			if _, err := e.s.Settle(ctx(t), c); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Settle = %v, want ErrNotFound", err)
			}
		}},
		{"bad charges are invalid", func(t *testing.T, e env) {
			noID := charge(e, "", 1)
			noID.RequestID = ""
			bad := []Charge{noID, charge(e, "r1", -1), charge(e, "r1", maxAmount+1)}
			c := charge(e, "r1", 1)
			c.InputTokens = -1
			bad = append(bad, c)
			for _, c := range bad {
				if _, err := e.s.Settle(ctx(t), c); !errors.Is(err, ErrInvalid) {
					t.Errorf("Settle(%+v) = %v, want ErrInvalid", c, err)
				}
			}
		}},
		{"an estimated charge says so in the ledger", func(t *testing.T, e env) {
			c := charge(e, "r1", 300)
			c.Estimated = true
			if _, err := e.s.Settle(ctx(t), c); err != nil {
				t.Fatal(err)
			}
			if got := charges(t, e.s, e.tenant); len(got) != 1 || !got[0].Estimated {
				t.Fatalf("ledger %+v", got)
			}
		}},
		{"release drops the hold without a charge, once", func(t *testing.T, e env) {
			if err := e.s.Hold(ctx(t), hold(e, "r1", 4_000)); err != nil {
				t.Fatal(err)
			}
			if ok, err := e.s.Release(ctx(t), e.tenant+"/r1"); !ok || err != nil {
				t.Fatalf("Release = %v, %v", ok, err)
			}
			if ok, err := e.s.Release(ctx(t), e.tenant+"/r1"); ok || err != nil {
				t.Fatalf("second Release = %v, %v", ok, err)
			}
			wantWallet(t, e.s, e.tenant, 10_000, 0)
			if c := charges(t, e.s, e.tenant); len(c) != 0 {
				t.Fatalf("release charged: %+v", c)
			}
		}},
		{"expiry releases holds due at or before now, once", func(t *testing.T, e env) {
			now := e.clock.Now()
			for i, after := range []time.Duration{-time.Second, 0, time.Second} {
				h := hold(e, fmt.Sprint("r", i), 1_000)
				h.ExpiresAt = now.Add(after)
				if err := e.s.Hold(ctx(t), h); err != nil {
					t.Fatal(err)
				}
			}
			if n, err := e.s.ExpireHolds(ctx(t), now); n != 2 || err != nil {
				t.Fatalf("ExpireHolds = %d, %v; want 2", n, err)
			}
			wantWallet(t, e.s, e.tenant, 10_000, 1_000)
			if n, err := e.s.ExpireHolds(ctx(t), now); n != 0 || err != nil {
				t.Fatalf("second ExpireHolds = %d, %v; want 0", n, err)
			}
			if n, err := e.s.ExpireHolds(ctx(t), now.Add(time.Second)); n != 1 || err != nil {
				t.Fatalf("ExpireHolds a second later = %d, %v; want 1", n, err)
			}
			wantWallet(t, e.s, e.tenant, 10_000, 0)
		}},
	}
	eachBackend(t, func(t *testing.T, b backend) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				// A database per case: expiry sees every hold in it.
				clock := newClock()
				cfg := b.newDB(t)
				cfg.Clock = clock.Now
				e := env{s: openStore(t, cfg), clock: clock, tenant: "acme"}
				newTenant(t, e.s, e.tenant, 10_000)
				tc.run(t, e)
				if err := e.s.Verify(ctx(t)); err != nil {
					t.Fatal(err)
				}
			})
		}
	})
}

// Verify notices a balance that disagrees with its ledger, a ledger row
// whose balance does not follow from the one before, and a reservation
// that disagrees with the holds.
func TestVerifyFindsInconsistencies(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := openStore(t, b.newDB(t))
		newTenant(t, s, "acme", 10_000)
		if _, err := s.TopUp(ctx(t), "acme", 5_000, actor); err != nil {
			t.Fatal(err)
		}
		if err := s.Verify(ctx(t)); err != nil {
			t.Fatal(err)
		}
		for _, tamper := range []struct{ do, undo string }{
			{`UPDATE tenants SET balance_micros = balance_micros + 1`, `UPDATE tenants SET balance_micros = balance_micros - 1`},
			{`UPDATE tenants SET reserved_micros = reserved_micros + 1`, `UPDATE tenants SET reserved_micros = reserved_micros - 1`},
			{`UPDATE ledger SET balance_micros = balance_micros + 1 WHERE amount_micros = 10000`,
				`UPDATE ledger SET balance_micros = balance_micros - 1 WHERE amount_micros = 10000`},
		} {
			if _, err := s.db.ExecContext(ctx(t), tamper.do); err != nil {
				t.Fatal(err)
			}
			if err := s.Verify(ctx(t)); !errors.Is(err, ErrInconsistent) {
				t.Errorf("after %q: Verify = %v, want ErrInconsistent", tamper.do, err)
			}
			if _, err := s.db.ExecContext(ctx(t), tamper.undo); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Verify(ctx(t)); err != nil {
			t.Fatal(err)
		}
	})
}

// A long mixed history (top-ups, holds, settles, releases, expiries, some
// charges above their holds) keeps every ledger summing to its balance,
// and every row's balance following from the one before.
func TestLedgerSumsToBalance(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		clock := newClock()
		cfg := b.newDB(t)
		cfg.Clock = clock.Now
		s := openStore(t, cfg)
		newTenant(t, s, "acme", 50_000)
		newTenant(t, s, "beta", 20_000)
		var want = map[string]int64{"acme": 50_000, "beta": 20_000}
		for i := range 120 {
			tenant := []string{"acme", "beta"}[i%2]
			id := fmt.Sprint("req-", i)
			clock.Advance(time.Second)
			switch {
			case i%17 == 0:
				if _, err := s.TopUp(ctx(t), tenant, 3_000, actor); err != nil {
					t.Fatal(err)
				}
				want[tenant] += 3_000
				continue
			case i%13 == 0:
				// Settled without a hold (it had expired long ago).
				if _, err := s.Settle(ctx(t), Charge{RequestID: id, Tenant: tenant, AmountMicros: 700}); err != nil {
					t.Fatal(err)
				}
				want[tenant] -= 700
				continue
			}
			err := s.Hold(ctx(t), Hold{RequestID: id, Tenant: tenant, AmountMicros: 2_000, ExpiresAt: clock.Now().Add(time.Minute)})
			if errors.Is(err, ErrInsufficientBalance) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			switch i % 5 {
			case 0:
				s.Release(ctx(t), id)
			case 1:
				// Left to expire.
			default:
				amount := int64(500 + 37*i%1_800)
				if i%11 == 0 {
					amount = 2_300 // above its hold
				}
				if _, err := s.Settle(ctx(t), Charge{RequestID: id, Tenant: tenant, Model: "m", AmountMicros: amount}); err != nil {
					t.Fatal(err)
				}
				want[tenant] -= amount
			}
			if i%10 == 9 {
				if _, err := s.ExpireHolds(ctx(t), clock.Now().Add(2*time.Minute)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := s.Verify(ctx(t)); err != nil {
			t.Fatal(err)
		}
		for tenant, balance := range want {
			ledger, err := s.Ledger(ctx(t), tenant, 0)
			if err != nil {
				t.Fatal(err)
			}
			var total int64
			for _, e := range ledger {
				total += e.AmountMicros
			}
			w, _ := s.Tenant(ctx(t), tenant)
			if total != balance || w.BalanceMicros != balance || ledger[0].BalanceMicros != balance {
				t.Fatalf("%s: ledger sums to %d, balance %d, newest row says %d; want %d",
					tenant, total, w.BalanceMicros, ledger[0].BalanceMicros, balance)
			}
		}
	})
}
