package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hopgate/hopgate/internal/store"
)

// Why: issue 35, item 3: an unsettled charge logged at shutdown could not
// be applied by hand (a negative amount was read as a flag, 0 refused).
// adjust takes either sign with a reason, writes an audit row; resolve
// decides an in-doubt charge, which `ledger` shows first until then.
func TestTenantsCLIAdjustAndResolve(t *testing.T) {
	cfg, db := tenantsConfig(t)
	mustRun := func(args ...string) string {
		t.Helper()
		out, errs, code := tenantsRun(t, append(args, "--config", cfg)...)
		if code != 0 {
			t.Fatalf("tenants %v: exit %d\n%s", args, code, errs)
		}
		return out
	}
	mustRun("create", "acme")
	mustRun("topup", "acme", "1")
	if out := mustRun("adjust", "acme", "-0.000336", "--reason", "unsettled charge req-7"); out !=
		`{"tenant":"acme","amount_micros":-336,"balance_micros":999664,"reason":"unsettled charge req-7"}`+"\n" {
		t.Fatalf("adjust: %s", out)
	}
	for _, tc := range []struct {
		args []string
		code int
		sub  string
	}{
		{[]string{"adjust", "acme", "-1"}, 2, "--reason TEXT is required"},
		{[]string{"adjust", "acme", "0", "--reason", "x"}, 1, "must not be 0"},
		{[]string{"adjust", "acme", "-0.0000001", "--reason", "x"}, 1, "more than 6 decimal places"},
		{[]string{"resolve", "req-x", "refund", "--reason", "x"}, 1, "charge (it was delivered) or release"},
		{[]string{"resolve", "req-x", "charge", "--reason", "x"}, 1, "not in doubt"},
	} {
		_, errs, code := tenantsRun(t, append(tc.args, "--config", cfg)...)
		if code != tc.code || !strings.Contains(errs, tc.sub) {
			t.Errorf("tenants %v: exit %d, stderr %q; want %d and %q", tc.args, code, errs, tc.code, tc.sub)
		}
	}

	// A replica died between the delivering mark and the charge.
	s, err := store.Open(context.Background(), store.Config{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.Hold(ctx, store.Hold{RequestID: "req-9", Tenant: "acme", AmountMicros: 50, ExpiresAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkDelivering(ctx, store.Charge{RequestID: "req-9", Tenant: "acme", Model: "m", AmountMicros: 42}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ExpireHolds(ctx, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(mustRun("ledger", "acme")), "\n")
	var first struct {
		Kind         string `json:"kind"`
		RequestID    string `json:"request_id"`
		AmountMicros int64  `json:"amount_micros"`
	}
	if len(lines) != 3 || json.Unmarshal([]byte(lines[0]), &first) != nil || first.Kind != "in_doubt" || first.RequestID != "req-9" || first.AmountMicros != 42 {
		t.Fatalf("ledger:\n%s", strings.Join(lines, "\n"))
	}
	if out := mustRun("show", "acme"); !strings.Contains(out, `"in_doubt":1,"in_doubt_micros":42`) {
		t.Fatalf("show: %s", out)
	}
	out := mustRun("resolve", "req-9", "charge", "--reason", "client confirmed")
	if !strings.Contains(out, `"resolved":"charge"`) || !strings.Contains(out, `"amount_micros":-42`) {
		t.Fatalf("resolve: %s", out)
	}
	if tn, _ := s.Tenant(ctx, "acme"); tn.BalanceMicros != 999_664-42 || tn.InDoubt != 0 {
		t.Fatalf("tenant %+v", tn)
	}
	audit, _ := s.Audit(ctx, 2)
	if len(audit) != 2 || audit[0].Action != store.ActionResolveCharge || audit[1].Action != store.ActionAdjust ||
		!strings.Contains(audit[1].Detail, "reason=unsettled charge req-7") {
		t.Fatalf("audit %+v", audit)
	}
	if err := s.Verify(ctx); err != nil {
		t.Fatal(err)
	}
}
