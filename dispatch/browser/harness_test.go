package browser_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/gateway"
	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/telemetry"
)

// chromium returns the browser binary, skipping the test without one
// (failing it under CI=true: CI must not pass by skipping).
func chromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("browser tests start Chromium: not in -short (make test-unit)")
	}
	if bin := os.Getenv("HOPGATE_CHROMIUM_BIN"); bin != "" {
		if _, err := os.Stat(bin); err == nil {
			return bin
		}
		failOrSkip(t, "HOPGATE_CHROMIUM_BIN="+bin+" does not exist")
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	failOrSkip(t, "no chromium: run `make chromium` (bash deploy/chromium/install.sh)")
	return ""
}

func failOrSkip(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// browser is one headless Chromium with a tab, recording console errors
// and uncaught exceptions (a CSP violation is one).
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	bin := chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox, // we run as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	b := &browser{ctx: ctx}
	// The first call starts the browser; no timeout on it (a timeout on
	// the first context would stop the browser with it).
	if err := chromedp.Listen(ctx, b.record); err != nil {
		t.Fatalf("start chromium %s: %v", bin, err)
	}
	return b
}

func (b *browser) record(ev any) {
	var msg string
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError {
			msg = "console.error"
			for _, a := range ev.Args {
				msg += " " + string(a.Value)
			}
		}
	case *runtime.EventExceptionThrown:
		msg = "exception: " + ev.ExceptionDetails.Text
		if e := ev.ExceptionDetails.Exception; e != nil {
			msg += " " + e.Description
		}
	case *cdplog.EventEntryAdded:
		if ev.Entry.Level == cdplog.EntryLevelError {
			msg = "log: " + ev.Entry.Text + " " + ev.Entry.URL
		}
	}
	if msg != "" {
		b.mu.Lock()
		b.errors = append(b.errors, msg)
		b.mu.Unlock()
	}
}

// timed bounds one step: a page that never shows what a test waits for
// fails the test instead of hanging it.
func (b *browser) timed() (context.Context, context.CancelFunc) {
	return context.WithTimeout(b.ctx, time.Minute)
}

// do runs steps in order.
func (b *browser) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := b.timed()
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// get runs one action and returns its value.
func get[T any](t *testing.T, b *browser, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := b.timed()
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, b *browser, expr string, opts ...chromedp.EvaluateOption) T {
	t.Helper()
	return get(t, b, expr, chromedp.Evaluate[T](expr, opts...))
}

// noConsoleErrors fails the test on any console error seen so far.
func (b *browser) noConsoleErrors(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errors {
		t.Errorf("browser console: %s", e)
	}
}

// screenshot writes the whole page to the test's temp dir (for a person to
// look at) and, under HOPGATE_SCREENSHOTS_DIR, the viewport to docs (make
// screenshots): smaller files for the repository.
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	png := get(t, b, "screenshot "+name, chromedp.FullScreenshot(100))
	p := filepath.Join(t.TempDir(), name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
	if dir := os.Getenv("HOPGATE_SCREENSHOTS_DIR"); dir != "" {
		small := get(t, b, "docs screenshot "+name, chromedp.CaptureScreenshot())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, name+".png")
		if err := os.WriteFile(dst, small, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", dst)
	}
}

// The incident's start on the fake clock: 30 s into a minute, so a minute
// boundary is one Advance(time.Minute) away and minutes are predictable.
var start = time.Date(2026, 5, 12, 9, 41, 30, 0, time.UTC)

// incident is a running gateway on a fake clock over three fake channels,
// cheapest first: cheap-eu, mid-us, premium-eu (the demo's layout).
type incident struct {
	gw    *gateway.Gateway
	tel   *telemetry.Telemetry
	clock *clockwork.FakeClock
	ups   map[string]*upstream.Server
	admin string // http://host:port of the admin listener
	main  string
}

const model = "gpt-4o-mini"

var channels = []struct{ id, region string }{{"cheap-eu", "eu-west-1"}, {"mid-us", "us-east-1"}, {"premium-eu", "eu-west-1"}}

func newIncident(t *testing.T, traceURL string) *incident {
	t.Helper()
	return newIncidentWith(t, traceURL, "")
}

// newIncidentWith is newIncident with extra lines for the policy block
// (two-space indented YAML), e.g. an early_warning.
func newIncidentWith(t *testing.T, traceURL, policy string) *incident {
	t.Helper()
	in := &incident{clock: clockwork.NewFakeClockAt(start), ups: map[string]*upstream.Server{}}
	urls := map[string]string{}
	for _, ch := range channels {
		u := upstream.New(upstream.Options{Name: ch.id})
		srv := httptest.NewServer(u)
		t.Cleanup(func() { u.Close(); srv.Close() })
		in.ups[ch.id], urls[ch.id] = u, srv.URL+"/v1"
	}
	y := fmt.Sprintf(`
listen: %[1]s
admin_listen: %[2]s
region: eu-west-1
auth: {mode: none}
policy:
  breaker: {mode: count, window: 5m, failures: 3, cooldown: 60s}
  header_timeout: 20s
%[7]schannels:
  - {id: cheap-eu, base_url: %[3]q, region: eu-west-1}
  - {id: mid-us, base_url: %[4]q, region: us-east-1}
  - {id: premium-eu, base_url: %[5]q, region: eu-west-1}
models:
  - name: %[6]s
    chain:
      - {channel: premium-eu, upstream_model: %[6]s, price: {input: 2.50, output: 10.00}}
      - {channel: cheap-eu, upstream_model: %[6]s, price: {input: 0.15, output: 0.60}}
      - {channel: mid-us, upstream_model: %[6]s, price: {input: 0.30, output: 1.20}}
`, testkit.LoopbackAddr(t), testkit.LoopbackAddr(t), urls["cheap-eu"], urls["mid-us"], urls["premium-eu"], model, policy)
	if traceURL != "" {
		y += "telemetry: {trace_url: '" + traceURL + "'}\n"
	}
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	// No exporter: the trace view must work with no trace backend.
	in.tel, err = telemetry.Setup(context.Background(), telemetry.Options{Region: cfg.Region,
		Getenv: func(string) string { return "" }, Clock: in.clock})
	if err != nil {
		t.Fatal(err)
	}
	in.gw, err = gateway.Start(context.Background(), cfg, gateway.Options{Telemetry: in.tel, Clock: in.clock, DrainTimeout: 2 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = in.gw.Shutdown(ctx)
		_ = in.tel.Shutdown(ctx)
	})
	in.admin, in.main = "http://"+in.gw.AdminAddr(), "http://"+in.gw.Addr()
	return in
}

// fault sets (or with "" clears) a channel's fault for the model.
func (in *incident) fault(t *testing.T, channel, fault string) {
	t.Helper()
	if err := in.ups[channel].SetFault(model, fault); err != nil {
		t.Fatal(err)
	}
}

// request sends one chat completion and returns its failover path and
// trace id, reading the whole answer.
func (in *incident) request(t *testing.T, stream bool) (status int, path, traceID string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":"hello"}]}`, model, stream)
	resp, err := http.Post(in.main+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Hopgate-Path"), resp.Header.Get("X-Request-Id")
}

// expectPath sends a request and checks its path.
func (in *incident) expectPath(t *testing.T, stream bool, want string) string {
	t.Helper()
	_, path, id := in.request(t, stream)
	if path != want {
		t.Fatalf("path %q, want %q", path, want)
	}
	return id
}
