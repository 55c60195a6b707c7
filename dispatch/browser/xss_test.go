package browser_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/gateway"
	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/telemetry"
)

// TestPagesRenderAttackerTextAsText is the end-to-end XSS test: a model
// named with a <script>, whose first channel answers 503 with a <script>
// in its error message, fails over; every page that shows it (/admin, the
// trace list, the trace view, /status) is loaded in the browser, the
// script never runs, and the name reads as text.
func TestPagesRenderAttackerTextAsText(t *testing.T) {
	const evil = `<script>window.__xss=1</script><img/src="x"/onerror="window.__xss=2">`
	hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"error":{"message":%q,"type":"server_error","code":"overloaded"}}`, "overloaded "+evil)
	}))
	t.Cleanup(hostile.Close)
	good := upstream.New(upstream.Options{Name: "good"})
	gs := httptest.NewServer(good)
	t.Cleanup(func() { good.Close(); gs.Close() })

	y := fmt.Sprintf(`
listen: %s
admin_listen: %s
auth: {mode: none}
channels:
  - {id: hostile, base_url: %q}
  - {id: good, base_url: %q}
models:
  - name: '%s'
    chain:
      - {channel: hostile, upstream_model: m, price: {input: 1, output: 1}}
      - {channel: good, upstream_model: m, price: {input: 2, output: 2}}
`, testkit.LoopbackAddr(t), testkit.LoopbackAddr(t), hostile.URL+"/v1", gs.URL+"/v1", evil)
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.Start(context.Background(), cfg, gateway.Options{Telemetry: tel, Logger: slog.New(slog.DiscardHandler), DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = gw.Shutdown(ctx)
		_ = tel.Shutdown(ctx)
	})
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, evil)
	resp, err := http.Post("http://"+gw.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("X-Request-Id")
	if p := resp.Header.Get("X-Hopgate-Path"); p != "hostile:503 -> good:ok" {
		t.Fatalf("path %q", p)
	}

	b := newBrowser(t)
	admin, main := "http://"+gw.AdminAddr(), "http://"+gw.Addr()
	for _, page := range []struct{ url, text string }{
		{admin + "/admin", "table.failovers"},
		{admin + "/admin/traces", "table.traces"},
		{admin + "/admin/traces/" + id, ".trace-head"},
		{main + "/status", "section.model h2"},
	} {
		b.do(t, page.url, chromedp.Navigate(page.url), chromedp.WaitVisible(css(page.text)))
		if ran := eval[bool](t, b, `window.__xss !== undefined`); ran {
			t.Errorf("%s: the injected script ran", page.url)
		}
		if n := eval[int](t, b, `document.querySelectorAll('img[src=x]').length`); n != 0 {
			t.Errorf("%s: the injected <img> is an element", page.url)
		}
		if txt := get(t, b, "text", chromedp.Text(css(page.text))); !strings.Contains(txt, "<script>window.__xss=1</script>") {
			t.Errorf("%s does not show the model name as text: %q", page.url, txt)
		}
	}
	b.noConsoleErrors(t)
}
