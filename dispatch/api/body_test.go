package api_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/api"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/telemetry"
)

// closeRecorder is a request body that records its Close.
type closeRecorder struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeRecorder) Close() error { c.closed.Store(true); return nil }

// The request body is closed as soon as it is read to its end, before any
// hop: net/http would otherwise try to discard the rest of it under the
// answer's first write, the deepest point of a stream's stack. A body cut
// by max_body_bytes is refused and left to net/http.
func TestBodyClosedOnceRead(t *testing.T) {
	var closedAtHop atomic.Bool
	var body *closeRecorder
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		closedAtHop.Store(body.closed.Load())
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","model":"up-m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(up.Close)
	cfg, err := config.Parse([]byte(`
auth: {mode: none}
max_body_bytes: 4096
channels:
  - {id: a, base_url: "`+up.URL+`/v1"}
models:
  - name: m
    chain: [{channel: a, upstream_model: up-m}]
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	tel := telemetry.Noop()
	h := api.New(cfg, dispatch.New(dispatch.Options{Telemetry: tel}), tel, slog.New(slog.DiscardHandler)).Handler()
	for _, tc := range []struct {
		name       string
		content    string
		status     int
		wantClosed bool
	}{
		{"read to its end", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, http.StatusOK, true},
		{"over max_body_bytes", `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, http.StatusRequestEntityTooLarge, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			closedAtHop.Store(false)
			body = &closeRecorder{Reader: strings.NewReader(tc.content)}
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			r.Body, r.ContentLength = body, -1
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			if body.closed.Load() != tc.wantClosed {
				t.Fatalf("body closed: %v, want %v", body.closed.Load(), tc.wantClosed)
			}
			if tc.wantClosed && !closedAtHop.Load() {
				t.Fatal("the body was still open when the hop went upstream")
			}
		})
	}
}
