package admin_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hopgate/hopgate/dispatch/admin"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// The window row (DESIGN.md §16): after a real answer of channel a that
// states two windows, /admin shows one tile per kind with its utilisation
// (red past a's demotion threshold, green below 70 %) and its reset time;
// b, whose answers state none, has a grey tile saying so; once the reset
// time passes, the tile says the count is history.
func TestOncallWindowTiles(t *testing.T) {
	stated := map[string]string{
		"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "30s",
		"x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "400", "x-ratelimit-reset-tokens": "1m0s",
	}
	wrap := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for k, v := range stated {
				w.Header().Set(k, v)
			}
			next.ServeHTTP(w, r)
		})
	}
	g := gwtest.NewWith(t, gwtest.Options{Wrap: map[string]func(http.Handler) http.Handler{"a": wrap}}, `
auth: {mode: none}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY, early_warning: {enabled: true, ratelimit_utilization: 0.9}}
  - {id: b, base_url: "{{url:b}}", api_key_env: CHANNEL_KEY}
models:
  - name: m
    chain:
      - {channel: a, upstream_model: m, price: {input: 1, output: 1}}
      - {channel: b, upstream_model: m, price: {input: 2, output: 2}}
`, "a", "b")
	if r := g.Post(gwtest.ChatBody("m", false)); r.Status != 200 {
		t.Fatalf("status %d %s", r.Status, r.Body)
	}
	s := &admin.Server{Config: func() *config.Config { return g.Config }, Engine: g.Engine, Telemetry: g.Tel}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	reset := g.Clock.Now().Add(30 * time.Second).UTC().Format("15:04:05 UTC")
	_, body := get(t, srv.URL+"/admin", "")
	for _, want := range []string{
		`<h2>Rate-limit windows`,
		`<div class="window-row" data-window-channel="a"><h3>a</h3>`,
		`<div class="tile open" data-kind="requests" data-state="open">`,
		`<div class="tile-state">95.0 %</div>`,
		`resets at ` + reset + ` (in 30s)`,
		`demoted from 90 % until the reset`,
		`<div class="tile closed" data-kind="tokens" data-state="closed">`,
		`<div class="tile-state">60.0 %</div>`,
		`<div class="window-row" data-window-channel="b"><h3>b</h3>`,
		`<div class="tile none" data-kind="" data-state="none"><div class="tile-title">no window stated</div>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/admin lacks %s", want)
		}
	}
	if t.Failed() {
		i := strings.Index(body, "<h2>Rate-limit windows")
		t.Log(body[max(i, 0):min(len(body), max(i, 0)+1500)])
	}
	g.Clock.Advance(30 * time.Second)
	_, body = get(t, srv.URL+"/admin", "")
	if !strings.Contains(body, `data-kind="requests" data-state="none"`) || !strings.Contains(body, "(reset since)") {
		t.Errorf("after the reset the requests tile must say its count is history")
	}
}
