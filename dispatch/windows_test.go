package dispatch_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hopgate/hopgate/dispatch/earlywarning"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// statedWindow is a fake provider's rate-limit headers, changed by the
// test between requests.
type statedWindow struct {
	mu sync.Mutex
	h  map[string]string
}

func (s *statedWindow) set(h map[string]string) { s.mu.Lock(); s.h = h; s.mu.Unlock() }

func (s *statedWindow) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		for k, v := range s.h {
			w.Header().Set(k, v)
		}
		s.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

// DESIGN §16 on the request path: the cheap channel's answer says its
// requests window is 95 % used; the next request tries the dear one first
// (a:demoted on the failover path, the ratelimit reason on the span)
// until the window resets, then the cheap one is back in its place.
func TestFullWindowDemotesUntilReset(t *testing.T) {
	var win statedWindow
	win.set(map[string]string{"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "50", "x-ratelimit-reset-requests": "30s"})
	const yml = `
policy:
  early_warning: {enabled: true, ratelimit_utilization: 0.9}
`
	h := gwtest.NewWith(t, gwtest.Options{Wrap: map[string]func(http.Handler) http.Handler{"a": win.wrap}},
		twoChannels("m", "m", yml), "a", "b")
	path := func() string {
		t.Helper()
		r := h.Post(chat(false))
		if r.Status != 200 {
			t.Fatalf("status %d %s", r.Status, r.Body)
		}
		return r.Header.Get("X-Hopgate-Path")
	}
	if p := path(); p != "a:ok" {
		t.Fatalf("half-used window: %q, want a:ok", p)
	}
	win.set(map[string]string{"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "30s"})
	if p := path(); p != "a:ok" {
		t.Fatalf("the answer that states the full window: %q, want a:ok", p)
	}
	r := h.Post(chat(false))
	if p := r.Header.Get("X-Hopgate-Path"); r.Status != 200 || p != "a:demoted -> b:ok" {
		t.Fatalf("after a 95 %% window: %d %q, want a:demoted -> b:ok", r.Status, p)
	}
	var reason string
	for _, s := range h.Trace(r.Header.Get("X-Request-Id")) {
		for _, ev := range s.Events {
			if ev.Name == telemetry.EventEarlyWarning {
				for _, kv := range ev.Attributes {
					if string(kv.Key) == telemetry.AttrEarlyWarningReason {
						reason = kv.Value.Emit()
					}
				}
			}
		}
	}
	if reason != earlywarning.ReasonRateLimit {
		t.Fatalf("early-warning reason on the span = %q, want %q", reason, earlywarning.ReasonRateLimit)
	}
	win.set(map[string]string{"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "100", "x-ratelimit-reset-requests": "1m0s"})
	h.Clock.Advance(29 * time.Second)
	if p := path(); p != "a:demoted -> b:ok" {
		t.Fatalf("a second before the reset: %q, want still demoted", p)
	}
	h.Clock.Advance(time.Second)
	if p := path(); p != "a:ok" {
		t.Fatalf("at the reset: %q, want a:ok, back in place", p)
	}
	if s := h.Engine.Warnings().Lookup("a").State(); s != earlywarning.Normal {
		t.Fatalf("state after the reset = %v, want normal", s)
	}
}
