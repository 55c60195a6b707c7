package dispatch_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// asciiClientKey authenticates the requests of TestResponseHeadersAreASCII.
const asciiClientKey = "hg-test-ascii-key"

// asciiConfig: model m (chain a then b), model d with a chain deadline
// shorter than its header timeout, and a one-failure breaker so the second
// request after a failure sees "a:open".
func asciiConfig() string {
	sum := sha256.Sum256([]byte(asciiClientKey))
	return `
region: test-1
auth:
  keys: [{id: t, sha256: ` + hex.EncodeToString(sum[:]) + `}]
policy:
  breaker: {mode: count, window: 5m, failures: 1, cooldown: 60s}
  header_timeout: 10s
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY, region: r-a}
  - {id: b, base_url: "{{url:b}}", api_key_env: CHANNEL_KEY, region: r-b}
  - {id: odd, base_url: "{{url:odd}}", api_key_env: CHANNEL_KEY, region: r-b}
models:
  - name: m
    operations: [chat, completions, responses, embeddings, images, audio_speech, audio_transcriptions]
    chain:
      - {channel: b, upstream_model: up-m, price: {input: 2, output: 2}}
      - {channel: a, upstream_model: up-m, price: {input: 1, output: 1}}
  - name: d
    operations: [chat, completions, responses, embeddings, images, audio_speech, audio_transcriptions]
    policy: {chain_deadline: 5s}
    chain:
      - {channel: a, upstream_model: up-m, price: {input: 1, output: 1}}
  - name: odd
    operations: [chat, completions, responses, embeddings, images, audio_speech, audio_transcriptions]
    chain:
      - {channel: odd, upstream_model: up-m, price: {input: 1, output: 1}}
`
}

// oddContentType answers 200 with a Content-Type carrying UTF-8 bytes (a
// misconfigured upstream or middlebox): hopgate passes the media type on,
// but never bytes a fetch client would decode as Latin-1.
type oddContentType struct{ up http.Handler }

func (o oddContentType) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.up.ServeHTTP(&oddWriter{ResponseWriter: w}, r)
}

type oddWriter struct{ http.ResponseWriter }

func (w *oddWriter) WriteHeader(code int) {
	if ct := w.Header().Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct+"; note=\"r\u00e9sum\u00e9 \u2192 ok\"")
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *oddWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestResponseHeadersAreASCII exists because X-Hopgate-Path once carried
// "→" as raw UTF-8, which browsers and fetch clients decode as Latin-1
// ("flaky-eu:503 â backup-us:ok"). Every byte of every header hopgate
// writes must be printable ASCII or a tab (RFC 9110 §5.5), on every
// endpoint, whatever happened: failovers, breaker skips, timeouts, the
// degraded reply, final errors and hopgate's own errors.
func TestResponseHeadersAreASCII(t *testing.T) {
	type scenario struct {
		name  string
		model string
		// setup sets faults; run sends the request(s) and returns replies.
		faults map[string]string // channel -> fault of up-m
		// advance moves the gateway clock by this much once the first hop
		// is in flight (header timeout, chain deadline).
		advance time.Duration
		// twice: send the request twice (the second sees a:open).
		twice    bool
		wantPath string // of the last reply ("" = not checked)
	}
	scenarios := []scenario{
		{name: "ok", model: "m", wantPath: "a:ok"},
		{name: "failover", model: "m", faults: map[string]string{"a": "503"}, wantPath: "a:503 -> b:ok"},
		{name: "breaker skip", model: "m", faults: map[string]string{"a": "503"}, twice: true, wantPath: "a:open -> b:ok"},
		{name: "header timeout", model: "m", faults: map[string]string{"a": "no-headers"}, advance: 10 * time.Second, wantPath: "a:header_timeout -> b:ok"},
		{name: "exhausted", model: "m", faults: map[string]string{"a": "503", "b": "503"}, wantPath: "a:503 -> b:503"},
		{name: "chain deadline", model: "d", faults: map[string]string{"a": "no-headers"}, advance: 5 * time.Second, wantPath: "a:deadline"},
		{name: "final 400", model: "m", faults: map[string]string{"a": "400"}, wantPath: "a:400"},
		{name: "odd upstream content type", model: "odd", wantPath: "odd:ok"},
	}
	for _, ec := range endpoints {
		for _, sc := range scenarios {
			t.Run(ec.name+"/"+sc.name, func(t *testing.T) {
				h := newASCIIHarness(t)
				for ch, f := range sc.faults {
					if err := h.Ups[ch].SetFault("up-m", f); err != nil {
						t.Fatal(err)
					}
				}
				n := 1
				if sc.twice {
					n = 2
				}
				var r gwtest.Reply
				for i := 0; i < n; i++ {
					done := make(chan gwtest.Reply, 1)
					go func() { done <- authCall(h, ec.path, ec.ct, ec.body(sc.model), asciiClientKey) }()
					if sc.advance > 0 {
						h.WaitAttempts("a", "up-m", 1)
						h.WaitTimers(1)
						h.Clock.Advance(sc.advance)
					}
					r = testkit.Recv(t, done, "the reply")
					checkASCIIHeaders(t, r)
				}
				if sc.wantPath != "" && r.Header.Get("X-Hopgate-Path") != sc.wantPath {
					t.Fatalf("status %d path %q, want %q: %.300s", r.Status, r.Header.Get("X-Hopgate-Path"), sc.wantPath, r.Body)
				}
			})
		}
	}
	// hopgate's own errors, before any upstream is asked.
	own := []struct {
		name, method, path, ct, body, key string
		want                              int
	}{
		{"no key", http.MethodPost, "/v1/chat/completions", "application/json", `{"model":"m","messages":[]}`, "", 401},
		{"bad key", http.MethodPost, "/v1/chat/completions", "application/json", `{"model":"m","messages":[]}`, "wrong\u00e9", 401},
		{"unknown model", http.MethodPost, "/v1/chat/completions", "application/json", `{"model":"n\u00e9ant","messages":[]}`, asciiClientKey, 404},
		{"bad json", http.MethodPost, "/v1/chat/completions", "application/json", `{"model":`, asciiClientKey, 400},
		{"wrong method", http.MethodGet, "/v1/chat/completions", "", ``, asciiClientKey, 405},
		{"unknown route", http.MethodPost, "/v1/r\u00e9sum\u00e9", "application/json", `{}`, asciiClientKey, 404},
		{"models", http.MethodGet, "/v1/models", "", ``, asciiClientKey, 200},
	}
	h := newASCIIHarness(t)
	for _, o := range own {
		t.Run("own/"+o.name, func(t *testing.T) {
			req, err := http.NewRequest(o.method, h.URL+o.path, strings.NewReader(o.body))
			if err != nil {
				t.Fatal(err)
			}
			if o.ct != "" {
				req.Header.Set("Content-Type", o.ct)
			}
			if o.key != "" {
				req.Header.Set("Authorization", "Bearer "+o.key)
			}
			r := h.Do(req)
			if r.Status != o.want {
				t.Fatalf("status %d, want %d: %.300s", r.Status, o.want, r.Body)
			}
			checkASCIIHeaders(t, r)
		})
	}
}

// newASCIIHarness starts asciiConfig with fake providers a and b and the
// odd Content-Type provider.
func newASCIIHarness(t *testing.T) *gwtest.Gateway {
	t.Helper()
	return gwtest.NewWith(t, gwtest.Options{Wrap: map[string]func(http.Handler) http.Handler{
		"odd": func(fake http.Handler) http.Handler { return oddContentType{fake} },
	}}, asciiConfig(), "a", "b", "odd")
}

// authCall sends body to path with a client key and reads the whole answer.
func authCall(h *gwtest.Gateway, path, ct string, body []byte, key string) gwtest.Reply {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, h.URL+path, strings.NewReader(string(body)))
	if err != nil {
		return gwtest.Reply{Status: -1, Body: err.Error()}
	}
	req.Header.Set("Content-Type", ct)
	req.Header.Set("Authorization", "Bearer "+key)
	return h.Do(req)
}

// checkASCIIHeaders fails on any header byte outside 0x20–0x7E and tab.
func checkASCIIHeaders(t *testing.T, r gwtest.Reply) {
	t.Helper()
	if r.Status <= 0 {
		t.Fatalf("no reply: %s", r.Body)
	}
	if len(r.Header) == 0 {
		t.Fatalf("status %d without headers", r.Status)
	}
	for k, vs := range r.Header {
		for _, s := range append([]string{k}, vs...) {
			for i := 0; i < len(s); i++ {
				if c := s[i]; (c < 0x20 || c > 0x7e) && c != '\t' {
					t.Fatalf("header %s: %q has byte 0x%02x at %d", k, s, c, i)
				}
			}
		}
	}
}
