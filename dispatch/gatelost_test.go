package dispatch_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// heldRead answers with a stream whose first read brings a role chunk
// (held by the gate) and whose second read parks until the test lets it
// go, whatever the hop's context does: a read the hop's end has not
// interrupted yet. It reports when the read parked and when the hop's
// context ended.
type heldRead struct {
	parked, hopEnded chan struct{}
	release          chan struct{}
}

func (h *heldRead) RoundTrip(r *http.Request) (*http.Response, error) {
	_ = r.Body.Close()
	go func() {
		<-r.Context().Done()
		close(h.hopEnded)
	}()
	return sseResponse(r, &heldBody{h: h}), nil
}

type heldBody struct {
	h     *heldRead
	reads int
}

// roleFrame is a chat stream's first chunk: a role, nothing decisive.
const roleFrame = `data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant"}}]}` + "\n\n"

func (b *heldBody) Read(p []byte) (int, error) {
	b.reads++
	if b.reads == 1 {
		return copy(p, roleFrame), nil
	}
	if b.reads == 2 {
		close(b.h.parked)
	}
	select {
	case <-b.h.release:
	case <-time.After(testkit.Bound):
		return 0, errors.New("the test never released the read")
	}
	return 0, errors.New("connection reset by peer")
}

func (b *heldBody) Close() error { return nil }

// TestGateTimerLosesCommitToDeadline: the chain deadline claims the reply
// while the gate waits in a read, and the gate's timer (on_timeout:
// commit) fires before that read has ended. The timer must not commit:
// the client gets the deadline's degraded reply alone, never a stream's
// head, and the walk ends with the deadline, not with the read's error.
// (fire's lost-commit path: timeout finds the reply claimed, so it stops
// the walk and cancels the hop.)
func TestGateTimerLosesCommitToDeadline(t *testing.T) {
	up := &heldRead{parked: make(chan struct{}), hopEnded: make(chan struct{}), release: make(chan struct{})}
	h := gwtest.NewWith(t, gwtest.Options{
		WrapTransport: func(http.RoundTripper) http.RoundTripper { return up },
	}, `
auth: {mode: none}
channels:
  - {id: a, base_url: "http://held.invalid/v1"}
models:
  - name: m
    chain: [{channel: a, upstream_model: m}]
    policy: {chain_deadline: 3s, stream_gate: {timeout: 5s, on_timeout: commit}}
`)
	gated := h.SpanEnds(telemetry.SpanStreamGate)
	done := h.Async(chat(true))
	testkit.Recv(t, up.parked, "the gate's second read")
	h.WaitArmed(5 * time.Second) // the gate's timer

	h.Clock.Advance(3 * time.Second) // the chain deadline claims the reply and ends the hop...
	testkit.Recv(t, up.hopEnded, "the hop's end")
	select {
	case r := <-done:
		t.Fatalf("replied while the hop's read was still parked: %d %q", r.Status, r.Body)
	default:
	}
	h.Clock.Advance(2 * time.Second) // ...whose read has not returned when the gate's timer fires
	testkit.Recv(t, gated, "the gate's decision")
	close(up.release)

	r := testkit.Recv(t, done, "the reply")
	if r.Status != http.StatusServiceUnavailable || !strings.Contains(r.Body, `"code":"engine_overloaded"`) {
		t.Fatalf("%d %q: want the deadline's degraded reply", r.Status, r.Body)
	}
	if strings.Contains(r.Body, "chat.completion.chunk") || strings.Contains(r.Body, "data:") {
		t.Fatalf("the lost commit reached the client: %q", r.Body)
	}
	if p, a := r.Header.Get("X-Hopgate-Path"), r.Header.Get("X-Hopgate-Attempts"); p != "a:deadline" || a != "1" {
		t.Fatalf("path %q attempts %s, want a:deadline, 1", p, a)
	}
	var outcomes []string
	testkit.Eventually(t, func() bool {
		if err := h.Tel.TracerProvider.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
		outcomes = spanValues(h.Spans.GetSpans(), telemetry.AttrOutcome, func(s *tracetest.SpanStub) bool { return strings.HasPrefix(s.Name, telemetry.SpanDispatch) })
		return len(outcomes) > 0
	}, "the trace exported")
	if len(outcomes) != 1 || outcomes[0] != telemetry.OutcomeDeadline {
		t.Fatalf("dispatch outcomes %q, want [%s]", outcomes, telemetry.OutcomeDeadline)
	}
}
