package wallet_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/gateway"
	"github.com/hopgate/hopgate/internal/money"
	"github.com/hopgate/hopgate/internal/store"
	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/pgtest"
	"github.com/hopgate/hopgate/telemetry"
)

// The client key of tenant acme in every end-to-end config, and an admin
// key.
const (
	acmeKey  = "hg-e2e-acme-0123456789"
	adminKey = "hg-e2e-admin-0123456789"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// listPrice is the list price of model m in every end-to-end config: 1
// and 2 per 1M tokens; the channels cost less (a: 0.1/0.2, b: 0.5/0.5).
var listPrice = money.Price{Input: 1_000_000, Output: 2_000_000}

// e2e is one test's world: fake providers a and b, a database (SQLite file
// or PostgreSQL database) and the test's own Store on it.
type e2e struct {
	t        *testing.T
	driver   string
	path     string // SQLite
	dsn      string // PostgreSQL
	ups      map[string]*upstream.Server
	urls     map[string]string
	st       *store.Store
	upClock  clockwork.Clock
	extraEnv map[string]string
}

// drivers runs fn on SQLite and on PostgreSQL (skipped, or fatal under
// CI=true, when PostgreSQL is missing), as subtests.
func drivers(t *testing.T, fn func(t *testing.T, driver string)) {
	for _, d := range []string{config.StoreSQLite, config.StorePostgres} {
		t.Run(d, func(t *testing.T) { fn(t, d) })
	}
}

func newE2E(t *testing.T, driver string) *e2e {
	t.Helper()
	e := &e2e{t: t, driver: driver, ups: map[string]*upstream.Server{}, urls: map[string]string{}, upClock: clockwork.NewRealClock()}
	switch driver {
	case config.StoreSQLite:
		e.path = filepath.Join(t.TempDir(), "wallets.db")
	case config.StorePostgres:
		e.dsn = pgtest.Shared(t).NewDatabase(t)
	}
	for _, id := range []string{"a", "b"} {
		u := upstream.New(upstream.Options{Name: id, Clock: e.upClock})
		srv := httptest.NewServer(u)
		t.Cleanup(func() { u.Close(); srv.Close() })
		e.ups[id], e.urls[id] = u, srv.URL+"/v1"
	}
	e.st = e.openStore()
	return e
}

func (e *e2e) openStore() *store.Store {
	e.t.Helper()
	s, err := store.Open(context.Background(), store.Config{Driver: e.driver, Path: e.path, DSN: e.dsn, BusyTimeout: 30 * time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { s.Close() })
	return s
}

// storeYAML is the store block of the config.
func (e *e2e) storeYAML() string {
	if e.driver == config.StorePostgres {
		return "store: {driver: postgres, dsn_env: HOPGATE_TEST_DSN}"
	}
	return "store: {driver: sqlite, path: " + e.path + "}"
}

// configYAML is a gateway config for model m with chain (a, b), each
// upstream model given, plus extra top-level YAML.
func (e *e2e) configYAML(modelA, modelB, extra string) string {
	return `listen: "` + testkit.LoopbackAddr(e.t) + `"
admin_listen: "` + testkit.LoopbackAddr(e.t) + `"
auth:
  keys:
    - {id: acme-key, tenant: acme, sha256: ` + sha(acmeKey) + `}
admin_auth:
  keys:
    - {id: ops-alice, sha256: ` + sha(adminKey) + `}
` + e.storeYAML() + `
channels:
  - {id: a, base_url: "` + e.urls["a"] + `"}
  - {id: b, base_url: "` + e.urls["b"] + `"}
models:
  - name: m
    chain:
      - {channel: a, upstream_model: "` + modelA + `", price: {input: 0.1, output: 0.2}}
      - {channel: b, upstream_model: "` + modelB + `", price: {input: 0.5, output: 0.5}}
    price: {input: 1, output: 2}
` + extra
}

func (e *e2e) getenv(k string) (string, bool) {
	if k == "HOPGATE_TEST_DSN" && e.dsn != "" {
		return e.dsn, true
	}
	v, ok := e.extraEnv[k]
	return v, ok
}

// gw is an in-process gateway started the way `hopgate serve` starts it.
type gw struct {
	*gateway.Gateway
	tel   *telemetry.Telemetry
	spans *tracetest.InMemoryExporter
	clock *clockwork.FakeClock
}

// start starts a gateway on yml with every timer on a fake clock (set to
// at), stopped when the test ends.
func (e *e2e) start(yml string, at time.Time) *gw {
	e.t.Helper()
	return e.startWith(yml, at, nil)
}

// startWith is start with the gateway's options changed by opts (nil:
// none).
func (e *e2e) startWith(yml string, at time.Time, opts func(*gateway.Options)) *gw {
	e.t.Helper()
	cfg, err := config.Parse([]byte(yml), e.getenv)
	if err != nil {
		e.t.Fatalf("config: %v\n%s", err, yml)
	}
	clock := clockwork.NewFakeClockAt(at)
	spans := tracetest.NewInMemoryExporter()
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{
		HealthyRatio: 1, SpanExporter: spans, Getenv: func(string) string { return "" }, Clock: clock,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	o := gateway.Options{
		Telemetry: tel, Clock: clock, DrainTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler),
	}
	if opts != nil {
		opts(&o)
	}
	g, err := gateway.Start(context.Background(), cfg, o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
		_ = tel.Shutdown(ctx)
	})
	gateways.Store(g.Addr(), g)
	e.t.Cleanup(func() { gateways.Delete(g.Addr()) })
	return &gw{Gateway: g, tel: tel, spans: spans, clock: clock}
}

// gateways maps the address of each in-process gateway to it, so post can
// wait for the charge of what it sent.
var gateways sync.Map

// settled waits until the gateway at addr (when it runs in this process)
// has settled or released every request: the delivery rule charges after
// the answer's last byte was written, so the client may read it first.
func settled(t *testing.T, addr string) {
	t.Helper()
	g, ok := gateways.Load(addr)
	if !ok {
		return
	}
	w := g.(*gateway.Gateway).Wallet()
	if w == nil {
		return
	}
	testkit.Eventually(t, func() bool { return w.InFlight() == 0 }, "the request to be settled")
}

// reply is what a client got.
type reply struct {
	status int
	header http.Header
	body   string
}

// post sends a chat request with key; stream requests are read to the end.
func post(t *testing.T, addr, key, body string) reply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	settled(t, addr)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// chatBody is a request for model m with max_tokens.
func chatBody(stream bool, maxTokens int) string {
	s := `{"model":"m","max_tokens":` + itoa(maxTokens) + `,"messages":[{"role":"user","content":"two words"}]`
	if stream {
		s += `,"stream":true`
	}
	return s + "}"
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// errorCode is error.code of an OpenAI-shaped error body.
func errorCode(body string) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
			Type string `json:"type"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(body), &e)
	return e.Error.Code
}

// adminDo sends an admin request with token (may be "").
func adminDo(t *testing.T, addr, method, path, token, body string) reply {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	// The admin API indents its JSON for people; tests compare it compact.
	var c bytes.Buffer
	if json.Compact(&c, b) == nil {
		b = append(c.Bytes(), '\n')
	}
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// scrape returns the admin listener's /metrics.
func scrape(t *testing.T, g *gw) string {
	t.Helper()
	return adminDo(t, g.AdminAddr(), http.MethodGet, "/metrics", "", "").body
}

// metricValue finds the value of the series line that starts with prefix.
func metricValue(metrics, prefix string) (string, bool) {
	sc := bufio.NewScanner(strings.NewReader(metrics))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, prefix) {
			return strings.TrimSpace(l[len(prefix):]), true
		}
	}
	return "", false
}

// tenant returns acme's wallet.
func (e *e2e) tenant() store.Tenant {
	e.t.Helper()
	tn, err := e.st.Tenant(context.Background(), "acme")
	if err != nil {
		e.t.Fatal(err)
	}
	return tn
}
