package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// TestShutdownCutsATimerCommittedStream: a stream the gate committed on
// its timer (on_timeout: commit: the upstream sent nothing decisive in
// time) is an open stream like any other. When the drain runs out, the
// shutdown cuts it in band (the gateway_shutting_down frame, no [DONE]),
// while its upstream still holds back the first token. The commit may be
// made on the timer's goroutine, as the hop's goroutine waits in its
// read: the stream must be listed for the shutdown from that commit.
func TestShutdownCutsATimerCommittedStream(t *testing.T) {
	g := gwtest.Start(t, gwtest.Options{DrainTimeout: time.Nanosecond}, `
listen: "{{listen}}"
admin_listen: "{{admin}}"
auth: {mode: none}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY}
models:
  - name: slow
    chain: [{channel: a, upstream_model: "m|slow-first-token=60s"}]
    policy: {stream_gate: {timeout: 30s, on_timeout: commit}}
`, "a")
	headers := g.SpanEnds(telemetry.SpanAwaitHeaders)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, g.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"slow","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	type answer struct {
		resp *http.Response
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := g.Client.Do(req)
		got <- answer{resp, err}
	}()
	testkit.Recv(t, headers, "the upstream's response headers")
	g.WaitUpstreamTimers(1) // the fake holds back its first token
	g.WaitArmed(30 * time.Second)
	g.Clock.Advance(30 * time.Second) // the gate times out: commit what is held
	a := testkit.Recv(t, got, "the committed stream's headers")
	if a.err != nil {
		t.Fatal(a.err)
	}
	defer a.resp.Body.Close()
	if a.resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d after a gate timeout with on_timeout commit", a.resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Bound)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	rest, _ := io.ReadAll(a.resp.Body) // the closed connection may end it unexpectedly: the bytes decide
	tail := string(rest)
	if !strings.Contains(tail, `"code":"gateway_shutting_down"`) || !strings.HasSuffix(tail, "\"}\n\n") {
		t.Fatalf("the timer-committed stream does not end with the gateway_shutting_down frame:\n%s", tail)
	}
	if strings.Contains(tail, "[DONE]") {
		t.Fatalf("a stream cut by the shutdown carries [DONE]:\n%s", tail)
	}
}
