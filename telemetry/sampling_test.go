package telemetry

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// harness wires the failover processor to a span recorder (synchronous, and
// unlike InMemoryExporter it keeps its spans across Shutdown).
type harness struct {
	rec   *tracetest.SpanRecorder
	fp    *failoverProcessor
	tp    *sdktrace.TracerProvider
	clock *clockwork.FakeClock
}

func newHarness(t *testing.T, ratio float64, sampler sdktrace.Sampler) *harness {
	t.Helper()
	h := &harness{rec: tracetest.NewSpanRecorder(), clock: clockwork.NewFakeClock()}
	h.fp = newFailoverProcessor(h.rec, ratio, h.clock)
	if sampler == nil {
		sampler = sdktrace.AlwaysSample()
	}
	h.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.fp), sdktrace.WithSampler(sampler))
	t.Cleanup(func() { _ = h.tp.Shutdown(context.Background()) })
	return h
}

// request simulates one request: a server root with the given attributes, a
// dispatch span and one child per hop (hopErr marks an errored hop span).
func (h *harness) request(ctx context.Context, rootAttrs []attribute.KeyValue, hops int, hopErr bool) trace.TraceID {
	tr := h.tp.Tracer("test")
	ctx, root := tr.Start(ctx, SpanServer, trace.WithSpanKind(trace.SpanKindServer))
	dctx, dispatch := tr.Start(ctx, SpanDispatch)
	for i := range hops {
		_, hop := tr.Start(dctx, "chat m", trace.WithSpanKind(trace.SpanKindClient))
		if hopErr && i == 0 {
			hop.SetStatus(codes.Error, "503")
		}
		hop.End()
	}
	dispatch.End()
	root.SetAttributes(rootAttrs...)
	root.End()
	return root.SpanContext().TraceID()
}

var (
	healthyAttrs  = []attribute.KeyValue{attribute.String(AttrOutcome, OutcomeOK), attribute.String(AttrFailoverPath, "a:ok")}
	failoverAttrs = []attribute.KeyValue{attribute.String(AttrOutcome, OutcomeFailoverOK), attribute.String(AttrFailoverPath, "a:503 -> b:ok")}
)

func TestFailoverProcessorDecisions(t *testing.T) {
	for _, tc := range []struct {
		name   string
		why    string
		ratio  float64
		attrs  []attribute.KeyValue
		hops   int
		hopErr bool
		want   int // spans exported: server + dispatch + hops
	}{
		{"healthy dropped at 0", "the point of the ratio: healthy traces cost nothing at 0", 0, healthyAttrs, 1, false, 0},
		{"healthy kept at 1", "ratio 1 must export everything, unchanged", 1, healthyAttrs, 1, false, 3},
		{"failover kept at 0", "the issue: a failed-over request's trace is always kept", 0, failoverAttrs, 2, false, 4},
		{"child error kept at 0", "an errored hop is worth a trace even if the path reads ok", 0, healthyAttrs, 1, true, 3},
		{"outcome not ok kept", "a final error with a one-step path is still interesting",
			0, []attribute.KeyValue{attribute.String(AttrOutcome, OutcomeFinalError)}, 1, false, 3},
		{"no attributes dropped", "a request the dispatcher never annotated (e.g. /v1/models) is healthy",
			0, nil, 0, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.ratio, nil)
			h.request(context.Background(), tc.attrs, tc.hops, tc.hopErr)
			if got := len(h.rec.Ended()); got != tc.want {
				t.Fatalf("%s: exported %d spans, want %d", tc.why, got, tc.want)
			}
			if traces, spans := h.fp.pending(); traces != 0 || spans != 0 {
				t.Fatalf("buffer not released: %d traces, %d spans", traces, spans)
			}
		})
	}
}

// Spans ending after their root follow the root's decision instead of
// lingering until the stale flush.
func TestFailoverProcessorLateSpans(t *testing.T) {
	for _, tc := range []struct {
		name  string
		attrs []attribute.KeyValue
		want  int
	}{
		{"after dropped root", healthyAttrs, 0},
		{"after kept root", failoverAttrs, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 0, nil)
			tr := h.tp.Tracer("test")
			ctx, root := tr.Start(context.Background(), SpanServer)
			_, late := tr.Start(ctx, "chat m")
			root.SetAttributes(tc.attrs...)
			root.End()
			late.End()
			if got := len(h.rec.Ended()); got != tc.want {
				t.Fatalf("exported %d, want %d", got, tc.want)
			}
			if traces, _ := h.fp.pending(); traces != 0 {
				t.Fatalf("late span buffered: %d traces pending", traces)
			}
		})
	}
}

// A server span continuing a remote parent (a caller's traceparent) is the
// local root: the decision must not wait for a parent that never ends here.
func TestFailoverProcessorRemoteParentIsRoot(t *testing.T) {
	h := newHarness(t, 0, nil)
	remote := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	h.request(trace.ContextWithRemoteSpanContext(context.Background(), remote), failoverAttrs, 2, false)
	if got := len(h.rec.Ended()); got != 4 {
		t.Fatalf("exported %d spans, want 4", got)
	}
}

// The head sampler runs first: a trace it did not sample is never exported,
// even when interesting. Only always_off reaches here as a "no" (an explicit
// opt-out); ratio samplers are moved to the tail (TestRatioSamplerKeepsFailovers).
func TestFailoverProcessorRespectsHeadSampler(t *testing.T) {
	h := newHarness(t, 1, sdktrace.NeverSample())
	h.request(context.Background(), failoverAttrs, 2, true)
	if got := len(h.rec.Ended()); got != 0 {
		t.Fatalf("exported %d spans of an unsampled trace", got)
	}
}

// Overflow forwards instead of dropping, keeps the trace whole, and counts.
func TestFailoverProcessorOverflow(t *testing.T) {
	t.Run("spans per trace", func(t *testing.T) {
		h := newHarness(t, 0, nil)
		h.fp.maxSpansPerTrace = 2
		h.request(context.Background(), healthyAttrs, 4, false) // dispatch + 4 hops buffered > 2
		if got := len(h.rec.Ended()); got != 6 {
			t.Fatalf("exported %d spans, want all 6 (overflowed trace stays whole)", got)
		}
		if h.fp.counts.overflow.Load() == 0 {
			t.Fatal("overflow not counted")
		}
	})
	t.Run("traces", func(t *testing.T) {
		h := newHarness(t, 0, nil)
		h.fp.maxTraces = 1
		tr := h.tp.Tracer("test")
		ctx1, root1 := tr.Start(context.Background(), SpanServer)
		_, c1 := tr.Start(ctx1, "a")
		c1.End() // buffers trace 1
		ctx2, root2 := tr.Start(context.Background(), SpanServer)
		_, c2 := tr.Start(ctx2, "b")
		c2.End() // no room: forwarded at once
		if got := len(h.rec.Ended()); got != 1 || h.rec.Ended()[0].Name() != "b" {
			t.Fatalf("exported %v, want the overflowing span b", h.rec.Ended())
		}
		if got := h.fp.counts.overflow.Load(); got != 1 {
			t.Fatalf("overflow count %d, want 1", got)
		}
		root1.End()
		root2.End()
	})
	t.Run("total spans", func(t *testing.T) {
		h := newHarness(t, 0, nil)
		h.fp.maxSpansTotal = 1
		h.request(context.Background(), healthyAttrs, 2, false)
		if got := len(h.rec.Ended()); got != 4 {
			t.Fatalf("exported %d spans, want 4", got)
		}
	})
}

// A trace whose root never ends locally is flushed after maxAge (kept, since
// its health is unknown), and its later spans follow.
func TestFailoverProcessorStaleFlush(t *testing.T) {
	h := newHarness(t, 0, nil)
	tr := h.tp.Tracer("test")
	ctx, root := tr.Start(context.Background(), SpanServer)
	_, c := tr.Start(ctx, "chat m")
	c.End()
	h.clock.Advance(defaultMaxTraceAge - time.Second)
	if err := h.fp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := len(h.rec.Ended()); got != 0 {
		t.Fatalf("flushed %d spans before maxAge", got)
	}
	h.clock.Advance(2 * time.Second)
	if err := h.fp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := len(h.rec.Ended()); got != 1 {
		t.Fatalf("flushed %d spans after maxAge, want 1", got)
	}
	root.SetAttributes(healthyAttrs...)
	root.End()
	if got := len(h.rec.Ended()); got != 2 {
		t.Fatalf("root of a flushed trace not forwarded: %d spans", got)
	}
	if h.fp.counts.stale.Load() != 1 {
		t.Fatal("stale flush not counted")
	}
}

// Shutdown exports in-flight traces rather than losing them.
func TestFailoverProcessorShutdownFlushes(t *testing.T) {
	h := newHarness(t, 0, nil)
	tr := h.tp.Tracer("test")
	ctx, root := tr.Start(context.Background(), SpanServer)
	_, c := tr.Start(ctx, "chat m")
	c.End()
	if err := h.tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := len(h.rec.Ended()); got != 1 {
		t.Fatalf("exported %d spans at shutdown, want 1", got)
	}
	root.End()
}

// The healthy ratio is a deterministic function of the trace id, like
// TraceIDRatioBased, so the exemplar filter and the processor agree.
func TestKeepHealthyDeterministic(t *testing.T) {
	h := newHealthyRatio(0.5)
	lo := trace.TraceID{8: 0x00, 15: 1}
	hi := trace.TraceID{8: 0xff, 15: 1}
	if !h.keep(lo) || h.keep(hi) {
		t.Fatal("ratio 0.5 must keep a low trace id and drop a high one")
	}
}

// healthyRatio decides as the SDK's TraceIDRatioBased sampler does, for
// every ratio (the edges included) and ids around each bound, so a head
// ratio and a healthy ratio compose as documented.
func TestHealthyRatioMatchesSDK(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, ratio := range []float64{-1, 0, 1e-9, 0.001, 0.1, 0.25, 0.5, 0.75, 0.999999, 1, 2} {
		sdk := sdktrace.TraceIDRatioBased(ratio)
		h := newHealthyRatio(ratio)
		ids := []trace.TraceID{{}, {8: 0xff, 9: 0xff, 10: 0xff, 11: 0xff, 12: 0xff, 13: 0xff, 14: 0xff, 15: 0xff}}
		if ratio > 0 && ratio < 1 {
			// The ids on either side of the bound.
			bound := uint64(ratio * (1 << 63))
			for _, x := range []uint64{bound - 1, bound, bound + 1} {
				var id trace.TraceID
				binary.BigEndian.PutUint64(id[8:], x<<1)
				ids = append(ids, id)
			}
		}
		for range 2000 {
			var id trace.TraceID
			binary.BigEndian.PutUint64(id[:8], rng.Uint64())
			binary.BigEndian.PutUint64(id[8:], rng.Uint64())
			ids = append(ids, id)
		}
		for _, id := range ids {
			want := sdk.ShouldSample(sdktrace.SamplingParameters{TraceID: id}).Decision == sdktrace.RecordAndSample
			if got := h.keep(id); got != want {
				t.Fatalf("ratio %g, trace id %s: keep %v, the SDK sampler %v", ratio, id, got, want)
			}
		}
	}
}

func TestInteresting(t *testing.T) {
	for _, tc := range []struct {
		name     string // why the case exists
		status   codes.Code
		attrs    []attribute.KeyValue
		anyError bool
		want     bool
	}{
		{"plain healthy", codes.Unset, healthyAttrs, false, false},
		{"root error status", codes.Error, healthyAttrs, false, true},
		{"child errored", codes.Unset, healthyAttrs, true, true},
		{"outcome failover_ok", codes.Unset, []attribute.KeyValue{attribute.String(AttrOutcome, OutcomeFailoverOK)}, false, true},
		{"outcome degraded", codes.Unset, []attribute.KeyValue{attribute.String(AttrOutcome, OutcomeDegraded)}, false, true},
		{"gate committed on its timeout", codes.Unset, append([]attribute.KeyValue{attribute.Bool(AttrTimedOut, true)}, healthyAttrs...), false, true},
		{"multi-step path, outcome ok", codes.Unset, []attribute.KeyValue{
			attribute.String(AttrOutcome, OutcomeOK), attribute.String(AttrFailoverPath, "a:open -> b:ok")}, false, true},
		{"single step path", codes.Unset, []attribute.KeyValue{attribute.String(AttrFailoverPath, "a:ok")}, false, false},
		{"no attributes", codes.Ok, nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := tracetest.SpanStub{Status: sdktrace.Status{Code: tc.status}, Attributes: tc.attrs}.Snapshot()
			if got := Interesting(root, tc.anyError); got != tc.want {
				t.Fatalf("Interesting = %v, want %v", got, tc.want)
			}
		})
	}
}

func BenchmarkFailoverProcessorRequest(b *testing.B) {
	fp := newFailoverProcessor(sdktrace.NewSimpleSpanProcessor(tracetest.NewNoopExporter()), 0.1, clockwork.NewRealClock())
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(fp))
	defer tp.Shutdown(context.Background())
	tr := tp.Tracer("bench")
	b.ReportAllocs()
	for b.Loop() {
		ctx, root := tr.Start(context.Background(), SpanServer)
		_, c := tr.Start(ctx, "chat m")
		c.End()
		root.SetAttributes(healthyAttrs...)
		root.End()
	}
}

// A ratio sampler from OTEL_TRACES_SAMPLER and a caller whose traceparent
// says "not sampled" must not lose a failover trace: the ratio thins healthy
// traces only, at the end of the request.
func TestRatioSamplerKeepsFailovers(t *testing.T) {
	head, ratio, err := samplerFromEnv(envOf(map[string]string{envTracesSampler: "parentbased_traceidratio", envTracesSamplerArg: "0"}))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, ratio, head)
	unsampled := func(id byte) context.Context {
		return trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{id}, SpanID: trace.SpanID{id}, Remote: true,
		}))
	}
	h.request(unsampled(9), healthyAttrs, 1, false)
	h.request(context.Background(), healthyAttrs, 1, false)
	if got := len(h.rec.Ended()); got != 0 {
		t.Fatalf("ratio 0 exported %d healthy spans", got)
	}
	h.request(unsampled(10), failoverAttrs, 2, true)
	if got := len(h.rec.Ended()); got != 4 {
		t.Fatalf("failover under an unsampled parent exported %d spans, want 4", got)
	}
}

// At ratio 1 every trace is kept, so nothing is held: a child span is
// exported when it ends (an open stream keeps none of its ended spans in
// memory), and the decision counter still sees errors of child spans.
func TestFailoverProcessorKeepAllPassesThrough(t *testing.T) {
	h := newHarness(t, 1, nil)
	tr := h.tp.Tracer("test")
	ctx, root := tr.Start(context.Background(), SpanServer, trace.WithSpanKind(trace.SpanKindServer))
	_, hop := tr.Start(ctx, "chat m", trace.WithSpanKind(trace.SpanKindClient))
	hop.SetStatus(codes.Error, "503")
	hop.End()
	if got := len(h.rec.Ended()); got != 1 {
		t.Fatalf("the ended child was held: %d spans exported before the root ended, want 1", got)
	}
	if traces, spans := h.fp.pending(); traces != 0 || spans != 0 {
		t.Fatalf("buffered %d traces, %d spans at ratio 1", traces, spans)
	}
	root.SetAttributes(healthyAttrs...)
	root.End()
	h.request(context.Background(), healthyAttrs, 1, false)
	if got := len(h.rec.Ended()); got != 2+3 {
		t.Fatalf("exported %d spans, want 5", got)
	}
	c := &h.fp.counts
	if i, k, d := c.interesting.Load(), c.healthyKept.Load(), c.healthyDropped.Load(); i != 1 || k != 1 || d != 0 {
		t.Fatalf("decisions interesting=%d healthy_kept=%d healthy_dropped=%d, want 1 1 0 (the errored child makes the first trace interesting)", i, k, d)
	}
	if n := h.fp.nErrored.Load(); n != 0 {
		t.Fatalf("%d errored traces still noted after their roots ended", n)
	}
}

// Notes of errored spans whose root never ends here are bounded: the
// oldest goes.
func TestFailoverProcessorKeepAllErroredBounded(t *testing.T) {
	h := newHarness(t, 1, nil)
	tr := h.tp.Tracer("test")
	for range decidedMemory + 10 {
		ctx, _ := tr.Start(context.Background(), SpanServer, trace.WithSpanKind(trace.SpanKindServer)) // never ends
		_, hop := tr.Start(ctx, "chat m", trace.WithSpanKind(trace.SpanKindClient))
		hop.SetStatus(codes.Error, "503")
		hop.End()
	}
	if n := h.fp.nErrored.Load(); n != decidedMemory {
		t.Fatalf("%d errored traces noted, want the bound %d", n, decidedMemory)
	}
}

// A span ending while its kept root is being decided joins the trace in
// the ring, whichever the sampler sees first: the ring expects a kept
// trace before a late span can find its decision.
func TestFailoverProcessorLateSpanReachesRing(t *testing.T) {
	h := newHarness(t, 0, nil)
	h.fp.ring = NewTraceRing(TraceRingOptions{MaxTraces: 4000, MaxBytes: 1 << 30})
	tr := h.tp.Tracer("test")
	const n = 2000
	ids := make([]trace.TraceID, n)
	for i := range n {
		ctx, root := tr.Start(context.Background(), SpanServer, trace.WithSpanKind(trace.SpanKindServer))
		_, hop := tr.Start(ctx, "chat m", trace.WithSpanKind(trace.SpanKindClient))
		root.SetAttributes(failoverAttrs...)
		start, done := make(chan struct{}), make(chan struct{})
		go func() {
			<-start
			hop.End()
			close(done)
		}()
		close(start)
		root.End()
		<-done
		ids[i] = root.SpanContext().TraceID()
	}
	lost := 0
	for _, id := range ids {
		if got := h.fp.ring.Get(id); got == nil || len(got.Spans) != 2 {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d kept traces lost the span that ended with their root", lost, n)
	}
}
