package telemetry

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// ringRequest plays the span tree of DESIGN.md §5 for one request through
// tp: server root, dispatch, an optional breaker skip, one hop per path
// step with its await-headers and stream-gate children. lateHop ends the
// last hop after the root, as a stream's hop does when its body closes
// after the handler returned.
func ringRequest(tp trace.TracerProvider, model, path string, lateHop bool, pad string) trace.TraceID {
	tr := tp.Tracer("test")
	ctx, root := tr.Start(context.Background(), SpanServer, trace.WithSpanKind(trace.SpanKindServer))
	dctx, disp := tr.Start(ctx, SpanDispatch+" "+model, trace.WithAttributes(attribute.String(AttrModel, model)))
	var last trace.Span
	outcome := OutcomeOK
	steps := strings.Split(path, PathArrow)
	for i, step := range steps {
		ch, result, _ := strings.Cut(step, ":")
		if result == "open" {
			_, skip := tr.Start(dctx, SpanBreakerSkip+" "+ch, trace.WithAttributes(
				attribute.String(AttrChannel, ch), attribute.String(AttrBreakerState, "open")))
			skip.End()
			continue
		}
		if result == StepDemoted {
			CallSpan{live: disp}.Demoted(Demotion{Channel: ch, Reason: "header_latency", Until: time.Unix(0, 0)})
			continue
		}
		hctx, hop := tr.Start(dctx, "chat m", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String(AttrChannel, ch), attribute.Int(AttrHopIndex, i), attribute.String("pad", pad)))
		_, await := tr.Start(hctx, SpanAwaitHeaders)
		await.End()
		_, gate := tr.Start(hctx, SpanStreamGate)
		if result == "ok" {
			gate.SetAttributes(attribute.String(AttrGateDecision, GateCommitContent))
		} else {
			gate.SetAttributes(attribute.String(AttrGateDecision, GateDiscardError))
			gate.SetStatus(codes.Error, GateDiscardError)
			hop.SetStatus(codes.Error, result)
			hop.AddEvent("exception", trace.WithAttributes(attribute.String("exception.message", "upstream said "+result)))
			outcome = OutcomeFailoverOK
		}
		gate.End()
		if i == len(steps)-1 && lateHop {
			last = hop
			continue
		}
		hop.End()
	}
	disp.End()
	root.SetAttributes(attribute.String(AttrOutcome, outcome), attribute.String(AttrFailoverPath, path))
	root.End()
	if last != nil {
		last.End()
	}
	return root.SpanContext().TraceID()
}

func setupRing(t *testing.T, ratio float64, exp sdktrace.SpanExporter, ring TraceRingOptions) *Telemetry {
	t.Helper()
	tel, err := Setup(context.Background(), Options{HealthyRatio: ratio, SpanExporter: exp,
		Getenv: func(string) string { return "" }, TraceRing: ring})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return tel
}

// A request that early warning reordered is a trace about the demoted
// channel too: on-call clicking the blue tile must find it.
func TestTraceRingListsDemotedChannels(t *testing.T) {
	tel := setupRing(t, 1, nil, TraceRingOptions{})
	id := ringRequest(tel.TracerProvider, "m", "a:demoted -> b:ok", false, "")
	rec := tel.Traces.Get(id)
	if rec == nil {
		t.Fatal("a reordered request's trace is not kept")
	}
	if got := strings.Join(rec.Channels, ","); got != "b,a" {
		t.Errorf("channels %s, want the hop's b and the demoted a", got)
	}
	if l := tel.Traces.List(TraceFilter{Channel: "a"}); len(l) != 1 || l[0].TraceID != id {
		t.Errorf("channel filter a: %v", l)
	}
}

// TestTraceRingKeepsInterestingTraces: the ring holds the traces the
// sampler keeps for a reason, whichever way the sampler runs — buffering
// (no exporter, or a healthy ratio below 1) or keep-all (ratio 1, where
// the ring collects spans itself) — with their late hop span, and never a
// healthy trace.
func TestTraceRingKeepsInterestingTraces(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ratio float64
		exp   bool
	}{
		{"no exporter", 1, false},
		{"buffering sampler", 0.5, true},
		{"keep-all sampler", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var exp sdktrace.SpanExporter
			if tc.exp {
				exp = tracetest.NewInMemoryExporter()
			}
			tel := setupRing(t, tc.ratio, exp, TraceRingOptions{})
			healthy := ringRequest(tel.TracerProvider, "m", "a:ok", false, "")
			fo := ringRequest(tel.TracerProvider, "m", "a:open -> b:503 -> c:ok", true, "")
			other := ringRequest(tel.TracerProvider, "n", "b:503 -> a:ok", false, "")

			if tel.Traces.Get(healthy) != nil {
				t.Error("a healthy trace is in the ring")
			}
			rec := tel.Traces.Get(fo)
			if rec == nil {
				t.Fatal("the failover trace is not in the ring")
			}
			// server, dispatch, skip, 2 hops × (hop, await, gate)
			if len(rec.Spans) != 9 {
				t.Errorf("%d spans, want 9 (the late hop included)", len(rec.Spans))
			}
			if rec.Model != "m" || rec.Outcome != OutcomeFailoverOK || rec.Path != "a:open -> b:503 -> c:ok" {
				t.Errorf("summary %q %q %q", rec.Model, rec.Outcome, rec.Path)
			}
			if got := strings.Join(rec.Channels, ","); got != "a,b,c" {
				t.Errorf("channels %s", got)
			}
			if r := rec.Root(); r == nil || r.Name != SpanServer || r.Kind != "server" {
				t.Errorf("root %+v", r)
			}
			list := tel.Traces.List(TraceFilter{})
			if len(list) != 2 || list[0].TraceID != other || list[1].TraceID != fo {
				t.Fatalf("list is not newest first: %v", list)
			}
			if l := tel.Traces.List(TraceFilter{Channel: "c"}); len(l) != 1 || l[0].TraceID != fo {
				t.Errorf("channel filter: %v", l)
			}
			if l := tel.Traces.List(TraceFilter{Model: "n", Outcome: OutcomeFailoverOK}); len(l) != 1 || l[0].TraceID != other {
				t.Errorf("model+outcome filter: %v", l)
			}
			if l := tel.Traces.List(TraceFilter{Outcome: OutcomeExhausted}); len(l) != 0 {
				t.Errorf("outcome filter: %v", l)
			}
		})
	}
}

// TestTraceRingByteBound is the memory bound of the issue: a flood of
// failover traces (an incident: every request fails over) keeps the ring
// under its byte limit, the newest traces stay, and the heap the ring
// retains is of the order of that limit, not of the flood.
func TestTraceRingByteBound(t *testing.T) {
	const limit = 2 << 20
	// No exporter: nothing but the ring keeps spans, so the heap can be
	// measured.
	tel := setupRing(t, 1, nil, TraceRingOptions{MaxTraces: 1 << 20, MaxBytes: limit})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	pad := strings.Repeat("x", 700)
	var lastID trace.TraceID
	const flood = 6000
	for i := range flood {
		lastID = ringRequest(tel.TracerProvider, fmt.Sprintf("m%d", i%7), "a:open -> b:503 -> c:502 -> d:ok", i%2 == 0, pad)
		if i%500 == 0 {
			if st := tel.Traces.Stats(); st.Bytes > limit {
				t.Fatalf("after %d traces the ring holds %d bytes > %d", i+1, st.Bytes, limit)
			}
		}
	}
	st := tel.Traces.Stats()
	if st.Bytes > limit || st.Bytes < limit/2 {
		t.Fatalf("ring bytes %d, want just under %d", st.Bytes, limit)
	}
	if st.Traces >= flood || st.Evicted == 0 || int64(st.Traces)+st.Evicted != st.Added {
		t.Fatalf("stats %+v", st)
	}
	if tel.Traces.Get(lastID) == nil {
		t.Fatal("the newest trace was evicted")
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	// The estimate errs high; what the ring really retains must be of the
	// order of its limit (slack for the tracer provider and the runtime):
	// the estimate errs high.
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > limit+(512<<10) {
		t.Errorf("heap grew by %d bytes for a ring limited to %d", grown, limit)
	} else {
		t.Logf("heap grew by %d bytes", grown)
	}
	t.Logf("%d traces held in %d estimated bytes (%d evicted)", st.Traces, st.Bytes, st.Evicted)
}

// TestTraceRingCountBound: with room in bytes, MaxTraces bounds the ring.
func TestTraceRingCountBound(t *testing.T) {
	tel := setupRing(t, 0, nil, TraceRingOptions{MaxTraces: 10})
	var ids []trace.TraceID
	for range 25 {
		ids = append(ids, ringRequest(tel.TracerProvider, "m", "a:503 -> b:ok", false, ""))
	}
	if st := tel.Traces.Stats(); st.Traces != 10 || st.Evicted != 15 {
		t.Fatalf("stats %+v", st)
	}
	if tel.Traces.Get(ids[14]) != nil || tel.Traces.Get(ids[15]) == nil {
		t.Fatal("not the oldest evicted first")
	}
}

// TestTraceRingCopiesAndTruncates: a record owns its strings, a huge
// attribute (an upstream error body) is truncated, and one trace larger
// than the whole ring is dropped rather than emptying it.
func TestTraceRingCopiesAndTruncates(t *testing.T) {
	ring := NewTraceRing(TraceRingOptions{MaxBytes: 64 << 10})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	// An odd prefix puts the cap in the middle of a two-byte rune.
	id := ringRequest(tp, "m", "a:503 -> b:ok", false, "x"+strings.Repeat("é", 5000))
	ended := rec.Ended()
	var root sdktrace.ReadOnlySpan
	var rest []sdktrace.ReadOnlySpan
	for _, s := range ended {
		if s.Name() == SpanServer {
			root = s
		} else {
			rest = append(rest, s)
		}
	}
	ring.add(rest, root)
	got := ring.Get(id)
	if got == nil {
		t.Fatal("not added")
	}
	for _, s := range got.Spans {
		if v := s.Attr("pad"); v != "" && (len(v) > ringMaxValueLen+len("…") || !strings.HasSuffix(v, "…")) {
			t.Fatalf("pad attribute of %d bytes not truncated", len(v))
		} else if !utf8.ValidString(v) {
			t.Fatalf("pad attribute cut inside a rune: %q", v[len(v)-8:])
		}
	}
	big := ringRequest(tp, "m", strings.Repeat("a:503 -> ", 200)+"b:ok", false, strings.Repeat("y", 2000))
	var bigSpans []sdktrace.ReadOnlySpan
	var bigRoot sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == big {
			if s.Name() == SpanServer {
				bigRoot = s
			} else {
				bigSpans = append(bigSpans, s)
			}
		}
	}
	ring.add(bigSpans, bigRoot)
	if ring.Get(big) != nil || ring.Get(id) == nil || ring.Stats().Dropped != 1 {
		t.Fatalf("an oversized trace must be dropped alone: %+v", ring.Stats())
	}
}

// TestErrorRates: the page's rolling 60 s error rate has the breaker's
// arithmetic (final errors and cancellations count on neither side) and
// forgets a window once it has rolled past.
func TestErrorRates(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	r := NewErrorRates(clock)
	for _, o := range []string{HopOK, HopOK, HopRetryable, HopHeaderTimeout, HopFinal, HopCanceled} {
		r.observe("a", o)
	}
	if p := r.Current("a"); p.Hops != 4 || p.Failed != 2 || p.Rate() != 0.5 {
		t.Fatalf("current %+v", p)
	}
	clock.Advance(30 * time.Second)
	r.observe("a", HopOK)
	if p := r.Current("a"); p.Hops != 5 || p.Failed != 2 {
		t.Fatalf("after 30 s %+v", p)
	}
	clock.Advance(29 * time.Second) // 59 s: the first burst is still in the window
	if p := r.Current("a"); p.Hops != 5 || p.Failed != 2 {
		t.Fatalf("after 59 s %+v", p)
	}
	clock.Advance(time.Second) // 60 s: its bucket has rolled out, the window is 60 s wide
	if p := r.Current("a"); p.Hops != 1 || p.Failed != 0 {
		t.Fatalf("after 60 s %+v", p)
	}
	clock.Advance(10 * time.Second)
	if p := r.Current("a"); p.Hops != 1 || p.Failed != 0 {
		t.Fatalf("after 70 s %+v", p)
	}
	s := r.Series("a")
	if len(s) != int(ErrorRateHistory/ErrorRateStep) {
		t.Fatalf("%d points", len(s))
	}
	peak := 0.0
	for _, p := range s {
		peak = max(peak, p.Rate())
	}
	if peak != 0.5 {
		t.Fatalf("the series lost the 50 %% window: peak %v", peak)
	}
	clock.Advance(ErrorRateHistory + time.Minute)
	for _, p := range r.Series("a") {
		if p.Hops != 0 {
			t.Fatalf("stale buckets counted: %+v", p)
		}
	}
	if r.Current("none").Hops != 0 || len(r.Channels()) != 1 {
		t.Fatal("unknown channel")
	}
}

// TestTraceRingKeepHealthy: with KeepHealthy (the demo), the healthy
// traces the sampler keeps enter the ring too, with or without an
// exporter.
func TestTraceRingKeepHealthy(t *testing.T) {
	for _, exp := range []sdktrace.SpanExporter{nil, tracetest.NewInMemoryExporter()} {
		tel := setupRing(t, 1, exp, TraceRingOptions{KeepHealthy: true})
		if id := ringRequest(tel.TracerProvider, "m", "a:ok", false, ""); tel.Traces.Get(id) == nil {
			t.Errorf("exporter %v: the healthy trace is not in the ring", exp != nil)
		}
	}
}

// TestTraceRingSpanEndingWithItsRoot: in keep-all mode a span that ends
// while its root is being finished still joins the kept trace, whichever
// of the two the ring sees first (finish once marked the root finished
// before adding the trace, and a span arriving in between was lost).
func TestTraceRingSpanEndingWithItsRoot(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	const n = 2000
	roots := make([]sdktrace.ReadOnlySpan, n)
	kids := make([]sdktrace.ReadOnlySpan, n)
	for i := range n {
		ctx, root := tr.Start(context.Background(), SpanServer)
		_, kid := tr.Start(ctx, "chat m")
		kid.End()
		root.SetStatus(codes.Error, "failed")
		root.End()
		ended := rec.Ended()
		kids[i], roots[i] = ended[len(ended)-2], ended[len(ended)-1]
	}
	ring := NewTraceRing(TraceRingOptions{MaxTraces: n, MaxBytes: 1 << 30})
	for i := range n {
		start := make(chan struct{})
		done := make(chan struct{})
		go func() {
			<-start
			ring.collect(kids[i].SpanContext().TraceID(), kids[i])
			close(done)
		}()
		close(start)
		ring.finish(roots[i], true)
		<-done
	}
	lost := 0
	for i := range n {
		if got := ring.Get(roots[i].SpanContext().TraceID()); got == nil || len(got.Spans) != 2 {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d traces lost the span that ended with their root", lost, n)
	}
}

// TestTraceRingLateSpanEvicts: a late span that grows a held trace past
// MaxBytes evicts the oldest trace, as adding a trace would.
func TestTraceRingLateSpanEvicts(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	pad := strings.Repeat("x", 700)
	a := ringRequest(tp, "m", "a:503 -> b:ok", false, pad)
	b := ringRequest(tp, "m", "a:503 -> b:ok", true, pad)
	// parts splits a trace's ended spans: before its root, the root, after.
	parts := func(id trace.TraceID) (spans []sdktrace.ReadOnlySpan, root sdktrace.ReadOnlySpan, late []sdktrace.ReadOnlySpan) {
		for _, s := range rec.Ended() {
			switch {
			case s.SpanContext().TraceID() != id:
			case s.Name() == SpanServer:
				root = s
			case root != nil:
				late = append(late, s)
			default:
				spans = append(spans, s)
			}
		}
		return spans, root, late
	}
	aSpans, aRoot, _ := parts(a)
	bSpans, bRoot, bLate := parts(b)
	if len(bLate) != 1 {
		t.Fatalf("%d late spans, want the last hop", len(bLate))
	}
	// Measure the three sizes on a ring with room for everything.
	sizes := NewTraceRing(TraceRingOptions{MaxBytes: 1 << 30})
	sizes.add(aSpans, aRoot)
	sizes.add(bSpans, bRoot)
	held := sizes.Stats().Bytes
	sizes.addLate(bLate[0])
	withLate := sizes.Stats().Bytes
	if withLate <= held {
		t.Fatalf("the late span added no bytes (%d, %d)", held, withLate)
	}

	ring := NewTraceRing(TraceRingOptions{MaxBytes: withLate - 1})
	ring.add(aSpans, aRoot)
	ring.add(bSpans, bRoot)
	ring.addLate(bLate[0])
	st := ring.Stats()
	if st.Bytes > withLate-1 || st.Evicted != 1 || ring.Get(a) != nil {
		t.Fatalf("after the late span: %+v, oldest trace held %v", st, ring.Get(a) != nil)
	}
	if got := ring.Get(b); got == nil || len(got.Spans) != len(bSpans)+2 {
		t.Fatalf("the grown trace %+v, want its %d spans", got, len(bSpans)+2)
	}
}

// TestTraceRingLateSpanBeforeAdd: a late span that arrives between the
// sampler's expect and its add (the decision is made, the copy not done)
// joins the trace; without expect it is not held.
func TestTraceRingLateSpanBeforeAdd(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	id := ringRequest(tp, "m", "a:503 -> b:ok", true, "")
	ended := rec.Ended()
	late := ended[len(ended)-1]
	var spans []sdktrace.ReadOnlySpan
	var root sdktrace.ReadOnlySpan
	for _, s := range ended[:len(ended)-1] {
		if s.Name() == SpanServer {
			root = s
		} else {
			spans = append(spans, s)
		}
	}
	for _, expect := range []bool{true, false} {
		ring := NewTraceRing(TraceRingOptions{})
		if expect {
			ring.expect(id)
		}
		ring.addLate(late)
		ring.add(spans, root)
		want := len(spans) + 1 // and the root
		if expect {
			want++ // and the late span
		}
		if got := len(ring.Get(id).Spans); got != want {
			t.Errorf("expect %v: %d spans held, want %d", expect, got, want)
		}
	}
}
