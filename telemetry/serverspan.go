package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// serverRecorder makes compact SERVER spans: what the SDK does for a span
// (the head sampler's decision, ids, limits), without the SDK's per-span
// work that a request then throws away (a span object with its own lock,
// attributes copied and normalised as they are set, de-duplicated through a
// map and copied again into a snapshot at the end). The span is handed to
// the failover-aware sampler as a read-only view, as a root SDK span was;
// only then, for a kept trace, do the exporter and the trace ring read it.
// Set by Setup when the request path's spans are compact.
type serverRecorder struct {
	sampler sdktrace.Sampler
	proc    sdktrace.SpanProcessor // the processor the tracer provider's spans go to
	// more: processors registered since (Telemetry.RegisterSpanProcessor),
	// copied on write.
	more   atomic.Pointer[[]sdktrace.SpanProcessor]
	tp     trace.TracerProvider
	res    *resource.Resource
	scope  instrumentation.Scope
	limits sdktrace.SpanLimits
}

// serveCompact is ServerHandler's ServeHTTP with a compact SERVER span.
// Its frame is what an open stream parks under: the span's start and end
// are calls of their own.
func (h *serverHandler) serveCompact(w http.ResponseWriter, r *http.Request) {
	ctx, sp := h.startCompact(r)
	if sp == nil {
		h.next.ServeHTTP(w, r.WithContext(ctx))
		return
	}
	sw := newServerWriter(w, r)
	defer sw.restore(r)
	defer sp.End()
	h.next.ServeHTTP(sw, r.WithContext(ctx))
	sp.answered(sw)
}

// startCompact starts r's SERVER span: the head sampler's decision on the
// ids the SDK would make. A nil span: not sampled, and ctx carries the
// span context alone (the SDK's span would reach no exporter and no ring:
// the processors drop unsampled spans).
//
//go:noinline
func (h *serverHandler) startCompact(r *http.Request) (context.Context, *serverSpan) {
	rec := h.rec
	ctx := h.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	psc := trace.SpanContextFromContext(ctx)
	pctx := ctx
	var link trace.SpanContext
	if h.public != nil && h.public() {
		// A new root, linked to the client's span context if it sent one.
		if psc.IsValid() && psc.IsRemote() {
			link = psc
		}
		psc = trace.SpanContext{}
		pctx = trace.ContextWithSpanContext(ctx, psc)
	}
	tid := psc.TraceID()
	if !psc.IsValid() {
		tid = newTraceID()
	}
	name := h.spanName(r)
	var links []sdktrace.Link
	params := sdktrace.SamplingParameters{ParentContext: pctx, TraceID: tid, Name: name, Kind: trace.SpanKindServer}
	if link.IsValid() {
		links = []sdktrace.Link{{SpanContext: link}}
		params.Links = []trace.Link{{SpanContext: link}}
	}
	res := rec.sampler.ShouldSample(params)
	flags := psc.TraceFlags() &^ trace.FlagsSampled
	if res.Decision == sdktrace.RecordAndSample {
		flags |= trace.FlagsSampled
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: newSpanID(), TraceFlags: flags, TraceState: res.Tracestate})
	if res.Decision != sdktrace.RecordAndSample {
		return trace.ContextWithSpanContext(ctx, sc), nil
	}
	sp := &serverSpan{rec: rec, sc: sc, parent: psc, name: name, start: time.Now(), links: links}
	sp.attrs = appendRequestAttrs(sp.buf[:0], r)
	return trace.ContextWithSpan(ctx, sp), sp
}

// answered puts the answer's attributes and status on the span.
//
//go:noinline
func (sp *serverSpan) answered(sw *serverWriter) {
	var a [3]attribute.KeyValue
	sp.SetAttributes(appendResponseAttrs(a[:0], sw)...)
	sp.SetStatus(statusOf(sw.status))
}

// serverSpan is a sampled SERVER span while its request runs: the trace.Span
// the handler's context carries (the front door and the dispatch span put
// the request's outcome on it).
type serverSpan struct {
	embedded.Span
	// Once ended, the span is its own read-only view (the SDK's
	// ReadOnlySpan, see spanRec's): nothing writes it after End.
	sdktrace.ReadOnlySpan

	rec        *serverRecorder
	sc, parent trace.SpanContext
	name       string
	start, end time.Time
	links      []sdktrace.Link

	mu    sync.Mutex
	ended bool
	attrs []attribute.KeyValue // in the order set; duplicates resolved at End
	// buf backs attrs: a request sets 11 at its start and 17 or 18 by its
	// end. 20, not more: the span lives as long as its request, an idle
	// stream's included, and 20 keeps it in the allocator's 1792-byte
	// class (28 took 2304: docs/performance.md, memory per idle stream).
	buf     [20]attribute.KeyValue
	dropped int
	events  []sdktrace.Event
	status  sdktrace.Status
}

func (sp *serverSpan) SpanContext() trace.SpanContext { return sp.sc }

func (sp *serverSpan) IsRecording() bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return !sp.ended
}

func (sp *serverSpan) TracerProvider() trace.TracerProvider { return sp.rec.tp }

func (sp *serverSpan) SetName(name string) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if !sp.ended {
		sp.name = name
	}
}

// SetStatus is the SDK's: Ok beats Error beats Unset, and only an Error
// keeps its description.
func (sp *serverSpan) SetStatus(code codes.Code, description string) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.ended || sp.status.Code > code {
		return
	}
	st := sdktrace.Status{Code: code}
	if code == codes.Error {
		st.Description = description
	}
	sp.status = st
}

// SetAttributes adds attributes as the SDK does: invalid ones are
// dropped; duplicates are resolved at End (the first position, the last
// value), or at once when the count limit would be crossed, past which new
// keys are dropped. (Setup makes compact SERVER spans only without a value
// length limit, whose truncation stays the SDK's.)
func (sp *serverSpan) SetAttributes(kv ...attribute.KeyValue) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.ended {
		return
	}
	limit := sp.rec.limits.AttributeCountLimit
	if limit < 0 || len(sp.attrs)+len(kv) <= limit {
		for _, a := range kv {
			if !a.Valid() {
				sp.dropped++
				continue
			}
			sp.attrs = append(sp.attrs, a)
		}
		return
	}
	sp.attrs = dedupe(sp.attrs)
	for _, a := range kv {
		if !a.Valid() {
			sp.dropped++
			continue
		}
		if i := slices.IndexFunc(sp.attrs, func(e attribute.KeyValue) bool { return e.Key == a.Key }); i >= 0 {
			sp.attrs[i] = a
			continue
		}
		if len(sp.attrs) < limit {
			sp.attrs = append(sp.attrs, a)
			continue
		}
		sp.dropped++
	}
}

func (sp *serverSpan) AddEvent(name string, opts ...trace.EventOption) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.ended {
		return
	}
	c := trace.NewEventConfig(opts...)
	sp.events = append(sp.events, sdktrace.Event{Name: name, Attributes: c.Attributes(), Time: c.Timestamp()})
}

// RecordError is the SDK's: an exception event naming the error's type and
// message.
func (sp *serverSpan) RecordError(err error, opts ...trace.EventOption) {
	if err == nil {
		return
	}
	opts = append(opts, trace.WithAttributes(semconv.ExceptionType(errorType(err)), semconv.ExceptionMessage(err.Error())))
	sp.AddEvent(semconv.ExceptionEventName, opts...)
}

func (sp *serverSpan) AddLink(l trace.Link) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if !sp.ended && l.SpanContext.IsValid() {
		sp.links = append(sp.links, sdktrace.Link{SpanContext: l.SpanContext, Attributes: l.Attributes})
	}
}

// End ends the span and hands its read-only view to the tracer provider's
// processor (the failover-aware sampler), as the SDK hands a root span.
//
// Deferred in a panicking handler (http.ErrAbortHandler cuts a binary
// answer), it records the panic as an exception event and lets it go on,
// as the SDK's End does.
func (sp *serverSpan) End(...trace.SpanEndOption) {
	end := time.Now()
	sp.mu.Lock()
	if sp.ended {
		sp.mu.Unlock()
		return
	}
	if recovered := recover(); recovered != nil {
		defer panic(recovered)
		sp.events = append(sp.events, sdktrace.Event{Name: semconv.ExceptionEventName, Time: time.Now(), Attributes: []attribute.KeyValue{
			semconv.ExceptionType(typeName(recovered)), semconv.ExceptionMessage(fmt.Sprint(recovered)),
		}})
	}
	sp.end = end
	a := dedupe(sp.attrs)
	sp.attrs = a[:len(a):len(a)] // a reader's append copies
	sp.ended = true
	sp.mu.Unlock()
	v := sp
	sp.rec.proc.OnEnd(v)
	if more := sp.rec.more.Load(); more != nil {
		for _, p := range *more {
			p.OnEnd(v)
		}
	}
}

// The read-only face of an ended SERVER span.

func (sp *serverSpan) Name() string                     { return sp.name }
func (sp *serverSpan) Parent() trace.SpanContext        { return sp.parent }
func (sp *serverSpan) SpanKind() trace.SpanKind         { return trace.SpanKindServer }
func (sp *serverSpan) StartTime() time.Time             { return sp.start }
func (sp *serverSpan) EndTime() time.Time               { return sp.end }
func (sp *serverSpan) Attributes() []attribute.KeyValue { return sp.attrs }
func (sp *serverSpan) Links() []sdktrace.Link           { return sp.links }
func (sp *serverSpan) Events() []sdktrace.Event         { return sp.events }
func (sp *serverSpan) Status() sdktrace.Status          { return sp.status }
func (sp *serverSpan) InstrumentationScope() instrumentation.Scope {
	return sp.rec.scope
}

//nolint:staticcheck // the interface requires it
func (sp *serverSpan) InstrumentationLibrary() instrumentation.Library { return sp.rec.scope }
func (sp *serverSpan) Resource() *resource.Resource                    { return sp.rec.res }
func (sp *serverSpan) DroppedAttributes() int                          { return sp.dropped }
func (sp *serverSpan) DroppedLinks() int                               { return 0 }
func (sp *serverSpan) DroppedEvents() int                              { return 0 }
func (sp *serverSpan) ChildSpanCount() int                             { return 0 }

var _ sdktrace.ReadOnlySpan = (*serverSpan)(nil)

// register adds a processor that compact SERVER spans reach after proc.
func (rec *serverRecorder) register(p sdktrace.SpanProcessor) {
	for {
		old := rec.more.Load()
		var next []sdktrace.SpanProcessor
		if old != nil {
			next = append(next, *old...)
		}
		next = append(next, p)
		if rec.more.CompareAndSwap(old, &next) {
			return
		}
	}
}

// RegisterSpanProcessor registers p with the tracer provider. Use it, not
// TracerProvider.RegisterSpanProcessor, for p to see the SERVER spans too:
// when the request path's spans are compact they reach the provider's
// processors without passing through the provider. (The compact spans
// below the SERVER span reach the failover-aware sampler only; see Spans.)
func (t *Telemetry) RegisterSpanProcessor(p sdktrace.SpanProcessor) {
	t.TracerProvider.RegisterSpanProcessor(p)
	if t.server != nil {
		t.server.register(p)
	}
}

// dedupe keeps each key once, at its first position with its last value:
// what the SDK's span reports.
func dedupe(a []attribute.KeyValue) []attribute.KeyValue {
	out := a[:0]
	for _, kv := range a {
		dup := false
		for i := range out {
			if out[i].Key == kv.Key {
				out[i], dup = kv, true
				break
			}
		}
		if !dup {
			out = append(out, kv)
		}
	}
	clear(a[len(out):])
	return out
}

// typeName names v's type as the SDK's exception events do.
func typeName(v any) string {
	t := reflect.TypeOf(v)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}

// newTraceID returns a random, valid trace id.
func newTraceID() trace.TraceID {
	var id trace.TraceID
	for !id.IsValid() {
		s1, s2 := newSpanID(), newSpanID()
		copy(id[:8], s1[:])
		copy(id[8:], s2[:])
	}
	return id
}
