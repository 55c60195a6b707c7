package dispatch_test

import (
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// TestTrustInboundTrace: by default a client's traceparent is continued
// (its trace id is the request id); with telemetry.trust_inbound_trace:
// false a public endpoint starts its own trace per request, linked to the
// client's, so a client cannot choose trace ids.
func TestTrustInboundTrace(t *testing.T) {
	const clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	tp := "00-" + clientTrace + "-00f067aa0ba902b7-01"
	for _, trust := range []bool{true, false} {
		extra := ""
		if !trust {
			extra = "telemetry: {trust_inbound_trace: false}\n"
		}
		h := gwtest.New(t, extra+twoChannels("m", "m", ""), "a", "b")
		r := h.PostCtx(t.Context(), chat(false), map[string]string{"Traceparent": tp})
		id := r.Header.Get("X-Request-Id")
		if r.Status != 200 || len(id) != 32 {
			t.Fatalf("trust=%v: status %d request id %q", trust, r.Status, id)
		}
		if trust != (id == clientTrace) {
			t.Fatalf("trust=%v: request id %q, client's trace %s", trust, id, clientTrace)
		}
		var root bool
		for _, s := range serverSpanOf(h, id) {
			root = true
			linked := len(s.Links) == 1 && s.Links[0].SpanContext.TraceID().String() == clientTrace
			if !trust && !linked {
				t.Fatalf("untrusted: the server span does not link the client's trace: %+v", s.Links)
			}
			if trust && s.Parent.TraceID().String() != clientTrace {
				t.Fatalf("trusted: the server span's parent is %v", s.Parent)
			}
		}
		if !root {
			t.Fatalf("trust=%v: no server span", trust)
		}
		for _, req := range h.Ups["a"].Log() {
			if got := req.Header.Get("Traceparent"); len(got) < 35 || got[3:35] != id {
				t.Fatalf("trust=%v: upstream traceparent %q, want the request's trace %s", trust, got, id)
			}
		}
	}
}

// serverSpanOf waits for the SERVER span of trace id (it ends after the
// handler returns, which the client can beat) and returns it.
func serverSpanOf(h *gwtest.Gateway, id string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range h.Trace(id) {
		if s.SpanKind == trace.SpanKindServer {
			out = append(out, s)
		}
	}
	return out
}
