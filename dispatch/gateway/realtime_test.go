package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

const realtimeYAML = `
listen: {{listen}}
admin_listen: {{admin}}
auth: {mode: none}
store: {driver: sqlite, path: ":memory:"}
channels:
  - {id: eu, base_url: "{{url:eu}}", api_key_env: CHANNEL_KEY, region: eu-west-1}
  - {id: us, base_url: "{{url:us}}", api_key_env: CHANNEL_KEY, region: us-east-1}
models:
  - name: voice
    operations: [realtime]
    chain:
      - {channel: eu, upstream_model: "gpt-realtime|rt-refuse"}
      - {channel: us, upstream_model: gpt-realtime}
`

// openVoice opens a session of model voice and reads its session.created.
func openVoice(ctx context.Context, t *testing.T, g *gwtest.Gateway, opts *websocket.DialOptions) *websocket.Conn {
	t.Helper()
	c, _, err := websocket.Dial(ctx, g.URL+"/v1/realtime?model=voice", opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, b, err := c.Read(ctx); err != nil || !strings.Contains(string(b), `"session.created"`) {
		c.CloseNow()
		t.Fatalf("first event %s, %v", b, err)
	}
	return c
}

// The process counts realtime sessions: /admin shows the open ones per
// model, /metrics the three realtime series of DESIGN.md §15, and the
// status page counts an ended session like a request.
func TestRealtimeSessionsAreCounted(t *testing.T) {
	g := gwtest.Start(t, gwtest.Options{}, realtimeYAML, "eu", "us")
	get := func(url string) string {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	ctx, cancel := context.WithTimeout(t.Context(), testkit.Bound)
	defer cancel()
	c := openVoice(ctx, t, g, nil)
	defer c.CloseNow()
	if page := get(g.AdminURL + "/admin"); !strings.Contains(page, "realtime sessions open: 1") {
		t.Fatalf("/admin does not count the open session")
	}
	if m := get(g.AdminURL + "/metrics"); !strings.Contains(m, `hopgate_realtime_sessions_active{model="voice",region=""} 1`) {
		t.Fatalf("/metrics lacks the active session:\n%s", grepLines(m, "realtime"))
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
	var m string
	testkit.Eventually(t, func() bool {
		m = get(g.AdminURL + "/metrics")
		return strings.Contains(m, `hopgate_realtime_session_duration_seconds_count{model="voice",region=""} 1`)
	}, "the closed session is counted")
	for _, want := range []string{
		`hopgate_realtime_sessions_active{model="voice",region=""} 0`,
		`hopgate_realtime_sessions_total{model="voice",outcome="failover_ok",region=""} 1`,
		`hopgate_realtime_session_duration_seconds_count{model="voice",region=""} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(m, "realtime"))
		}
	}
	if page := get(g.AdminURL + "/admin"); !strings.Contains(page, "realtime sessions open: 0") {
		t.Fatalf("/admin still counts the closed session")
	}
	// The refusal's Retry-After opened eu's breaker: L1 skips it before
	// dialing the next session.
	c2, _, err := websocket.Dial(ctx, g.URL+"/v1/realtime?model=voice", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.CloseNow()
	if _, _, err := c2.Read(ctx); err != nil {
		t.Fatal(err)
	}
	_ = c2.Close(websocket.StatusNormalClosure, "")
	if m := get(g.AdminURL + "/metrics"); !strings.Contains(m, `hopgate_breaker_skips_total{channel="eu",channel_region="eu-west-1",model="voice",region=""} 1`) {
		t.Fatalf("no L1 skip of eu:\n%s", grepLines(m, "skips"))
	}
	if g.Attempts("eu", "gpt-realtime|rt-refuse") != 1 {
		t.Fatal("the open channel was dialed")
	}
	// The status page counts both ended sessions. Its view is cached for
	// a few seconds of the gateway's (fake) clock: a poll that came before
	// the second session was recorded would be served again forever if the
	// clock did not move, so each poll moves it past the cache.
	testkit.EventuallyNil(t, func() error {
		g.Clock.Advance(6 * time.Second)
		if c := statusCounts(t, g); c["voice"] != [2]int64{2, 0} {
			return fmt.Errorf("/status.json counts %v", c)
		}
		return nil
	}, "/status.json counts both sessions")
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Why (DESIGN.md §16): a tenant's limits hold for realtime sessions too:
// each session is one request of its rpm, and each response's usage
// reaches its tpm as the response ends, so a tenant over its tokens is
// refused the next session with 429 at the handshake (it was never
// limited: sessions were a way around every limit).
func TestRealtimeTenantLimits(t *testing.T) {
	yml := strings.Replace(realtimeYAML, "auth: {mode: none}",
		"auth:\n  keys:\n    - {id: team-a, sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}\n"+
			"rate_limits:\n  tenants:\n    - {tenant: team-a, rpm: 5, tpm: 40}", 1)
	yml = strings.Replace(yml, "store: {driver: sqlite, path: \":memory:\"}\n", "", 1) // no wallets
	g := gwtest.Start(t, gwtest.Options{}, yml, "eu", "us")
	opts := &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer test"}}}
	session := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), testkit.Bound)
		defer cancel()
		c := openVoice(ctx, t, g, opts)
		defer c.CloseNow()
		if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"response.create"}`)); err != nil {
			t.Fatal(err)
		}
		for { // to its response.done: 30 tokens
			_, b, err := c.Read(ctx)
			if err != nil {
				t.Fatalf("reading for response.done: %v", err)
			}
			if strings.Contains(string(b), `"type":"response.done"`) {
				break
			}
		}
		if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
			t.Fatal(err)
		}
	}
	session()
	session() // 30 of 40 used when it opened
	// Both sessions ended (their responses were charged as they ended).
	testkit.Eventually(t, func() bool {
		resp, err := http.Get(g.AdminURL + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		m, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(m), `hopgate_realtime_session_duration_seconds_count{model="voice",region=""} 2`)
	}, "both sessions ended")
	ctx, cancel := context.WithTimeout(t.Context(), testkit.Bound)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, g.URL+"/v1/realtime?model=voice", opts)
	if err == nil {
		c.CloseNow()
		t.Fatal("a third session opened over the tenant's 40 tokens per minute (60 used)")
	}
	if resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third session: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), "rate_limit_exceeded") || !strings.Contains(string(b), "40 tokens per minute") ||
		resp.Header.Get("Retry-After") == "" || resp.Header.Get("X-Ratelimit-Remaining-Requests") != "3" {
		t.Fatalf("refusal %v %s", resp.Header, b)
	}
}

// Why: the server's Shutdown does not wait for hijacked connections, so a
// deploy dropped every voice session with a bare 1006 (and closed the
// wallet under them). A session still open when the drain ends gets the
// error event gateway_shutting_down and close 1012 (service restart),
// which tells its client to reconnect, to another replica.
func TestRealtimeSessionsEndAtShutdown(t *testing.T) {
	g := gwtest.Start(t, gwtest.Options{DrainTimeout: time.Nanosecond}, realtimeYAML, "eu", "us")
	ctx, cancel := context.WithTimeout(t.Context(), testkit.Bound)
	defer cancel()
	c := openVoice(ctx, t, g, nil)
	defer c.CloseNow()
	done := make(chan error, 1)
	go func() { done <- g.Shutdown(ctx) }()
	_, b, err := c.Read(ctx)
	if err != nil || !strings.Contains(string(b), `"type":"error"`) || !strings.Contains(string(b), `"code":"gateway_shutting_down"`) {
		t.Fatalf("at shutdown the session got %s, %v", b, err)
	}
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusServiceRestart {
		t.Fatalf("closed with %v, want 1012", err)
	}
	if err := testkit.Recv(t, done, "the shutdown"); err != nil {
		t.Fatal(err)
	}
}
