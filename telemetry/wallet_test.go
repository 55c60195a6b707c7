package telemetry

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
)

// The wallet metrics of DESIGN §9 as Prometheus sees them: names, types,
// labels (never a tenant), and values in currency units.
func TestWalletMetricNamesAndLabels(t *testing.T) {
	tel := setupTest(t, Options{Region: "eu-west-1", HealthyRatio: 1})
	ctx, m := context.Background(), tel.Metrics
	m.Revenue(ctx, "gpt", 0.000123)
	m.Revenue(ctx, "gpt", -1) // ignored: a counter cannot go down
	m.FailoverPremium(ctx, "dear", "gpt", 0.5)
	m.WalletCharge(ctx, "gpt", UsageReported)
	m.WalletDenied(ctx, "gpt")
	m.WalletStoreDown(ctx, "gpt", StoreDownRefused)
	m.WalletStoreError(ctx, "settle")
	m.WalletExpiredHolds(ctx, 3)
	m.ObservePendingSettles(func() int64 { return 2 })

	body := scrape(t, tel, "")
	fams := parseText(t, body)
	for name, w := range map[string]struct {
		typ    string
		labels []string
	}{
		MetricRevenue:              {"counter", []string{"region", "model"}},
		MetricFailoverPremium:      {"counter", []string{"region", "channel", "model"}},
		MetricWalletCharges:        {"counter", []string{"region", "model", "usage"}},
		MetricWalletDenied:         {"counter", []string{"region", "model"}},
		MetricWalletStoreDown:      {"counter", []string{"region", "model", "result"}},
		MetricWalletErrors:         {"counter", []string{"region", "op"}},
		MetricWalletExpiredHolds:   {"counter", []string{"region"}},
		MetricWalletPendingSettles: {"gauge", []string{"region"}},
	} {
		f := fams[name]
		if f == nil {
			t.Errorf("missing metric %s", name)
			continue
		}
		got := slices.Sorted(maps.Keys(f.labels))
		if f.typ != w.typ || !slices.Equal(got, slices.Sorted(slices.Values(w.labels))) {
			t.Errorf("%s: %s %v, want %s %v", name, f.typ, got, w.typ, w.labels)
		}
	}
	for _, must := range []string{
		`hopgate_revenue_total{model="gpt",region="eu-west-1"} 0.000123`,
		`hopgate_failover_premium_total{channel="dear",model="gpt",region="eu-west-1"} 0.5`,
		`hopgate_wallet_expired_holds_total{region="eu-west-1"} 3`,
		`hopgate_wallet_pending_settles{region="eu-west-1"} 2`,
	} {
		if !strings.Contains(body, must) {
			t.Errorf("scrape lacks %q", must)
		}
	}
	if strings.Contains(body, "tenant=") {
		t.Error("a tenant reached a metric label")
	}
	if t.Failed() {
		t.Log(body)
	}
}

// The wallet names are a contract like the others (dashboards, alerts).
func TestWalletContractNames(t *testing.T) {
	for got, want := range map[string]string{
		MetricRevenue:              "hopgate_revenue_total",
		MetricFailoverPremium:      "hopgate_failover_premium_total",
		MetricWalletCharges:        "hopgate_wallet_charges_total",
		MetricWalletDenied:         "hopgate_wallet_denied_total",
		MetricWalletStoreDown:      "hopgate_wallet_store_unavailable_total",
		MetricWalletErrors:         "hopgate_wallet_store_errors_total",
		MetricWalletPendingSettles: "hopgate_wallet_pending_settles",
		MetricWalletExpiredHolds:   "hopgate_wallet_expired_holds_total",
	} {
		if got != want {
			t.Errorf("contract name %q changed to %q", want, got)
		}
	}
}
