package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/admin"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/telemetry"
)

func newAdmin(t *testing.T, token string) (*admin.Server, *httptest.Server, *telemetry.Telemetry, *dispatch.Engine) {
	t.Helper()
	yaml := `
region: eu-west-1
auth: {mode: none}
channels:
  - {id: a, base_url: "http://127.0.0.1:1/v1", region: r-a}
  - {id: b, base_url: "http://127.0.0.1:2/v1", region: r-b, breaker: {mode: rate}}
models:
  - name: m
    chain:
      - {channel: a, upstream_model: x, price: {input: 1, output: 1}}
      - {channel: b, upstream_model: y, price: {input: 2, output: 2}}
`
	if token != "" {
		yaml += "admin: {token_env: ADMIN_TOKEN}\n"
	}
	cfg, err := config.Parse([]byte(yaml), func(k string) (string, bool) { return token, k == "ADMIN_TOKEN" })
	if err != nil {
		t.Fatal(err)
	}
	tel := telemetry.Noop()
	e := dispatch.New(dispatch.Options{Telemetry: tel})
	s := &admin.Server{Config: func() *config.Config { return cfg }, Engine: e, Telemetry: tel}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return s, srv, tel, e
}

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProbes: /readyz follows SetReady (the drain flips it before SIGTERM
// handling stops accepting), /healthz answers while the process lives.
func TestProbes(t *testing.T) {
	s, srv, _, _ := newAdmin(t, "")
	if code, _ := get(t, srv.URL+"/readyz", ""); code != 503 {
		t.Fatalf("readyz before ready: %d", code)
	}
	s.SetReady(true)
	if code, _ := get(t, srv.URL+"/readyz", ""); code != 200 {
		t.Fatalf("readyz when ready: %d", code)
	}
	if code, _ := get(t, srv.URL+"/healthz", ""); code != 200 {
		t.Fatalf("healthz: %d", code)
	}
}

// TestViews: the JSON and HTML views show on-call the breakers, chains and
// failover paths, without credentials or upstream secrets.
func TestViews(t *testing.T) {
	_, srv, tel, _ := newAdmin(t, "")
	tel.Failovers.Add(telemetry.FailoverEntry{Time: time.Unix(0, 0), Model: "m", Path: "a:503 -> b:ok",
		Outcome: "failover_ok", Status: 200, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Attempts: 2})

	code, body := get(t, srv.URL+"/admin/failovers", "")
	var fo []map[string]any
	if code != 200 || json.Unmarshal([]byte(body), &fo) != nil || len(fo) != 1 || fo[0]["path"] != "a:503 -> b:ok" {
		t.Fatalf("failovers %d %s", code, body)
	}
	code, body = get(t, srv.URL+"/admin/breakers", "")
	var br []map[string]any
	if code != 200 || json.Unmarshal([]byte(body), &br) != nil || len(br) != 2 || br[0]["state"] != "closed" || br[1]["mode"] != "rate" {
		t.Fatalf("breakers %d %s", code, body)
	}
	code, body = get(t, srv.URL+"/admin/chains", "")
	var ch []map[string]any
	if code != 200 || json.Unmarshal([]byte(body), &ch) != nil || len(ch) != 1 {
		t.Fatalf("chains %d %s", code, body)
	}
	chain := ch[0]["chain"].([]any)
	if chain[0].(map[string]any)["channel"] != "a" || chain[1].(map[string]any)["channel"] != "b" {
		t.Fatalf("chain order %v", chain)
	}
	code, body = get(t, srv.URL+"/admin", "")
	for _, want := range []string{"a:503 → b:ok", "4bf92f3577b34da6a3ce929d0e0e4736", `class="tile closed"`, "eu-west-1"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Fatalf("admin page lacks %q (%d):\n%s", want, code, body)
		}
	}
	tel.Metrics.Request(context.Background(), "m", "chat", "ok")
	if code, body := get(t, srv.URL+"/metrics", ""); code != 200 || !strings.Contains(body, "hopgate_requests_total") {
		t.Fatalf("metrics %d", code)
	}
}

// TestToken: with admin.token_env set, every view needs the bearer token,
// while the probes stay open for the kubelet.
func TestToken(t *testing.T) {
	s, srv, _, _ := newAdmin(t, "admin-secret")
	s.SetReady(true)
	for _, p := range []string{"/admin", "/admin/failovers", "/admin/breakers", "/admin/chains", "/metrics"} {
		if code, _ := get(t, srv.URL+p, ""); code != 401 {
			t.Errorf("%s without token: %d", p, code)
		}
		if code, _ := get(t, srv.URL+p, "wrong"); code != 401 {
			t.Errorf("%s with a wrong token: %d", p, code)
		}
		if code, _ := get(t, srv.URL+p, "admin-secret"); code != 200 {
			t.Errorf("%s with the token: %d", p, code)
		}
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _ := get(t, srv.URL+p, ""); code != 200 {
			t.Errorf("probe %s needs no token: %d", p, code)
		}
	}
}
