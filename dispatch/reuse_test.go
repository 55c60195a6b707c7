package dispatch_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// finishedStream answers a complete chat stream and flushes its [DONE]
// before the handler returns, so the chunked body's terminator follows
// in a write of its own, as real providers' servers do.
type finishedStream struct{}

func (finishedStream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = w.Write([]byte(`data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"))
	_ = http.NewResponseController(w).Flush()
}

// TestStreamsReuseUpstreamConnections: a complete stream leaves its
// upstream connection reusable. The body was once closed before its
// chunked terminator was read, so the transport dropped the connection
// and, over TLS with HTTP/1.1, every stream paid a new handshake.
func TestStreamsReuseUpstreamConnections(t *testing.T) {
	var conns atomic.Int32
	up := httptest.NewUnstartedServer(finishedStream{})
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.StartTLS()
	t.Cleanup(up.Close)
	tr := up.Client().Transport.(*http.Transport)
	tr.ForceAttemptHTTP2 = false // HTTP/1.1, where the terminator matters
	t.Cleanup(tr.CloseIdleConnections)
	h := gwtest.NewWith(t, gwtest.Options{URLs: map[string]string{"tls": up.URL + "/v1"},
		WrapTransport: func(http.RoundTripper) http.RoundTripper { return tr }}, `
auth: {mode: none}
channels:
  - {id: tls, base_url: "{{url:tls}}"}
models:
  - {name: m, chain: [{channel: tls, upstream_model: m}]}
`)
	for i := 0; i < 20; i++ {
		if r := h.Post(chat(true)); r.Status != 200 || gwtest.StreamText(r.Body) != "hi" {
			t.Fatalf("stream %d: %d %s", i, r.Status, r.Body)
		}
	}
	if n := conns.Load(); n > 2 {
		t.Fatalf("20 sequential streams opened %d upstream connections: the connection is not reused", n)
	}
}
