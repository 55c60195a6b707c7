package gateway_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/dispatch/gateway"
	"github.com/hopgate/hopgate/telemetry"

	"github.com/hopgate/hopgate/internal/testkit"
)

// relGW is a gateway started through gateway.Start on real loopback
// listeners, in front of fake providers, with spans in memory.
type relGW struct {
	t     *testing.T
	gw    *gateway.Gateway
	ups   map[string]*upstream.Server
	urls  map[string]string // channel id -> base URL (…/v1)
	spans *tracetest.InMemoryExporter
	tel   *telemetry.Telemetry
	logs  *testkit.SyncBuffer
}

// relStart starts one fake provider per id in fakes and a gateway whose
// config is yml with {{listen}}, {{admin}}, {{url:ID}} replaced. Extra URLs
// (for hand-written upstreams) come in urls. env feeds api_key_env/token_env.
func relStart(t *testing.T, yml string, o gateway.Options, env map[string]string, urls map[string]string, fakes ...string) *relGW {
	t.Helper()
	r := &relGW{t: t, ups: map[string]*upstream.Server{}, urls: map[string]string{}, logs: &testkit.SyncBuffer{}}
	for _, id := range fakes {
		u := upstream.New(upstream.Options{Name: id})
		srv := httptest.NewServer(u)
		t.Cleanup(func() { u.Close(); srv.Close() })
		r.ups[id] = u
		r.urls[id] = srv.URL + "/v1"
	}
	for id, u := range urls {
		r.urls[id] = u
	}
	for id, u := range r.urls {
		yml = strings.ReplaceAll(yml, "{{url:"+id+"}}", u)
	}
	cfg := parseLoopbackConfig(t, yml, env)
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewJSONHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	r.gw, r.tel, r.spans = startTestGateway(t, cfg, 1, o)
	return r
}

func (r *relGW) url(path string) string { return "http://" + r.gw.Addr() + path }

// post sends a chat body with optional headers and reads the whole reply.
func (r *relGW) post(body string, hdr map[string]string) (*http.Response, string) {
	r.t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.url("/v1/chat/completions"), strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		if strings.EqualFold(k, "Host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatalf("gateway request: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatalf("reading reply: %v", err)
	}
	return resp, string(b)
}

// relTwo: model m on a cheap channel a (upA) then b (healthy).
func relTwo(upA, extra string) string {
	return fmt.Sprintf(`
listen: {{listen}}
admin_listen: {{admin}}
auth: {mode: none}
channels:
  - {id: a, base_url: "{{url:a}}"}
  - {id: b, base_url: "{{url:b}}"}
models:
  - name: m
    chain:
      - {channel: a, upstream_model: %q, price: {input: 1, output: 1}}
      - {channel: b, upstream_model: "m", price: {input: 2, output: 2}}
%s`, upA, extra)
}

const relChat = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
const relChatStream = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`

// relWaitClosed reads from conn until the server closes it, or fails after
// limit. It returns how long that took.
func relWaitClosed(t *testing.T, conn net.Conn, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(limit))
	buf := make([]byte, 4096)
	for {
		_, err := conn.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("server kept the connection open for %v", limit)
		}
		return time.Since(start)
	}
}

// TestSlowlorisIsDisconnected: a client dribbling its request headers one
// byte at a time, slower than ReadHeaderTimeout allows, is cut off instead
// of pinning a connection (and a goroutine) forever.
func TestSlowlorisIsDisconnected(t *testing.T) {
	r := relStart(t, relTwo("m", ""), gateway.Options{ReadHeaderTimeout: 300 * time.Millisecond}, nil, nil, "a", "b")
	conn, err := net.Dial("tcp", r.gw.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("s", 200)
	stop := make(chan struct{})
	var sent atomic.Int64
	go func() {
		// The slow client: one byte every 20 ms would need 4 s for the
		// header; the server must give up after 300 ms.
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for i := 0; i < len(head); i++ {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			if _, err := conn.Write([]byte{head[i]}); err != nil {
				return
			}
			sent.Add(1)
		}
	}()
	took := relWaitClosed(t, conn, 3*time.Second)
	close(stop)
	if took < 250*time.Millisecond {
		t.Fatalf("closed after %v, before ReadHeaderTimeout", took)
	}
	if n := sent.Load(); n >= int64(len(head)) {
		t.Fatalf("the whole slow header (%d bytes) got through", n)
	}
	if n := len(r.ups["a"].Log()) + len(r.ups["b"].Log()); n != 0 {
		t.Fatalf("a request reached upstreams %d times", n)
	}
}

// TestIdleKeepAliveIsReaped: a client that keeps a connection open after
// its request without sending another is disconnected after IdleTimeout.
func TestIdleKeepAliveIsReaped(t *testing.T) {
	r := relStart(t, relTwo("m", ""), gateway.Options{IdleTimeout: 300 * time.Millisecond}, nil, nil, "a", "b")
	conn, err := net.Dial("tcp", r.gw.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("status %d close=%v: want a kept-alive 200", resp.StatusCode, resp.Close)
	}
	if took := relWaitClosed(t, conn, 3*time.Second); took < 200*time.Millisecond {
		t.Fatalf("idle connection closed after %v, before IdleTimeout", took)
	}
}

// TestOversizedHeadersGet431: request headers beyond 64 KiB are refused
// with 431 before any handler runs.
func TestOversizedHeadersGet431(t *testing.T) {
	r := relStart(t, relTwo("m", ""), gateway.Options{}, nil, nil, "a", "b")
	resp, _ := r.post(relChat, map[string]string{"X-Big": strings.Repeat("h", 80<<10)})
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", resp.StatusCode)
	}
	if n := len(r.ups["a"].Log()); n != 0 {
		t.Fatalf("oversized request reached the upstream")
	}
	// Just under the limit still works: the limit is not off by a lot.
	resp, body := r.post(relChat, map[string]string{"X-Big": strings.Repeat("h", 60<<10)})
	if resp.StatusCode != 200 {
		t.Fatalf("60 KiB of headers: %d %s", resp.StatusCode, body)
	}
}

// TestInvalidUTF8PassesThrough: JSON whose strings hold invalid UTF-8 is
// technically invalid (RFC 8259 §8.1) but encoding/json and the providers
// accept it; hopgate does not reinterpret client text, so the bytes reach
// the upstream unchanged (docs/reliability.md records the decision) and
// nothing crashes.
func TestInvalidUTF8PassesThrough(t *testing.T) {
	r := relStart(t, relTwo("m", ""), gateway.Options{}, nil, nil, "a", "b")
	bad := "caf\xe9 \xff\xfe \xed\xa0\x80"
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"%s"}]}`, stream, bad)
		resp, out := r.post(body, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("stream=%v: status %d %s", stream, resp.StatusCode, out)
		}
	}
	log := r.ups["a"].Log()
	if len(log) != 2 {
		t.Fatalf("upstream a saw %d requests, want 2", len(log))
	}
	for _, req := range log {
		if !strings.Contains(string(req.Body), bad) {
			t.Fatalf("upstream body altered: %q", req.Body)
		}
	}
	// Invalid UTF-8 in the model name is simply an unknown model.
	resp, out := r.post("{\"model\":\"m\xff\",\"messages\":[]}", nil)
	if resp.StatusCode != 404 || !strings.Contains(out, "model_not_found") {
		t.Fatalf("status %d %s", resp.StatusCode, out)
	}
}

// relHeapPeak samples the live heap while f runs and returns the peak growth
// over the heap before f.
func relHeapPeak(f func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > base && ms.HeapAlloc-base > peak.Load() {
				peak.Store(ms.HeapAlloc - base)
			}
			select {
			case <-done:
				return
			case <-tk.C:
			}
		}
	}()
	f()
	close(done)
	<-sampled
	return peak.Load()
}

// TestEndlessUpstreamIsBounded: an upstream that answers 200 and then
// never ends its frame (stream) or its body (non-stream) is a failed hop
// on a bounded amount of memory, and the next channel answers.
func TestEndlessUpstreamIsBounded(t *testing.T) {
	cases := []struct {
		name, fault, body string
		opts              gateway.Options
		maxHeap           uint64
	}{
		// A frame is capped at MaxFrame: the reader stops there.
		{"endless frame", "m|endless-frame", relChatStream, gateway.Options{}, 32 << 20},
		// A non-stream body is capped at MaxResponseBody.
		{"endless body, 4 MiB bound", "m|endless-body", relChat, gateway.Options{MaxResponseBody: 4 << 20}, 48 << 20},
		// The default bound (dispatch.DefaultMaxResponseBody, 256 MiB, sized
		// for base64 images) holds as well, but costs ~530 MiB of heap per
		// request while io.ReadAll grows its buffer (measured once; too heavy
		// for the suite, see docs/reliability.md).
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := relStart(t, relTwo(c.fault, ""), c.opts, nil, nil, "a", "b")
			var resp *http.Response
			var out string
			peak := relHeapPeak(func() {
				done := make(chan struct{})
				go func() {
					defer close(done)
					req, _ := http.NewRequest(http.MethodPost, r.url("/v1/chat/completions"), strings.NewReader(c.body))
					rs, err := http.DefaultClient.Do(req)
					if err != nil {
						out = err.Error()
						return
					}
					b, _ := io.ReadAll(rs.Body)
					rs.Body.Close()
					resp, out = rs, string(b)
				}()
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					t.Fatal("request to an endless upstream never ended")
				}
			})
			if resp == nil || resp.StatusCode != 200 {
				t.Fatalf("reply: %v %s", resp, out)
			}
			path := resp.Header.Get("X-Hopgate-Path")
			if !strings.HasPrefix(path, "a:") || !strings.HasSuffix(path, "b:ok") {
				t.Fatalf("path %q: the endless hop must fail over to b", path)
			}
			t.Logf("path %s, peak heap growth %.1f MiB", path, float64(peak)/(1<<20))
			if peak > c.maxHeap {
				t.Fatalf("heap grew by %d MiB, bound %d MiB", peak>>20, c.maxHeap>>20)
			}
		})
	}
}

// TestRedirectIsNeverFollowed: an upstream answering 302 to another host
// is a failed hop; the other host receives nothing (it would receive the
// channel credential), and the next channel answers.
func TestRedirectIsNeverFollowed(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.WriteHeader(200)
	}))
	defer other.Close()
	for _, code := range []int{301, 302, 307, 308} {
		redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+"/v1/chat/completions", code)
		}))
		r := relStart(t, relTwo("m", ""), gateway.Options{}, nil, map[string]string{"a": redir.URL + "/v1"}, "b")
		for _, body := range []string{relChat, relChatStream} {
			resp, out := r.post(body, nil)
			if resp.StatusCode != 200 || resp.Header.Get("X-Hopgate-Path") != fmt.Sprintf("a:%d -> b:ok", code) {
				t.Fatalf("%d: status %d path %q %s", code, resp.StatusCode, resp.Header.Get("X-Hopgate-Path"), out)
			}
		}
		redir.Close()
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the redirect target received %d requests", n)
	}
}
