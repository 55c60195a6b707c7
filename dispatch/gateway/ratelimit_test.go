package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hopgate/hopgate/internal/store"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/internal/testkit/redistest"
)

// limitedRedis is a gateway with tenant limits kept in the Redis at url.
func limitedRedis(t *testing.T, url, onErr string, rpm int) *gwtest.Gateway {
	t.Helper()
	yml := relTwo("m", `rate_limits:
  store: redis
  url_env: HOPGATE_TEST_REDIS
  on_store_error: `+onErr+`
  tenants:
    - {tenant: team-a, rpm: `+strconv.Itoa(rpm)+`}
`)
	yml = strings.Replace(yml, "auth: {mode: none}", "auth:\n  keys:\n    - {id: team-a, sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}", 1)
	return gwtest.Start(t, gwtest.Options{Env: map[string]string{"HOPGATE_TEST_REDIS": url}}, yml, "a", "b")
}

// postAs sends relChat with the key whose sha256 limitedRedis's config
// holds ("test").
func postAs(t *testing.T, g *gwtest.Gateway) int {
	t.Helper()
	return g.PostCtx(t.Context(), relChat, map[string]string{"Authorization": "Bearer test"}).Status
}

// Why: two gateways sharing one Redis share the tenant's window: between
// them they serve exactly its rpm, and refuse the rest with 429.
func TestRedisLimitsAcrossGateways(t *testing.T) {
	srv := redistest.New(t)
	gws := []*gwtest.Gateway{limitedRedis(t, srv.URL(), "allow", 6), limitedRedis(t, srv.URL(), "allow", 6)}
	counts := map[int]int{}
	for i := 0; i < 10; i++ {
		counts[postAs(t, gws[i%2])]++
	}
	if counts[200] != 6 || counts[429] != 4 {
		t.Fatalf("statuses %v, want 6×200 and 4×429 across both gateways", counts)
	}
}

// Why: a Redis restarted under load costs no request an error with
// on_store_error: allow (the admissions it could not answer are served,
// counted and logged); with deny they are 503 and nothing goes upstream.
// Once it is back the limits apply again.
func TestRedisRestartUnderLoad(t *testing.T) {
	srv := redistest.New(t)
	g := limitedRedis(t, srv.URL(), "allow", 1000)
	var mu sync.Mutex
	statuses := map[int]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := postAs(t, g)
				mu.Lock()
				statuses[s]++
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < 3; i++ {
		srv.Stop()
		srv.Start()
	}
	srv.Stop()
	// Requests while it is gone, then back.
	for i := 0; i < 5; i++ {
		if s := postAs(t, g); s != 200 {
			t.Errorf("while Redis is gone (allow): %d", s)
		}
	}
	srv.Start()
	close(stop)
	wg.Wait()
	if len(statuses) != 1 || statuses[200] == 0 {
		t.Fatalf("statuses under restarts %v, want only 200", statuses)
	}
	if m := scrape(t, g); !strings.Contains(m, `hopgate_ratelimit_store_errors_total{decision="allow"`) {
		t.Error("no store error counted")
	}
	if !strings.Contains(g.Logs.String(), "rate limits: the counter store failed") {
		t.Error("no log line for the store errors")
	}

	deny := limitedRedis(t, srv.URL(), "deny", 1000)
	srv.Stop()
	r := deny.PostCtx(t.Context(), relChat, map[string]string{"Authorization": "Bearer test"})
	if r.Status != 503 || !strings.Contains(r.Body, "on_store_error is deny") || r.Header.Get("Retry-After") == "" {
		t.Fatalf("deny while gone: %d %s", r.Status, r.Body)
	}
	if n := deny.Ups["a"].Attempts("m"); n != 0 {
		t.Fatalf("a denied request reached the upstream %d times", n)
	}
}

func scrape(t *testing.T, g *gwtest.Gateway) string {
	t.Helper()
	resp, err := http.Get(g.AdminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Why: a limit stored with `hopgate tenants limits` applies to the
// tenant's requests (read at start, then every key_refresh) and
// /admin/tenants shows it beside the file's, each with its source.
func TestStoredTenantLimits(t *testing.T) {
	db := filepath.Join(t.TempDir(), "w.db")
	st, err := store.Open(context.Background(), store.Config{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := st.CreateTenant(ctx, "acme", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.TopUp(ctx, "acme", 100_000_000, "test"); err != nil {
		t.Fatal(err)
	}
	if err := st.SetLimit(ctx, store.TenantLimit{Tenant: "acme", RPM: 1}, "test"); err != nil {
		t.Fatal(err)
	}
	st.Close()
	yml := relTwo("m", "store: {path: "+db+"}\nrate_limits: {tenants: [{tenant: acme, model: m, tpm: 100000}]}\n")
	yml = strings.Replace(yml, "auth: {mode: none}", "auth:\n  keys:\n    - {id: team-a, tenant: acme, sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}", 1)
	g := gwtest.Start(t, gwtest.Options{}, yml, "a", "b")
	if s := postAs(t, g); s != 200 {
		t.Fatalf("first: %d", s)
	}
	if s := postAs(t, g); s != 429 {
		t.Fatalf("second: %d, want 429 from the stored rpm 1", s)
	}
	resp, err := http.Get(g.AdminURL + "/admin/tenants/acme")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Limits []struct {
			Model    string
			RPM, TPM int64
			Source   string
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	if len(v.Limits) != 2 || v.Limits[0].Source != "config" || v.Limits[0].Model != "m" || v.Limits[0].TPM != 100000 ||
		v.Limits[1].Source != "store" || v.Limits[1].RPM != 1 {
		t.Fatalf("/admin/tenants/acme limits %+v", v.Limits)
	}
}

// Why: every upstream answer's rate-limit headers are read, failed ones
// too: a channel answering 503 with 90 of 100 requests used exports
// utilization 0.9 and its reset time; the channel that served exports its
// own (Anthropic's spelling here); a window whose stated reset has passed
// leaves the gauge.
func TestChannelWindowsExported(t *testing.T) {
	wrap := func(h map[string]string) func(http.Handler) http.Handler {
		return func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range h {
					w.Header().Set(k, v)
				}
				next.ServeHTTP(w, r)
			})
		}
	}
	g := gwtest.Start(t, gwtest.Options{Wrap: map[string]func(http.Handler) http.Handler{
		"a": wrap(map[string]string{"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "10", "x-ratelimit-reset-requests": "6m0s"}),
		"b": wrap(map[string]string{"anthropic-ratelimit-tokens-limit": "1000", "anthropic-ratelimit-tokens-remaining": "750",
			"anthropic-ratelimit-tokens-reset": "2030-01-01T00:00:00Z",
			// A window that reset long ago: history, not on the gauge.
			"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "1",
			"anthropic-ratelimit-requests-reset": "2020-01-01T00:00:00Z"}),
	}}, relTwo("m|503", ""), "a", "b")
	if r := g.Post(relChat); r.Status != 200 {
		t.Fatalf("status %d %s", r.Status, r.Body)
	}
	m := scrape(t, g)
	for _, want := range []string{
		`hopgate_channel_ratelimit_utilization{channel="a",kind="requests",region=""} 0.9`,
		`hopgate_channel_ratelimit_utilization{channel="b",kind="tokens",region=""} 0.25`,
		`hopgate_channel_ratelimit_reset_timestamp_seconds{channel="b",kind="tokens",region=""} 1.893456e+09`,
		`hopgate_channel_ratelimit_reset_timestamp_seconds{channel="a",kind="requests",region=""}`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(m, `channel="b",kind="requests"`) {
		t.Error("a window whose stated reset has passed is still on the gauge")
	}
	if t.Failed() {
		for _, l := range strings.Split(m, "\n") {
			if strings.Contains(l, "channel_ratelimit") {
				t.Log(l)
			}
		}
	}
}
