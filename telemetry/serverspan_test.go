package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// compactPair is a handler behind ServerHandler twice: with SDK SERVER
// spans and with compact ones (serverRecorder), each provider recording
// what its processors see.
type compactPair struct {
	sdk, compact   http.Handler
	sdkR, compactR *tracetest.SpanRecorder
	extra          *tracetest.SpanRecorder // registered after setup, on the compact side
}

func newCompactPair(t *testing.T, h http.Handler, sampler sdktrace.Sampler, public bool) *compactPair {
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	p := &compactPair{sdkR: tracetest.NewSpanRecorder(), compactR: tracetest.NewSpanRecorder(), extra: tracetest.NewSpanRecorder()}
	sdkTP := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(p.sdkR))
	cTP := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(p.compactR))
	t.Cleanup(func() { _ = sdkTP.Shutdown(context.Background()); _ = cTP.Shutdown(context.Background()) })
	// The identity a sampling provider would read (Setup makes no compact
	// spans when the sampler records nothing; the never case still checks
	// that nothing is recorded).
	idTP := sdktrace.NewTracerProvider()
	res, scope, ok := spanIdentity(idTP.Tracer(ScopeName))
	if !ok {
		t.Fatal("no span identity")
	}
	pub := func() bool { return public }
	p.sdk = (&Telemetry{Tracer: sdkTP.Tracer(ScopeName), Propagator: prop, TracerProvider: sdkTP}).ServerHandler(h, pub)
	ct := &Telemetry{Tracer: cTP.Tracer(ScopeName), Propagator: prop, TracerProvider: cTP,
		server: &serverRecorder{sampler: sampler, proc: p.compactR, tp: cTP, res: res, scope: scope, limits: sdktrace.NewSpanLimits()}}
	ct.RegisterSpanProcessor(p.extra)
	p.compact = ct.ServerHandler(h, pub)
	return p
}

// fullView is everything an exporter reads of a span but its ids and
// times.
func fullView(s sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s [%s] status=%v %q parent-valid=%v remote=%v sampled=%v tracestate=%q scope=%v res=%s dropped=%d/%d/%d\n",
		s.Name(), s.SpanKind(), s.Status().Code, s.Status().Description, s.Parent().IsValid(), s.Parent().IsRemote(),
		s.SpanContext().IsSampled(), s.SpanContext().TraceState().String(), s.InstrumentationScope(), s.Resource().Encoded(attribute.DefaultEncoder()),
		s.DroppedAttributes(), s.DroppedEvents(), s.DroppedLinks())
	for _, kv := range s.Attributes() { // in order: position matters
		fmt.Fprintf(&b, "  %s=%s (%s)\n", kv.Key, kv.Value.Emit(), kv.Value.Type())
	}
	for _, l := range s.Links() {
		fmt.Fprintf(&b, "  link %s %s remote=%v\n", l.SpanContext.TraceID(), l.SpanContext.SpanID(), l.SpanContext.IsRemote())
	}
	for _, e := range s.Events() {
		fmt.Fprintf(&b, "  event %s\n", e.Name)
		for _, kv := range e.Attributes {
			fmt.Fprintf(&b, "    %s=%s\n", kv.Key, kv.Value.Emit())
		}
	}
	return b.String()
}

// TestCompactServerSpanMatchesSDK holds the compact SERVER span to the SDK
// span ServerHandler made before, on the same requests and the same calls
// on the span: attributes in order (duplicates resolved as the SDK does,
// also past the count limit), status precedence, events, the trace state, the exception event of a panicking handler,
// links of a public endpoint, parents, sampling, scope and resource; and
// it reaches processors registered after setup.
func TestCompactServerSpanMatchesSDK(t *testing.T) {
	const incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		span := trace.SpanFromContext(r.Context())
		switch r.URL.Query().Get("do") {
		case "outcome":
			span.SetAttributes(attribute.String(AttrOutcome, "failover_ok"), attribute.String(AttrModel, "m"))
			span.SetAttributes(attribute.String(AttrOutcome, "ok"), attribute.KeyValue{}, attribute.Bool(AttrTimedOut, true))
			span.SetStatus(codes.Error, "first")
			span.SetStatus(codes.Unset, "ignored")
			span.SetStatus(codes.Error, "second")
			_, _ = w.Write([]byte("ok"))
		case "events":
			span.AddEvent(EventWalletDenied, trace.WithAttributes(attribute.String(AttrWalletReason, "no_wallet")))
			span.RecordError(errors.New("boom"))
			span.RecordError(nil)
			span.SetStatus(codes.Ok, "not kept")
			span.SetStatus(codes.Error, "too late")
			w.WriteHeader(http.StatusPaymentRequired)
		case "5xx":
			span.SetStatus(codes.Error, "engine_overloaded")
			w.WriteHeader(http.StatusServiceUnavailable)
		case "many":
			// Past the attribute count limit: duplicates still replace, new keys are dropped.
			for i := range 130 {
				span.SetAttributes(attribute.Int(fmt.Sprintf("k%d", i), i))
			}
			span.SetAttributes(attribute.String(AttrOutcome, "late"), attribute.Int("k0", -1))
		case "abort":
			_, _ = w.Write([]byte("part"))
			panic(http.ErrAbortHandler)
		}
	})
	cases := []struct {
		name, query, traceparent string
		tracestate               string
		public                   bool
		sampler                  sdktrace.Sampler
	}{
		{name: "root", query: "do=outcome", sampler: sdktrace.ParentBased(sdktrace.AlwaysSample())},
		{name: "child of the client", query: "do=outcome", traceparent: incoming, tracestate: "vendor=v1", sampler: sdktrace.ParentBased(sdktrace.AlwaysSample())},
		{name: "over the attribute limit", query: "do=many", sampler: sdktrace.ParentBased(sdktrace.AlwaysSample())},
		{name: "public", query: "do=events", traceparent: incoming, public: true, sampler: sdktrace.ParentBased(sdktrace.AlwaysSample())},
		{name: "public, no traceparent", query: "do=5xx", public: true, sampler: sdktrace.ParentBased(sdktrace.AlwaysSample())},
		// The client's unsampled flag is not the sampler's parent either.
		{name: "public, unsampled client", query: "do=outcome", traceparent: unsampled, public: true, sampler: sdktrace.ParentBased(sdktrace.AlwaysSample())},
		{name: "abort", query: "do=abort", sampler: sdktrace.ParentBased(sdktrace.AlwaysSample())},
		{name: "unsampled parent", query: "do=outcome", traceparent: unsampled, sampler: sdktrace.ParentBased(sdktrace.AlwaysSample())},
		{name: "never", query: "do=outcome", sampler: sdktrace.NeverSample()},
		// The client's trace id decides (a public endpoint's would be random).
		{name: "ratio, kept", query: "do=outcome", traceparent: "00-00000000000000000000000000000001-00f067aa0ba902b7-01", sampler: sdktrace.TraceIDRatioBased(0.5)},
		{name: "ratio, dropped", query: "do=outcome", traceparent: "00-ffffffffffffffffffffffffffffffff-00f067aa0ba902b7-01", sampler: sdktrace.TraceIDRatioBased(0.5)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newCompactPair(t, handler, c.sampler, c.public)
			for _, h := range []http.Handler{p.sdk, p.compact} {
				r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions?"+c.query, strings.NewReader(`{"model":"m"}`))
				r.Pattern = "POST /v1/chat/completions"
				if c.traceparent != "" {
					r.Header.Set("Traceparent", c.traceparent)
					r.Header.Set("Tracestate", c.tracestate)
				}
				body := r.Body
				func() {
					defer func() {
						// The handler's panic goes on past the span's End.
						if v := recover(); v != nil && v != http.ErrAbortHandler || (v != nil) != (c.query == "do=abort") {
							t.Errorf("panic %v", v)
						}
					}()
					h.ServeHTTP(httptest.NewRecorder(), r)
				}()
				if r.Body != body {
					t.Errorf("request body not restored: %T", r.Body)
				}
			}
			sdk, compact := p.sdkR.Ended(), p.compactR.Ended()
			if len(sdk) != len(compact) {
				t.Fatalf("SDK ended %d spans, compact %d", len(sdk), len(compact))
			}
			if len(compact) != len(p.extra.Ended()) {
				t.Errorf("a processor registered after setup saw %d of %d", len(p.extra.Ended()), len(compact))
			}
			for i := range sdk {
				if a, b := fullView(sdk[i]), fullView(compact[i]); a != b {
					t.Errorf("SERVER spans differ\nSDK:\n%s\ncompact:\n%s", a, b)
				}
				if c.traceparent != "" && !c.public && sdk[i].SpanContext().TraceID() != compact[i].SpanContext().TraceID() {
					t.Errorf("trace ids differ under a parent")
				}
				if !compact[i].EndTime().After(compact[i].StartTime()) && !compact[i].EndTime().Equal(compact[i].StartTime()) {
					t.Errorf("ends before it starts")
				}
			}
		})
	}
}

// TestCompactServerSpanContexts: what the handler's context carries when
// the SERVER span is compact: a local span context, sampled as the head
// sampler says, the client's trace id under a trusted parent.
func TestCompactServerSpanContexts(t *testing.T) {
	parentBased := sdktrace.ParentBased(sdktrace.AlwaysSample())
	for _, c := range []struct {
		traceparent string
		sampler     sdktrace.Sampler
		sampled     bool
		sameTrace   bool
	}{
		{"", parentBased, true, false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", parentBased, true, true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", parentBased, false, true},
		// A sampled parent the head sampler drops: the flag is cleared.
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", sdktrace.NeverSample(), false, true},
	} {
		var got trace.SpanContext
		p := newCompactPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got = trace.SpanContextFromContext(r.Context())
		}), c.sampler, false)
		r := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
		if c.traceparent != "" {
			r.Header.Set("Traceparent", c.traceparent)
		}
		p.compact.ServeHTTP(httptest.NewRecorder(), r)
		if !got.IsValid() || got.IsRemote() || got.IsSampled() != c.sampled ||
			(got.TraceID().String() == "4bf92f3577b34da6a3ce929d0e0e4736") != c.sameTrace ||
			got.SpanID().String() == "00f067aa0ba902b7" {
			t.Errorf("traceparent %q: context %+v", c.traceparent, got)
		}
		if rec := trace.SpanFromContext(r.Context()); rec.IsRecording() {
			t.Errorf("the incoming request's context changed")
		}
		if slices.ContainsFunc(p.compactR.Ended(), func(s sdktrace.ReadOnlySpan) bool { return !s.SpanContext().IsSampled() }) {
			t.Errorf("an unsampled span reached the processor")
		}
	}
}

// TestCompactServerSpanEndsOnce: a span ended by the handler and again by
// ServerHandler reaches each processor once, and calls from another
// goroutine, racing the end or coming after it, change nothing once it has
// ended (run with -race).
func TestCompactServerSpanEndsOnce(t *testing.T) {
	var late trace.Span
	p := newCompactPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		span := trace.SpanFromContext(r.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			span.SetAttributes(attribute.String(AttrModel, "m"))
			span.AddEvent(EventWalletDenied)
		}()
		span.End()
		<-done
		late = span
	}), sdktrace.ParentBased(sdktrace.AlwaysSample()), false)
	p.compact.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/v1/models", nil))
	late.SetAttributes(attribute.String(AttrOutcome, "late"))
	late.SetStatus(codes.Error, "late")
	late.End()
	if n, m := len(p.compactR.Ended()), len(p.extra.Ended()); n != 1 || m != 1 {
		t.Fatalf("ended %d times (registered processor: %d), want once", n, m)
	}
	s := p.compactR.Ended()[0]
	if s.Status().Code != codes.Unset || slices.ContainsFunc(s.Attributes(), func(kv attribute.KeyValue) bool { return kv.Key == AttrOutcome }) {
		t.Errorf("changed after End: status %v, attributes %v", s.Status(), s.Attributes())
	}
	if late.IsRecording() {
		t.Error("recording after End")
	}
}
