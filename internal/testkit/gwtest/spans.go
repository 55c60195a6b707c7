package gwtest

import (
	"context"
	"slices"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/internal/testkit"
)

// spanWatch sees every span end, synchronously at End (SDK spans as a span
// processor, the engine's compact spans through Spans.Watch), so a test can tell
// where a request is ("await headers" ended: the gate runs) and when a
// trace's local root ended. Registered after the tail sampler, it sees a
// root only once the sampler has decided its trace.
type spanWatch struct {
	mu    sync.Mutex
	ended map[string]int // span name -> ends
	// roots are the traces whose local root ended, the latest last: a ring,
	// so a benchmark's millions of requests cost no memory (and no
	// allocation) here. A test looks its trace up right after the request.
	roots   [4096]trace.TraceID
	next    int
	waiters []endWaiter
}

// endWaiter is a SpanEnds call waiting for the next end of name.
type endWaiter struct {
	name string
	ch   chan struct{}
}

func newSpanWatch() *spanWatch {
	return &spanWatch{ended: map[string]int{}}
}

func (w *spanWatch) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (w *spanWatch) OnEnd(s sdktrace.ReadOnlySpan) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// A local root has no parent, or a remote one (the client's traceparent).
	if p := s.Parent(); !p.IsValid() || p.IsRemote() {
		w.roots[w.next%len(w.roots)] = s.SpanContext().TraceID()
		w.next++
	}
	w.endedLocked(s.Name())
}

// spanEnded sees the end of a span the engine records compactly
// (telemetry.Spans.Watch): those reach no span processor as they end.
func (w *spanWatch) spanEnded(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.endedLocked(name)
}

func (w *spanWatch) endedLocked(name string) {
	w.ended[name]++
	kept := w.waiters[:0]
	for _, e := range w.waiters {
		if e.name == name {
			close(e.ch)
			continue
		}
		kept = append(kept, e)
	}
	w.waiters = kept
}

func (w *spanWatch) Shutdown(context.Context) error   { return nil }
func (w *spanWatch) ForceFlush(context.Context) error { return nil }

func (w *spanWatch) count(name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ended[name]
}

func (w *spanWatch) rootEnded(tid trace.TraceID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Contains(w.roots[:min(w.next, len(w.roots))], tid)
}

// WaitSpanEnd waits until n spans named name have ended.
func (g *Gateway) WaitSpanEnd(name string, n int) {
	g.tb.Helper()
	testkit.Eventually(g.tb, func() bool { return g.watch.count(name) >= n },
		"span "+name+" ended "+itoa(n)+" times")
}

// SpanEnds is closed when the next span named name ends (after this
// call): tests use it to know where the engine stands before moving a
// fake clock.
func (g *Gateway) SpanEnds(name string) <-chan struct{} {
	ch := make(chan struct{})
	g.watch.mu.Lock()
	g.watch.waiters = append(g.watch.waiters, endWaiter{name: name, ch: ch})
	g.watch.mu.Unlock()
	return ch
}

// Trace returns the exported spans of trace id, once its local root (the
// SERVER span) ended and the tail sampler's decision was flushed: empty
// when the sampler dropped the trace. It waits because the SERVER span
// ends after the handler returns, which a client reading a Content-Length
// body can beat.
func (g *Gateway) Trace(id string) tracetest.SpanStubs {
	g.tb.Helper()
	if g.Spans == nil {
		g.tb.Fatal("spans are not recorded in memory (Options.OTELEnv or OwnTelemetry)")
	}
	tid, err := trace.TraceIDFromHex(id)
	if err != nil {
		g.tb.Fatalf("trace id %q: %v", id, err)
	}
	testkit.Eventually(g.tb, func() bool { return g.watch.rootEnded(tid) }, "the root span of trace "+id+" ended")
	if err := g.Tel.TracerProvider.ForceFlush(context.Background()); err != nil {
		g.tb.Fatal(err)
	}
	var out tracetest.SpanStubs
	for _, s := range g.Spans.GetSpans() {
		if s.SpanContext.TraceID().String() == id {
			out = append(out, s)
		}
	}
	return out
}
