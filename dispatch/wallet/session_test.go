package wallet_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/wallet"
)

// Why: a session's wallet on a real store — the hold is the model's
// realtime_hold (its default here), a response id seen twice is charged
// once, responses without an id are charged each, the ledger keys are the
// session's, Close waits for the queued charges, releases the hold and
// leaves no goroutine behind.
func TestSessionCharges(t *testing.T) {
	f := newFixture(t, "")
	leaks := goleak.IgnoreCurrent()
	f.topUp(2 * config.DefaultRealtimeHold)
	ctx := context.Background()
	m := f.cfg.Model("m")
	s, err := f.w.ReserveSession(ctx, wallet.Request{RequestID: "sess-1", Tenant: "acme", Config: f.cfg, Model: m})
	if err != nil {
		t.Fatal(err)
	}
	if s.Amount() != config.DefaultRealtimeHold || f.tenant().ReservedMicros != config.DefaultRealtimeHold {
		t.Fatalf("hold %d, reserved %d", s.Amount(), f.tenant().ReservedMicros)
	}
	cost := wallet.Cost(m, wallet.Tokens{Input: 10, Output: 20})
	for _, tc := range []struct {
		id   string
		want int64
	}{
		{"resp_1", cost}, // charged
		{"resp_1", 0},    // the replay: nothing
		{"", cost},       // no id: keyed #1
		{"", cost},       // and #2
	} {
		if got := s.Charge(ctx, tc.id, 10, 20); got != tc.want {
			t.Errorf("Charge(%q) = %d, want %d", tc.id, got, tc.want)
		}
	}
	s.Close(ctx)
	s.Close(ctx) // once
	if tn := f.tenant(); tn.ReservedMicros != 0 || tn.BalanceMicros != 2*config.DefaultRealtimeHold-3*cost {
		t.Fatalf("after Close: %+v", tn)
	}
	led, err := f.st.Store.Ledger(ctx, "acme", 0)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, row := range led {
		if row.Kind == "charge" {
			keys[row.RequestID] = true
		}
	}
	for _, k := range []string{"sess-1/resp_1", "sess-1/#1", "sess-1/#2"} {
		if !keys[k] {
			t.Errorf("no charge %s in %v", k, keys)
		}
	}
	if len(keys) != 3 {
		t.Errorf("charges %v, want 3", keys)
	}
	goleak.VerifyNone(t, leaks)
}
