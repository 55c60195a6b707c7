package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/api"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/status"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// TestStatusRoutes: /status and /status.json are public on the main
// listener (no key), count every proxied request by outcome — not the
// ones refused at the front door — and answer like an unknown route once
// status.enabled is turned off by a reload.
func TestStatusRoutes(t *testing.T) {
	up := upstream.New(upstream.Options{})
	us := httptest.NewServer(up)
	t.Cleanup(func() { up.Close(); us.Close() })
	yaml := `
auth:
  keys:
    - {id: team-a, sha256: ` + sha(clientKey) + `}
channels:
  - {id: a, base_url: "` + us.URL + `/v1"}
models:
  - name: m
    chain: [{channel: a, upstream_model: up-m}]
  - name: broken
    chain: [{channel: a, upstream_model: "up-m|503"}]
`
	cfg, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	tel := telemetry.Noop()
	srv := api.New(cfg, dispatch.New(dispatch.Options{Telemetry: tel}), tel, slog.New(slog.DiscardHandler))
	// At the start of a minute: the page counts per minute, and a clock at
	// the wall time (NewFakeClock) could cross a minute in the Advance below.
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	st := status.New(status.Options{Config: srv.Config, Clock: clock})
	srv.SetStatus(st)
	srvGW := httptest.NewServer(srv.Handler())
	t.Cleanup(srvGW.Close)
	// The status service hangs off the api server, which gwtest does not
	// expose: the requests go to this server by its URL.
	gw := &gwtest.Gateway{URL: srvGW.URL}

	chat := func(model string) {
		do(t, gw, "POST", "/v1/chat/completions", clientKey, `{"model":"`+model+`","messages":[]}`)
	}
	chat("m")
	chat("broken")
	do(t, gw, "POST", "/v1/chat/completions", "wrong-key", `{"model":"m","messages":[]}`)  // refused: not counted
	do(t, gw, "POST", "/v1/chat/completions", clientKey, `{"model":"nope","messages":[]}`) // 404: not counted

	v, err := st.View(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	now := v.Models[0].Hour[59]
	bad := v.Models[1].Hour[59]
	if v.Models[0].Model != "m" || now.OK != 1 || now.Failed != 0 || bad.Failed != 1 || bad.OK != 0 {
		t.Fatalf("counts: %+v %+v", now, bad)
	}
	for _, p := range []string{"/status", "/status.json"} {
		resp, err := http.Get(gw.URL + p) // no key
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "broken") {
			t.Errorf("%s: %d %.200s", p, resp.StatusCode, b)
		}
	}

	off := *cfg
	off.Status.Enabled = false
	srv.SetConfig(&off)
	for _, p := range []string{"/status", "/status.json"} {
		resp, m := do(t, gw, "GET", p, "", "")
		if resp.StatusCode != 404 || m["error"] == nil {
			t.Errorf("%s disabled: %d %v", p, resp.StatusCode, m)
		}
	}
	chat("m")
	clock.Advance(5 * time.Second) // past the page's cache
	if v, _ := st.View(context.Background()); v.Models[0].Hour[59].OK != 1 {
		t.Error("a request was counted while the page was disabled")
	}
}
