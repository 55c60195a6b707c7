package gwtest

import (
	"go/parser"
	"go/token"
	"io/fs"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/telemetry"
)

// TestMain: a harness that leaves a goroutine behind (a provider, an
// Async request, an idle connection) would fail every package using it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const twoChannels = `
region: test-1
auth: {mode: none}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY, region: r-a}
  - {id: b, base_url: "{{url:b}}", api_key_env: CHANNEL_KEY, region: r-b}
models:
  - name: m
    chain:
      - {channel: a, upstream_model: "m|503", price: {input: 1, output: 1}}
      - {channel: b, upstream_model: m, price: {input: 2, output: 2}}
`

// The armed clock records every duration armed through it, Reset
// included, and checkArmed says which timer broke the configuration.
func TestArmedClock(t *testing.T) {
	c := &ArmedClock{FakeClock: clockwork.NewFakeClockAt(Epoch)}
	fired := make(chan struct{})
	c.AfterFunc(5*time.Second, func() { close(fired) })
	tm := c.NewTimer(30 * time.Second)
	tm.Reset(8 * time.Second)
	if got := c.Armed(); len(got) != 3 || got[0] != 5*time.Second || got[1] != 30*time.Second || got[2] != 8*time.Second {
		t.Fatalf("armed %v, want [5s 30s 8s]", got)
	}
	c.Advance(5 * time.Second)
	testkit.Recv(t, fired, "the 5s timer")
	for _, tc := range []struct {
		want   time.Duration
		others []time.Duration
		err    string
	}{
		{5 * time.Second, []time.Duration{30 * time.Second, 8 * time.Second}, ""},
		{8 * time.Second, []time.Duration{5 * time.Second, 30 * time.Second}, ""},
		{5 * time.Second, []time.Duration{30 * time.Second}, "a timer was armed for 8s; configured: 5s [30s] (armed: [5s 30s 8s])"},
		{10 * time.Second, []time.Duration{5 * time.Second, 30 * time.Second, 8 * time.Second}, "no timer armed for 10s; armed: [5s 30s 8s]"},
	} {
		err := checkArmed(c.Armed(), tc.want, tc.others...)
		if got := errString(err); got != tc.err {
			t.Errorf("checkArmed(%v, %v) = %q, want %q", tc.want, tc.others, got, tc.err)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// New: the config reaches the fakes through {{url:ID}} with the channel
// credential; the reply, the attempts, the span ends and the trace are
// what the request did; the engine's timers are on the armed clock.
func TestNewGateway(t *testing.T) {
	g := New(t, twoChannels, "a", "b")
	r := g.Post(ChatBody("m", true))
	if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:503 -> b:ok" {
		t.Fatalf("status %d path %q: %s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
	}
	if got := StreamText(r.Body); got != "tok1 tok2 tok3 tok4 tok5 tok6 tok7 tok8 " {
		t.Fatalf("stream text %q", got)
	}
	if g.Attempts("a", "m|503") != 1 || g.Attempts("b", "m") != 1 {
		t.Fatalf("attempts a=%d b=%d", g.Attempts("a", "m|503"), g.Attempts("b", "m"))
	}
	if auth := g.Ups["b"].Log()[0].Header.Get("Authorization"); auth != "Bearer "+ChannelKey {
		t.Fatalf("the fake got Authorization %q", auth)
	}
	g.WaitSpanEnd(telemetry.SpanAwaitHeaders, 2)
	spans := g.Trace(r.Header.Get("X-Request-Id"))
	names := map[string]int{}
	for _, s := range spans {
		names[s.Name]++
	}
	if names[telemetry.SpanServer] != 1 || names[telemetry.SpanAwaitHeaders] != 2 || names[telemetry.SpanStreamGate] != 1 {
		t.Fatalf("trace spans %v", names)
	}
	g.WantArmed(240*time.Second, 30*time.Second) // the default header and gate timeouts
	if !strings.Contains(g.Logs.String(), `"msg":"request"`) {
		t.Fatalf("no request log line:\n%s", g.Logs.String())
	}
}

// Async waits with the request for the clock; a request still waiting
// when the test ends is cancelled then, before the gateway closes.
func TestAsyncEndsWithTheTest(t *testing.T) {
	var pending <-chan Reply
	t.Run("waits", func(t *testing.T) {
		g := New(t, strings.Replace(twoChannels, `"m|503"`, `"m|no-headers"`, 1)+"    policy: {header_timeout: 10s}\n", "a", "b")
		done := g.Async(ChatBody("m", false))
		g.WaitAttempts("a", "m|no-headers", 1)
		g.WaitTimers(1)
		g.Clock.Advance(10 * time.Second)
		if r := testkit.Recv(t, done, "the reply"); r.Header.Get("X-Hopgate-Path") != "a:header_timeout -> b:ok" {
			t.Fatalf("status %d path %q", r.Status, r.Header.Get("X-Hopgate-Path"))
		}
		g.WaitNoTimers()
		pending = g.Async(ChatBody("m", false)) // a hangs; nobody moves the clock
		g.WaitAttempts("a", "m|no-headers", 2)
	})
	if r := testkit.Recv(t, pending, "the cancelled reply"); r.Status != -1 || !strings.Contains(r.Body, "context canceled") {
		t.Fatalf("a request outliving its test: status %d %s", r.Status, r.Body)
	}
}

// SpanEnds fires on the next end of a name after the call, not before.
func TestSpanEnds(t *testing.T) {
	g := New(t, twoChannels, "a", "b")
	g.Post(ChatBody("m", false))
	ends := g.SpanEnds(telemetry.SpanServer)
	select {
	case <-ends:
		t.Fatal("SpanEnds fired for a span that ended before the call")
	default:
	}
	g.Post(ChatBody("m", false))
	testkit.Recv(t, ends, "the second server span")
}

// Custom, Wrap and URLs give ids of their own to hand-written upstreams;
// a wrapped fake stays a fake (Ups, attempts).
func TestUpstreamKinds(t *testing.T) {
	var wrapped, custom atomic.Int32
	yml := `
auth: {mode: none}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY}
  - {id: c, base_url: "{{url:c}}", api_key_env: CHANNEL_KEY}
  - {id: d, base_url: "{{url:d}}", api_key_env: CHANNEL_KEY}
models:
  - {name: m, chain: [{channel: c, upstream_model: m, price: {input: 1, output: 1}}, {channel: a, upstream_model: m, price: {input: 2, output: 2}}]}
  - {name: d, chain: [{channel: d, upstream_model: m, price: {input: 1, output: 1}}]}
`
	g := NewWith(t, Options{
		Custom: map[string]http.Handler{"c": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			custom.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
		})},
		Wrap: map[string]func(http.Handler) http.Handler{"a": func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { wrapped.Add(1); next.ServeHTTP(w, r) })
		}},
		URLs: map[string]string{"d": "http://127.0.0.1:1/v1"}, // refuses connections
	}, yml, "a")
	if r := g.Post(ChatBody("m", false)); r.Header.Get("X-Hopgate-Path") != "c:503 -> a:ok" {
		t.Fatalf("path %q", r.Header.Get("X-Hopgate-Path"))
	}
	if custom.Load() != 1 || wrapped.Load() != 1 || g.Attempts("a", "m") != 1 {
		t.Fatalf("custom %d, wrapped %d, fake attempts %d", custom.Load(), wrapped.Load(), g.Attempts("a", "m"))
	}
	if r := g.Post(ChatBody("d", false)); r.Status != 502 || !strings.HasPrefix(r.Header.Get("X-Hopgate-Path"), "d:") {
		t.Fatalf("d: status %d path %q", r.Status, r.Header.Get("X-Hopgate-Path"))
	}
}

// Start: {{listen}} and {{admin}} become the listeners, the admin URL
// answers, Env feeds token_env, Reparse keeps the listeners, and Shutdown
// may come before the cleanup's.
func TestStartGateway(t *testing.T) {
	yml := `
listen: {{listen}}
admin_listen: {{admin}}
auth: {mode: none}
admin: {token_env: ADMIN_TOKEN}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY}
models:
  - {name: m, chain: [{channel: a, upstream_model: m, price: {input: 1, output: 1}}]}
`
	g := Start(t, Options{Env: map[string]string{"ADMIN_TOKEN": "tok-0123456789abcdef"}}, yml, "a")
	if r := g.Post(ChatBody("m", false)); r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:ok" {
		t.Fatalf("status %d path %q", r.Status, r.Header.Get("X-Hopgate-Path"))
	}
	req, _ := http.NewRequest(http.MethodGet, g.AdminURL+"/admin/breakers", nil)
	if r := g.Do(req); r.Status != 401 {
		t.Fatalf("admin without the token: %d", r.Status)
	}
	req.Header.Set("Authorization", "Bearer tok-0123456789abcdef")
	if r := g.Do(req); r.Status != 200 {
		t.Fatalf("admin with the token: %d %s", r.Status, r.Body)
	}
	next := g.Reparse(yml)
	if next.Listen != g.Config.Listen || next.AdminListen != g.Config.AdminListen {
		t.Fatalf("reparsed listeners %s %s, want %s %s", next.Listen, next.AdminListen, g.Config.Listen, g.Config.AdminListen)
	}
	if err := g.Process.Reload(next); err != nil {
		t.Fatal(err)
	}
	if err := g.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// No program imports the harness (or testkit): only tests may start fake
// providers and fake clocks.
func TestOnlyTestsImportTheHarness(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
			strings.HasPrefix(filepath.ToSlash(path), filepath.ToSlash(filepath.Join(root, "internal", "testkit"))+"/") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, "github.com/hopgate/hopgate/internal/testkit") {
				t.Errorf("%s imports %s: the test harness is for tests only", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The span watch counts ends by name and remembers the latest 4096 local
// roots (a remote parent included), without growing with a benchmark.
func TestSpanWatch(t *testing.T) {
	w := newSpanWatch()
	id := func(n int) trace.TraceID { return trace.TraceID{byte(n >> 8), byte(n), 1} }
	end := func(n int, name string, parent trace.SpanContext) {
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: id(n), SpanID: trace.SpanID{1}})
		w.OnEnd(tracetest.SpanStub{Name: name, SpanContext: sc, Parent: parent}.Snapshot())
	}
	child := trace.NewSpanContext(trace.SpanContextConfig{TraceID: id(0), SpanID: trace.SpanID{2}})
	remote := child.WithRemote(true)
	end(0, "await headers", child)
	if w.rootEnded(id(0)) || w.count("await headers") != 1 {
		t.Fatal("a child span counted as a root")
	}
	end(0, "POST /v1/chat/completions", remote)
	if !w.rootEnded(id(0)) {
		t.Fatal("a span with a remote parent is a local root")
	}
	for n := 1; n <= len(w.roots); n++ {
		end(n, "root", trace.SpanContext{})
	}
	if w.rootEnded(id(0)) || !w.rootEnded(id(1)) || !w.rootEnded(id(len(w.roots))) {
		t.Fatal("the ring does not keep exactly the latest roots")
	}
	if w.count("root") != len(w.roots) {
		t.Fatalf("count %d", w.count("root"))
	}
}
