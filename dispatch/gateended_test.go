package dispatch_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// goneBetweenFrames answers every request with a stream whose first read
// brings two frames at once, a role chunk (held) and a content chunk
// (decisive), and returns them only after it made the client leave and
// saw the hop's context end: the second frame is then buffered, read
// without a read that the context's end could interrupt.
type goneBetweenFrames struct{ leave context.CancelFunc }

func (g goneBetweenFrames) RoundTrip(r *http.Request) (*http.Response, error) {
	_ = r.Body.Close()
	return sseResponse(r, &goneBody{ctx: r.Context(), leave: g.leave}), nil
}

type goneBody struct {
	ctx   context.Context
	leave context.CancelFunc
	done  bool
}

// twoFrames is a role chunk (held) and a content chunk (decisive).
const twoFrames = roleFrame + `data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n"

func (b *goneBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	b.done = true
	b.leave()
	select {
	case <-b.ctx.Done():
	case <-time.After(testkit.Bound):
		return 0, errors.New("the hop's context did not end after the client left")
	}
	return copy(p, twoFrames), nil
}

func (b *goneBody) Close() error { return nil }

// TestGateStopsOnBufferedFramesOnceTheHopEnded: when the hop's context
// ends (here the client leaves) while frames are still buffered, the gate
// decides discard_eof before it judges the next one. Judging it would
// commit a stream nobody reads, on a frame read after the hop was over.
func TestGateStopsOnBufferedFramesOnceTheHopEnded(t *testing.T) {
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	h := gwtest.NewWith(t, gwtest.Options{
		WrapTransport: func(http.RoundTripper) http.RoundTripper { return goneBetweenFrames{leave: leave} },
	}, `
auth: {mode: none}
channels:
  - {id: a, base_url: "http://gone.invalid/v1"}
models:
  - {name: m, chain: [{channel: a, upstream_model: m}]}
`)
	gated := h.SpanEnds(telemetry.SpanStreamGate)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.URL+"/v1/chat/completions", strings.NewReader(chat(true)))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := h.Client.Do(req); err == nil {
		_ = resp.Body.Close()
		t.Fatalf("the client left, yet it got a reply: %d", resp.StatusCode)
	}
	testkit.Recv(t, gated, "the gate's decision")
	// The trace is exported once its root ends, after the handler returned.
	var decisions []string
	testkit.Eventually(t, func() bool {
		if err := h.Tel.TracerProvider.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
		decisions = spanValues(h.Spans.GetSpans(), telemetry.AttrGateDecision, func(s *tracetest.SpanStub) bool { return s.Name == telemetry.SpanStreamGate })
		return len(decisions) > 0
	}, "the trace exported")
	if len(decisions) != 1 || decisions[0] != telemetry.GateDiscardEOF {
		t.Fatalf("gate decisions %q, want [%s]: a frame buffered when the hop ended was judged", decisions, telemetry.GateDiscardEOF)
	}
}
