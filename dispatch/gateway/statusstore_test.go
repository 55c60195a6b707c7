package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/internal/testkit/pgtest"
)

// statusConfig serves m (healthy) and broken (every channel 503) with the
// given store block.
func statusConfig(store string) string {
	return `
listen: "{{listen}}"
admin_listen: "{{admin}}"
auth: {mode: none}
` + store + `
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY}
models:
  - {name: m, chain: [{channel: a, upstream_model: m}]}
  - {name: broken, chain: [{channel: a, upstream_model: "m|503"}]}
`
}

// statusCounts is the last hour's totals per model from /status.json.
func statusCounts(t *testing.T, g *gwtest.Gateway) map[string][2]int64 {
	t.Helper()
	resp, err := http.Get(g.URL + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v struct {
		Models []struct {
			Model string `json:"model"`
			Hour  []struct {
				OK     int64 `json:"ok"`
				Failed int64 `json:"failed"`
			} `json:"last_hour_per_minute"`
		} `json:"models"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("status.json: %v %s", err, b)
	}
	out := map[string][2]int64{}
	for _, m := range v.Models {
		var ok, failed int64
		for _, w := range m.Hour {
			ok, failed = ok+w.OK, failed+w.Failed
		}
		out[m.Model] = [2]int64{ok, failed}
	}
	return out
}

// traffic sends ok requests to m and bad to broken, then flushes the
// gateway's status counts to its store.
func traffic(t *testing.T, g *gwtest.Gateway, ok, bad int) {
	t.Helper()
	for i := 0; i < ok; i++ {
		if r := g.Post(gwtest.ChatBody("m", false)); r.Status != 200 {
			t.Fatalf("m: %d", r.Status)
		}
	}
	for i := 0; i < bad; i++ {
		if r := g.Post(gwtest.ChatBody("broken", false)); r.Status == 200 {
			t.Fatalf("broken answered 200")
		}
	}
	if err := g.Process.Status().Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestStatusHistorySurvivesRestart: with a store (SQLite here) the status
// page's history is the store's: a restarted gateway shows what the
// previous process counted (DESIGN.md §10).
func TestStatusHistorySurvivesRestart(t *testing.T) {
	cfg := statusConfig(`store: {driver: sqlite, path: "` + filepath.Join(t.TempDir(), "hopgate.db") + `"}`)
	first := gwtest.Start(t, gwtest.Options{}, cfg, "a")
	traffic(t, first, 3, 2)
	if err := first.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	second := gwtest.Start(t, gwtest.Options{Clock: nil}, cfg, "a")
	testkit.Eventually(t, func() bool {
		c := statusCounts(t, second)
		return c["m"] == [2]int64{3, 0} && c["broken"] == [2]int64{0, 2}
	}, "the restarted gateway shows the first one's counts")
}

// TestStatusHistoryAddsUpAcrossReplicas: two gateways sharing one
// PostgreSQL count into the same history: either shows both's traffic.
func TestStatusHistoryAddsUpAcrossReplicas(t *testing.T) {
	dsn := pgtest.New(t).NewDatabase(t)
	cfg := statusConfig(`store: {driver: postgres, dsn_env: PG_DSN}`)
	o := gwtest.Options{Env: map[string]string{"PG_DSN": dsn}}
	one := gwtest.Start(t, o, cfg, "a")
	two := gwtest.Start(t, o, cfg, "a")
	traffic(t, one, 2, 1)
	traffic(t, two, 4, 3)
	for _, g := range []*gwtest.Gateway{one, two} {
		testkit.Eventually(t, func() bool {
			c := statusCounts(t, g)
			return c["m"] == [2]int64{6, 0} && c["broken"] == [2]int64{0, 4}
		}, "both replicas' counts add up")
	}
}
