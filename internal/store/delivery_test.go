package store

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The delivery rule's store half (docs/tenants.md), on both drivers: a
// hold marked delivering that expires becomes an in-doubt row, never a
// silent release or a silent charge; an operator resolves it, audited;
// adjustments move a balance either way with a reason. Each case starts
// with a tenant holding 10 000 micro-units in a database of its own.
func TestDeliveringAndInDoubt(t *testing.T) {
	type env struct {
		s      *Store
		clock  *fakeClock
		tenant string
	}
	hold := func(t *testing.T, e env, id string, amount int64) {
		t.Helper()
		h := Hold{RequestID: id, Tenant: e.tenant, AmountMicros: amount, ExpiresAt: e.clock.Now().Add(time.Minute)}
		if err := e.s.Hold(ctx(t), h); err != nil {
			t.Fatal(err)
		}
	}
	charge := func(e env, id string, amount int64) Charge {
		return Charge{RequestID: id, Tenant: e.tenant, Model: "m", AmountMicros: amount, InputTokens: 3, OutputTokens: 7}
	}
	mark := func(t *testing.T, e env, c Charge) {
		t.Helper()
		if ok, err := e.s.MarkDelivering(ctx(t), c); !ok || err != nil {
			t.Fatalf("MarkDelivering = %v, %v", ok, err)
		}
	}
	doubts := func(t *testing.T, e env) []InDoubt {
		t.Helper()
		d, err := e.s.InDoubtCharges(ctx(t), e.tenant)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	expire := func(t *testing.T, e env, want int) {
		t.Helper()
		e.clock.Advance(2 * time.Minute)
		if n, err := e.s.ExpireHolds(ctx(t), e.clock.Now()); n != want || err != nil {
			t.Fatalf("ExpireHolds = %d, %v; want %d", n, err, want)
		}
	}
	lastAudit := func(t *testing.T, e env) AuditEntry {
		t.Helper()
		a, err := e.s.Audit(ctx(t), 1)
		if err != nil || len(a) != 1 {
			t.Fatalf("Audit = %v, %v", a, err)
		}
		return a[0]
	}
	cases := []struct {
		name string
		run  func(t *testing.T, e env)
	}{
		// Why: the normal path; the mark leaves nothing behind once settled.
		{"a delivering hold that is settled is charged once, nothing in doubt", func(t *testing.T, e env) {
			hold(t, e, "r1", 4_000)
			mark(t, e, charge(e, "r1", 2_500))
			if _, err := e.s.Settle(ctx(t), charge(e, "r1", 2_500)); err != nil {
				t.Fatal(err)
			}
			expire(t, e, 0)
			wantWallet(t, e.s, e.tenant, 7_500, 0)
			if d := doubts(t, e); len(d) != 0 {
				t.Fatalf("in doubt: %+v", d)
			}
		}},
		// Why: the crash window: marked, never settled; the expiry frees
		// the reservation and records the charge as undecided.
		{"a delivering hold that expires becomes in doubt, not a charge", func(t *testing.T, e env) {
			hold(t, e, "r1", 4_000)
			mark(t, e, charge(e, "r1", 2_500))
			expire(t, e, 1)
			wantWallet(t, e.s, e.tenant, 10_000, 0)
			d := doubts(t, e)
			if len(d) != 1 || d[0].RequestID != "r1" || d[0].AmountMicros != 2_500 || d[0].Kind != KindInDoubt ||
				d[0].InputTokens != 3 || d[0].OutputTokens != 7 || d[0].Model != "m" {
				t.Fatalf("in doubt: %+v", d)
			}
			if tn, _ := e.s.Tenant(ctx(t), e.tenant); tn.InDoubt != 1 || tn.InDoubtMicros != 2_500 {
				t.Fatalf("tenant %+v: want 1 in doubt of 2500", tn)
			}
		}},
		// Why: a hold never marked was not being delivered: released silently, as before.
		{"an unmarked hold that expires is released silently", func(t *testing.T, e env) {
			hold(t, e, "r1", 4_000)
			expire(t, e, 1)
			wantWallet(t, e.s, e.tenant, 10_000, 0)
			if d := doubts(t, e); len(d) != 0 {
				t.Fatalf("in doubt: %+v", d)
			}
		}},
		// Why: no hold (served on credit, or expired already): nothing to mark.
		{"marking without a hold reports false", func(t *testing.T, e env) {
			if ok, err := e.s.MarkDelivering(ctx(t), charge(e, "r9", 1)); ok || err != nil {
				t.Fatalf("MarkDelivering = %v, %v", ok, err)
			}
		}},
		// Why: the operator's "delivered" answer is a real charge row, audited.
		{"resolving as charge writes the charge and an audit row", func(t *testing.T, e env) {
			hold(t, e, "r1", 4_000)
			mark(t, e, charge(e, "r1", 2_500))
			expire(t, e, 1)
			d, entry, err := e.s.ResolveInDoubt(ctx(t), "r1", ResolveCharge, "ops", "client confirmed receipt")
			if err != nil || entry == nil || entry.AmountMicros != -2_500 || entry.BalanceMicros != 7_500 || d.RequestID != "r1" {
				t.Fatalf("ResolveInDoubt = %+v, %+v, %v", d, entry, err)
			}
			wantWallet(t, e.s, e.tenant, 7_500, 0)
			if c := charges(t, e.s, e.tenant); len(c) != 1 || c[0].RequestID != "r1" {
				t.Fatalf("charges %+v", c)
			}
			if a := lastAudit(t, e); a.Action != ActionResolveCharge || a.Actor != "ops" || !strings.Contains(a.Detail, "client confirmed receipt") {
				t.Fatalf("audit %+v", a)
			}
			if _, _, err := e.s.ResolveInDoubt(ctx(t), "r1", ResolveRelease, "ops", "again"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("second resolve = %v, want ErrNotFound", err)
			}
		}},
		// Why: the operator's "not delivered" answer charges nothing, audited.
		{"resolving as release charges nothing and writes an audit row", func(t *testing.T, e env) {
			hold(t, e, "r1", 4_000)
			mark(t, e, charge(e, "r1", 2_500))
			expire(t, e, 1)
			if _, entry, err := e.s.ResolveInDoubt(ctx(t), "r1", ResolveRelease, "ops", "client saw an error"); err != nil || entry != nil {
				t.Fatalf("ResolveInDoubt = %+v, %v", entry, err)
			}
			wantWallet(t, e.s, e.tenant, 10_000, 0)
			if d := doubts(t, e); len(d) != 0 {
				t.Fatalf("in doubt: %+v", d)
			}
			if a := lastAudit(t, e); a.Action != ActionResolveRelease {
				t.Fatalf("audit %+v", a)
			}
		}},
		// Why: resolving needs a reason and one of the two answers.
		{"resolving without a reason or with another answer is invalid", func(t *testing.T, e env) {
			for _, how := range []Resolution{ResolveCharge, "refund"} {
				reason := ""
				if how == "refund" {
					reason = "x"
				}
				if _, _, err := e.s.ResolveInDoubt(ctx(t), "r1", how, "ops", reason); !errors.Is(err, ErrInvalid) {
					t.Fatalf("%s %q: %v, want ErrInvalid", how, reason, err)
				}
			}
		}},
		// Why: a journal's late charge makes an in-doubt row's charge final.
		{"a settle of an in-doubt request charges it and ends the doubt", func(t *testing.T, e env) {
			hold(t, e, "r1", 4_000)
			mark(t, e, charge(e, "r1", 2_500))
			expire(t, e, 1)
			if _, err := e.s.Settle(ctx(t), charge(e, "r1", 2_500)); err != nil {
				t.Fatal(err)
			}
			wantWallet(t, e.s, e.tenant, 7_500, 0)
			if d := doubts(t, e); len(d) != 0 {
				t.Fatalf("in doubt: %+v", d)
			}
		}},
		// Why: a journal's doubt, replayed twice (a crash during replay),
		// records one row and releases the hold once.
		{"RecordInDoubt releases the hold and is idempotent", func(t *testing.T, e env) {
			hold(t, e, "r1", 4_000)
			since := e.clock.Now()
			for i, want := range []bool{true, false} {
				if added, err := e.s.RecordInDoubt(ctx(t), charge(e, "r1", 2_500), since); added != want || err != nil {
					t.Fatalf("RecordInDoubt #%d = %v, %v; want %v", i, added, err, want)
				}
			}
			wantWallet(t, e.s, e.tenant, 10_000, 0)
			if d := doubts(t, e); len(d) != 1 || !d[0].Delivering.Equal(since.Truncate(time.Microsecond)) {
				t.Fatalf("in doubt: %+v", d)
			}
		}},
		// Why: a request charged already is not in doubt, whatever a journal says.
		{"RecordInDoubt of a charged request adds nothing", func(t *testing.T, e env) {
			if _, err := e.s.Settle(ctx(t), charge(e, "r1", 2_500)); err != nil {
				t.Fatal(err)
			}
			if added, err := e.s.RecordInDoubt(ctx(t), charge(e, "r1", 2_500), e.clock.Now()); added || err != nil {
				t.Fatalf("RecordInDoubt = %v, %v", added, err)
			}
			if d := doubts(t, e); len(d) != 0 {
				t.Fatalf("in doubt: %+v", d)
			}
		}},
		// Why: the operator's correction goes either way, with a ledger row and a reason.
		{"adjustments move the balance either way, with ledger and audit rows", func(t *testing.T, e env) {
			if b, err := e.s.Adjust(ctx(t), e.tenant, -336, "cli", "unsettled charge of r7"); err != nil || b != 9_664 {
				t.Fatalf("Adjust(-336) = %d, %v", b, err)
			}
			if b, err := e.s.Adjust(ctx(t), e.tenant, 36, "cli", "refund"); err != nil || b != 9_700 {
				t.Fatalf("Adjust(36) = %d, %v", b, err)
			}
			led, _ := e.s.Ledger(ctx(t), e.tenant, 2)
			if len(led) != 2 || led[0].Kind != KindAdjust || led[0].AmountMicros != 36 || led[1].AmountMicros != -336 {
				t.Fatalf("ledger %+v", led)
			}
			if a := lastAudit(t, e); a.Action != ActionAdjust || a.Actor != "cli" || !strings.Contains(a.Detail, "reason=refund") {
				t.Fatalf("audit %+v", a)
			}
			for _, bad := range []struct {
				amount int64
				reason string
			}{{0, "x"}, {5, ""}, {-maxAmount - 1, "x"}} {
				if _, err := e.s.Adjust(ctx(t), e.tenant, bad.amount, "cli", bad.reason); !errors.Is(err, ErrInvalid) {
					t.Fatalf("Adjust(%d, %q) = %v, want ErrInvalid", bad.amount, bad.reason, err)
				}
			}
			if _, err := e.s.Adjust(ctx(t), "nobody", 5, "cli", "x"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Adjust(nobody) = %v, want ErrNotFound", err)
			}
		}},
		// Why: the overspend bound is checked from the ledger: each row
		// records the hold its charge released and the reservation after it.
		{"ledger rows record the released hold and the reservation after them", func(t *testing.T, e env) {
			hold(t, e, "r1", 4_000)
			hold(t, e, "r2", 1_000)
			if _, err := e.s.Settle(ctx(t), charge(e, "r1", 4_500)); err != nil {
				t.Fatal(err)
			}
			c := charges(t, e.s, e.tenant)
			if len(c) != 1 || c[0].HeldMicros != 4_000 || c[0].ReservedMicros != 1_000 || c[0].BalanceMicros != 5_500 {
				t.Fatalf("charge row %+v", c)
			}
		}},
	}
	eachBackend(t, func(t *testing.T, b backend) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
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
