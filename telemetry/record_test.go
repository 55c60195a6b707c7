package telemetry

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/internal/otlpwire"
)

// recordedRequest plays one request through tel's recorder the way the
// engine does (a SERVER span, dispatch, one hop with "await headers"),
// failing the hop when failHop; it returns the trace id and the span id
// the hop's context carried (what traceparent sends upstream).
func recordedRequest(tel *Telemetry, failHop bool) (trace.TraceID, trace.SpanID) {
	ctx, server := tel.Tracer.Start(context.Background(), SpanServer, trace.WithSpanKind(trace.SpanKindServer))
	cctx, call := tel.Spans.StartCall(ctx, "m")
	hctx, hop := tel.Spans.StartHop(cctx, &HopStart{Operation: OperationChat, Provider: "openai", RequestModel: "m",
		Channel: "a", ChannelRegion: "r", BaseURL: "http://127.0.0.1:1/v1", Path: "/chat/completions"})
	hop.AwaitHeaders(hctx).Arrived()
	end := &CallEnd{Model: "m", Chain: "a", Hops: 1, Outcome: OutcomeOK, Path: "a:ok", ServedModel: "m"}
	if failHop {
		hop.Error(errors.New("upstream said no"))
		hop.End(&HopEnd{Outcome: HopFinal, Status: 400, ErrorType: "400"})
		end.Outcome, end.Path, end.ServedModel = OutcomeFinalError, "a:400", ""
	} else {
		hop.End(&HopEnd{Outcome: HopOK, Status: 200, ResponseModel: "m", Usage: true, InputTokens: 1, OutputTokens: 2})
	}
	call.End(ctx, end)
	server.End()
	return server.SpanContext().TraceID(), trace.SpanContextFromContext(hctx).SpanID()
}

// With a healthy ratio of one half, a healthy request's trace is exported
// whole exactly when the ratio's trace-id arithmetic keeps it (the
// exemplar filter's), and not at all otherwise; an interesting one always
// is. The exported hop span has the id its context carried before the
// decision, so traceparent and the exported trace agree.
func TestRecordExportedOnlyWhenKept(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tel := setupTest(t, Options{HealthyRatio: 0.5, SpanExporter: exp, Clock: clockwork.NewFakeClock()})
	if tel.Spans.sink == nil {
		t.Fatal("compact recording is off")
	}
	type req struct {
		hop  trace.SpanID
		keep bool
	}
	reqs := map[trace.TraceID]req{}
	ratio := newHealthyRatio(0.5)
	kept := 0
	for i := range 200 {
		fail := i%10 == 0
		id, hop := recordedRequest(tel, fail)
		keep := fail || ratio.keep(id)
		if keep {
			kept++
		}
		reqs[id] = req{hop, keep}
	}
	if kept < 80 || kept > 140 {
		t.Fatalf("%d of 200 traces kept at a healthy ratio of 0.5 (20 failed)", kept)
	}
	if err := tel.TracerProvider.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := map[trace.TraceID][]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.SpanContext.TraceID()] = append(spans[s.SpanContext.TraceID()], s)
	}
	for id, r := range reqs {
		got := spans[id]
		if !r.keep {
			if len(got) != 0 {
				t.Fatalf("trace %s dropped by the ratio exported %d spans", id, len(got))
			}
			continue
		}
		if len(got) != 4 {
			t.Fatalf("kept trace %s exported %d spans, want server, dispatch, hop, await headers", id, len(got))
		}
		found := false
		for _, s := range got {
			if s.SpanKind == trace.SpanKindClient && s.SpanContext.SpanID() == r.hop {
				found = true
			}
		}
		if !found {
			t.Fatalf("trace %s: no exported hop span has the id its context carried", id)
		}
	}
}

// The ring gets a kept interesting trace whole when spans are recorded
// compactly, with or without an exporter behind the sampler.
func TestRecordReachesTraceRing(t *testing.T) {
	for _, exporter := range []bool{true, false} {
		o := Options{HealthyRatio: 0.1}
		if exporter {
			o.SpanExporter = tracetest.NewInMemoryExporter()
		}
		tel := setupTest(t, o)
		id, _ := recordedRequest(tel, true)
		rec := tel.Traces.Get(id)
		if rec == nil || len(rec.Spans) != 4 || rec.Outcome != OutcomeFinalError {
			t.Fatalf("exporter %v: ring holds %+v", exporter, rec)
		}
	}
}

// BenchmarkRequestSpans is the span work of one healthy request (SERVER
// span, dispatch, hop, await headers; export to a discarding exporter):
// compact records at a healthy ratio of 0 (dropped) and 1 (kept, built and
// exported), and SDK spans from the start (PlainSpans) at both.
func BenchmarkRequestSpans(b *testing.B) {
	for _, bc := range []struct {
		name  string
		ratio float64
		plain bool
	}{
		{"compact/dropped", 0, false},
		{"compact/kept", 1, false},
		{"sdk/dropped", 0, true},
		{"sdk/kept", 1, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tel := setupTest(b, Options{HealthyRatio: bc.ratio, SpanExporter: discardExporter{}, PlainSpans: bc.plain})
			b.ReportAllocs()
			for b.Loop() {
				recordedRequest(tel, false)
			}
		})
	}
}

type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// Span times follow the engine's clock (a hop that waited 10 s on a fake
// clock lasts exactly 10 s) but are placed from the wall clock at the
// record's start, so they sit with their otelhttp SERVER span, whose times
// are the SDK's, even when the engine's clock is fake.
func TestRecordTimesFromEngineClock(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 5, 12, 9, 41, 30, 0, time.UTC))
	tel := setupTest(t, Options{HealthyRatio: 1, SpanExporter: exp, Clock: clock})
	ctx, server := tel.Tracer.Start(context.Background(), SpanServer, trace.WithSpanKind(trace.SpanKindServer))
	cctx, call := tel.Spans.StartCall(ctx, "m")
	_, hop := tel.Spans.StartHop(cctx, &HopStart{Operation: OperationChat, RequestModel: "m", Channel: "a"})
	clock.Advance(10 * time.Second)
	hop.End(&HopEnd{Outcome: HopOK})
	call.End(ctx, &CallEnd{Model: "m", Outcome: OutcomeOK, Path: "a:ok"})
	server.End()
	if err := tel.TracerProvider.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var root, hopSpan tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		switch s.SpanKind {
		case trace.SpanKindServer:
			root = s
		case trace.SpanKindClient:
			hopSpan = s
		}
	}
	if d := hopSpan.EndTime.Sub(hopSpan.StartTime); d != 10*time.Second {
		t.Errorf("hop lasted %v on the engine's clock, want 10s", d)
	}
	if off := hopSpan.StartTime.Sub(root.StartTime); off < 0 || off > time.Minute {
		t.Errorf("hop starts %v after its SERVER span: not placed on the wall clock", off)
	}
}

// When every trace is kept (healthy ratio 1) a record's spans go on as the
// dispatch span ends: the ring collects them for the root's decision, and
// an errored span among them makes the trace interesting although the
// request's outcome is ok (a failed hop hidden behind a healthy-looking
// root: the decision counter and the ring must still see it).
func TestRecordKeepAllFeedsRingAndDecision(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tel := setupTest(t, Options{HealthyRatio: 1, SpanExporter: exp})
	if tel.Spans.sink == nil || !tel.sampler.all {
		t.Fatal("want compact records behind a keep-all sampler")
	}
	request := func(hopErr bool) trace.TraceID {
		ctx, server := tel.Tracer.Start(context.Background(), SpanServer, trace.WithSpanKind(trace.SpanKindServer))
		cctx, call := tel.Spans.StartCall(ctx, "m")
		hctx, hop := tel.Spans.StartHop(cctx, &HopStart{Operation: OperationChat, Provider: "openai", RequestModel: "m",
			Channel: "a", ChannelRegion: "r", BaseURL: "http://127.0.0.1:1/v1", Path: "/chat/completions"})
		hop.AwaitHeaders(hctx).Arrived()
		end := &HopEnd{Outcome: HopOK, Status: 200, ResponseModel: "m"}
		if hopErr {
			hop.Error(errors.New("upstream said no"))
			end.Failed, end.Label = true, "stream_error"
		}
		hop.End(end)
		call.End(ctx, &CallEnd{Model: "m", Chain: "a", Hops: 1, Outcome: OutcomeOK, Path: "a:ok", ServedModel: "m"})
		server.End()
		return server.SpanContext().TraceID()
	}
	healthy := request(false)
	errored := request(true)
	if got := tel.sampler.counts.interesting.Load(); got != 1 {
		t.Errorf("%d interesting decisions, want 1 (the errored hop)", got)
	}
	if got := tel.sampler.counts.healthyKept.Load(); got != 1 {
		t.Errorf("%d healthy kept, want 1", got)
	}
	if rec := tel.Traces.Get(errored); rec == nil || len(rec.Spans) != 4 {
		t.Errorf("ring holds %+v for the errored trace, want its 4 spans", rec)
	}
	if rec := tel.Traces.Get(healthy); rec != nil {
		t.Errorf("ring holds the healthy trace: %+v", rec)
	}
	if err := tel.TracerProvider.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 8 {
		t.Errorf("%d spans exported, want 8 (both traces whole)", n)
	}
}

// A record that would overflow its trace's buffer goes on at once, whole,
// like SDK spans that overflow (TestFailoverProcessorOverflow), and is
// counted; one that just fits is held and, healthy at ratio 0, dropped.
func TestRecordOverflow(t *testing.T) {
	for _, tc := range []struct {
		max, exported int
		overflow      int64
	}{
		{max: 2, exported: 4, overflow: 3}, // the record's 3 spans do not fit: they and the root go on
		{max: 3, exported: 0, overflow: 0}, // they fit: held, then dropped with the healthy trace
	} {
		exp := tracetest.NewInMemoryExporter()
		tel := setupTest(t, Options{HealthyRatio: 0, SpanExporter: exp})
		tel.sampler.maxSpansPerTrace = tc.max
		recordedRequest(tel, false)
		if err := tel.TracerProvider.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n, o := len(exp.GetSpans()), tel.sampler.counts.overflow.Load(); n != tc.exported || o != tc.overflow {
			t.Errorf("max %d spans per trace: %d exported, overflow %d; want %d and %d", tc.max, n, o, tc.exported, tc.overflow)
		}
	}
}

// A record that reaches the sampler after its trace's root was kept (the
// SERVER span ended first) goes on at once, like a late SDK span
// (TestFailoverProcessorLateSpans), and joins the trace in the ring; after
// a dropped root it goes nowhere.
func TestRecordAfterRootFollowsDecision(t *testing.T) {
	for _, tc := range []struct {
		name      string
		attrs     []attribute.KeyValue
		exported  int // spans, root included
		ringSpans int // 0: the ring holds no such trace
	}{
		{"after kept root", failoverAttrs, 3, 3},
		{"after dropped root", healthyAttrs, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			tel := setupTest(t, Options{HealthyRatio: 0, SpanExporter: exp})
			ctx, server := tel.Tracer.Start(context.Background(), SpanServer, trace.WithSpanKind(trace.SpanKindServer))
			cctx, call := tel.Spans.StartCall(ctx, "m")
			_, hop := tel.Spans.StartHop(cctx, &HopStart{Operation: OperationChat, Provider: "openai", RequestModel: "m",
				Channel: "a", ChannelRegion: "r", BaseURL: "http://127.0.0.1:1/v1", Path: "/chat/completions"})
			hop.End(&HopEnd{Outcome: HopOK, Status: 200, ResponseModel: "m"})
			server.SetAttributes(tc.attrs...)
			server.End() // the root is decided before the record arrives
			call.End(context.Background(), &CallEnd{Model: "m", Chain: "a", Hops: 1, Outcome: OutcomeOK, Path: "a:ok", ServedModel: "m"})
			id := server.SpanContext().TraceID()

			if err := tel.TracerProvider.ForceFlush(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := len(exp.GetSpans()); n != tc.exported {
				t.Errorf("%d spans exported, want %d", n, tc.exported)
			}
			rec := tel.Traces.Get(id)
			if tc.ringSpans == 0 {
				if rec != nil {
					t.Errorf("ring holds %+v, want nothing", rec)
				}
				return
			}
			if rec == nil || len(rec.Spans) != tc.ringSpans {
				t.Fatalf("ring holds %+v, want %d spans", rec, tc.ringSpans)
			}
			if !slices.Contains(rec.Channels, "a") {
				t.Errorf("ring trace channels %v, want the hop's channel a", rec.Channels)
			}
		})
	}
}

// setupTest sets telemetry up with o and no environment (no OTEL_*
// variable of the machine running the test); it is shut down when tb ends.
func setupTest(tb testing.TB, o Options) *Telemetry {
	tb.Helper()
	o.Getenv = func(string) string { return "" }
	tel, err := Setup(context.Background(), o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return tel
}

// Why: otlpwire's encoder reads a kept record's attributes through
// AppendAttributes, into a buffer of its own, so that exporting a trace
// allocates no attribute slice. The bytes must be those of the same spans
// read through Attributes, and encoding them again with the encoder's
// buffers grown must allocate nothing.
func TestRecordAttributesAppendedForExport(t *testing.T) {
	exp := &keepExporter{}
	tel := setupTest(t, Options{HealthyRatio: 1, SpanExporter: exp})
	healthy, _ := recordedRequest(tel, false)
	recordedRequest(tel, true) // interesting: the trace ring reads its attributes
	if err := tel.TracerProvider.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var views []sdktrace.ReadOnlySpan
	for _, s := range exp.spans {
		if _, ok := s.(*spanRec); ok {
			views = append(views, s)
		}
	}
	if len(views) != 6 {
		t.Fatalf("%d compact spans exported, want 6 (two of dispatch, hop, await headers)", len(views))
	}
	var e otlpwire.Encoder
	got := e.Append(nil, views)
	var healthyViews []sdktrace.ReadOnlySpan
	for _, s := range views {
		if s.SpanContext().TraceID() == healthy {
			healthyViews = append(healthyViews, s)
		}
	}
	buf := e.Append(nil, healthyViews)
	if n := testing.AllocsPerRun(20, func() { buf = e.Append(buf[:0], healthyViews) }); n != 0 {
		t.Errorf("encoding a healthy record's spans allocates %.0f times, want 0", n)
	}
	// The same spans without AppendAttributes: read through Attributes.
	plain := make([]sdktrace.ReadOnlySpan, len(views))
	for i, s := range views {
		plain[i] = struct{ sdktrace.ReadOnlySpan }{s}
	}
	want := e.Append(nil, plain)
	if !bytes.Equal(got, want) {
		t.Fatalf("encodings differ: %d bytes appended, %d through Attributes", len(got), len(want))
	}
	if !bytes.Contains(got, []byte(AttrChannel)) || !bytes.Contains(got, []byte("a:400")) {
		t.Fatal("the encoding lacks the hop's channel or the failover path")
	}
}

// keepExporter keeps the spans it is handed, as they are.
type keepExporter struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

func (k *keepExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.spans = append(k.spans, spans...)
	return nil
}

func (*keepExporter) Shutdown(context.Context) error { return nil }

// Why: once CallSpan.End hands the record on, exporters read it from
// their own goroutines, lazily; a second End must change nothing (as a
// second End of an SDK span does nothing): the exported dispatch span
// keeps the first End's outcome and path, once.
func TestCallEndTwiceKeepsTheFirst(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tel := setupTest(t, Options{HealthyRatio: 1, SpanExporter: exp})
	ctx, server := tel.Tracer.Start(context.Background(), SpanServer, trace.WithSpanKind(trace.SpanKindServer))
	_, call := tel.Spans.StartCall(ctx, "m")
	call.End(ctx, &CallEnd{Model: "m", Chain: "a", Outcome: OutcomeOK, Path: "a:ok", ServedModel: "m"})
	call.End(ctx, &CallEnd{Model: "m", Chain: "a", Outcome: OutcomeExhausted, Path: "a:503"})
	server.End()
	if err := tel.TracerProvider.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range exp.GetSpans() {
		if s.Name != SpanDispatch+" m" {
			continue
		}
		for _, kv := range s.Attributes {
			if kv.Key == AttrOutcome || kv.Key == AttrFailoverPath {
				got = append(got, string(kv.Key)+"="+kv.Value.Emit())
			}
		}
	}
	slices.Sort(got)
	if want := []string{AttrFailoverPath + "=a:ok", AttrOutcome + "=" + OutcomeOK}; !slices.Equal(got, want) {
		t.Fatalf("exported dispatch span(s) say %q, want %q: the first End's, once", got, want)
	}
}
