package telemetry

import (
	"context"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Spans records the request path's spans (DESIGN.md §5) for package
// dispatch, as Metrics records its metrics: the engine says what happened
// (a skip, headers awaited, a header timeout, a gate decision, a hop's
// end), Spans turns it into spans and attributes. It never decides what a
// request does next.
//
// Spans set up by Setup record each request compactly (record.go): the
// engine's reports are kept as typed values in one record per request,
// and span attributes, SDK span views and export cost are paid only for a
// trace the failover-aware sampler keeps. A request without a sampled
// local parent span (no SERVER span, or one the head sampler dropped), and
// every request of a recorder built by NewSpans, is recorded as SDK spans
// from their start instead: the same spans, names, attributes, events and
// statuses, built by the same functions (spanattrs.go).
//
// The SDK copies attributes into a span at every SetAttributes call and
// regrows its slice for each call after Start, so SDK spans get their
// attributes in as few calls as possible (at start and at end), from
// fixed-size arrays; the strings that repeat for every request (span names,
// the upstream URL's attributes) are built once and cached.
type Spans struct {
	tracer trace.Tracer
	tp     trace.TracerProvider
	names  cowCache[nameKey, string]
	urls   cowCache[urlKey, []attribute.KeyValue]

	// Compact recording: off while sink is nil.
	sink  recordSink
	clock clockwork.Clock
	res   *resource.Resource    // the tracer provider's, for the export views
	scope instrumentation.Scope // the tracer's
	watch atomic.Pointer[func(name string)]
}

// recordSink takes a request's record once its dispatch span ended: the
// failover-aware sampler.
type recordSink interface{ endRecord(*record) }

// NewSpans records spans with tracer, every one as an SDK span from its
// start.
func NewSpans(tracer trace.Tracer) *Spans {
	return &Spans{tracer: tracer}
}

// compact turns compact recording on: records go to sink when their
// dispatch span ends, their times read from clock, their export views
// carry res and scope (the tracer's own, so exported spans group with the
// SDK's).
func (s *Spans) compact(sink recordSink, clock clockwork.Clock, tp trace.TracerProvider, res *resource.Resource, scope instrumentation.Scope) {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	s.sink, s.clock, s.tp, s.res, s.scope = sink, clock, tp, res, scope
}

// Watch calls f with the name of every compactly recorded span as it ends,
// on the request's goroutine (nil: stop). Test harnesses use it to know
// where a request stands; spans recorded as SDK spans reach span
// processors instead.
func (s *Spans) Watch(f func(name string)) {
	if f == nil {
		s.watch.Store(nil)
		return
	}
	s.watch.Store(&f)
}

func (s *Spans) watched(name string) {
	if f := s.watch.Load(); f != nil {
		(*f)(name)
	}
}

// provider is the tracer provider spans in contexts report.
func (s *Spans) provider() trace.TracerProvider {
	if s.tp == nil {
		return noop.NewTracerProvider()
	}
	return s.tp
}

// Bounds of the caches: their keys come from the config, and each reload
// may bring new ones, but not without limit.
const (
	maxCachedNames = 4096
	maxCachedURLs  = 1024
)

// cowCache is a bounded copy-on-write map: lookups are one atomic load and
// a map read (no lock, no boxing of string keys); stores copy the map and
// happen once per key.
type cowCache[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V]
	mu sync.Mutex
}

func (c *cowCache[K, V]) get(k K, max int, build func() V) V {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	v := build()
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil && len(*old) >= max {
		return v
	}
	n := make(map[K]V, 1+lenOf(old))
	if old != nil {
		for kk, vv := range *old {
			n[kk] = vv
		}
	}
	n[k] = v
	c.m.Store(&n)
	return v
}

func lenOf[K comparable, V any](m *map[K]V) int {
	if m == nil {
		return 0
	}
	return len(*m)
}

// nameKey is a span name's parts: a struct key, so a lookup builds no string.
type nameKey struct{ prefix, suffix string }

// name returns prefix+" "+suffix, cached.
func (s *Spans) name(prefix, suffix string) string {
	return s.names.get(nameKey{prefix, suffix}, maxCachedNames, func() string { return prefix + " " + suffix })
}

// CallSpan is the dispatch span of one request ("dispatch {model}").
type CallSpan struct {
	s    *Spans
	sp   *spanRec   // compact
	live trace.Span // an SDK span
}

// StartCall starts the dispatch span of a request for model under ctx (the
// SERVER span's context).
func (s *Spans) StartCall(ctx context.Context, model string) (context.Context, CallSpan) {
	name := s.name(SpanDispatch, model)
	if psc := trace.SpanContextFromContext(ctx); s.sink != nil && psc.IsSampled() && !psc.IsRemote() {
		sp := s.newRecord(psc).add(recDispatch, -1, name)
		return trace.ContextWithSpan(ctx, sp), CallSpan{s: s, sp: sp}
	}
	ctx, span := s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
	return ctx, CallSpan{s: s, live: span}
}

// Context returns ctx (its values, not its cancellation) carrying the
// dispatch span: spans started late (the degraded reply after the chain
// deadline cancelled the request context, a mid-stream continuation) stay
// under dispatch.
func (c CallSpan) Context(ctx context.Context) context.Context {
	if c.sp != nil {
		return trace.ContextWithSpan(ctx, c.sp)
	}
	return trace.ContextWithSpan(ctx, c.live)
}

// under returns the index of the record span ctx carries, the dispatch
// span's when ctx carries none of this record's.
func (c CallSpan) under(ctx context.Context) int16 {
	if p := spanIn(ctx); p != nil && p.rec == c.sp.rec {
		return p.idx
	}
	return c.sp.idx
}

// Skip is an L1 skip: nothing was sent to the channel.
type Skip struct {
	Channel, ChannelRegion string
	State                  string    // the breaker's state
	ReopenAt               time.Time // zero: unknown
	// Forced: every channel of every chain was open and this one, whose
	// cooldown ends first, is tried anyway.
	Forced bool
}

// Skip records a "breaker skip {channel}" span under ctx.
func (c CallSpan) Skip(ctx context.Context, k Skip) {
	name := c.s.name(SpanBreakerSkip, k.Channel)
	if c.sp != nil {
		sp := c.sp.rec.add(recSkip, c.under(ctx), name)
		sp.s1, sp.s2, sp.s3, sp.flag2 = k.Channel, k.ChannelRegion, k.State, k.Forced
		if !k.ReopenAt.IsZero() {
			sp.flag, sp.n1 = true, k.ReopenAt.UnixNano()
		}
		if k.Forced {
			sp.event(forcedSkipEvent, nil)
		}
		sp.finish()
		return
	}
	var a [5]attribute.KeyValue
	_, span := c.s.tracer.Start(ctx, name,
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(appendSkipAttrs(a[:0], &k)...))
	if k.Forced {
		span.AddEvent(forcedSkipEvent)
	}
	span.End()
}

// Demotion is a demoted channel that a request's chain moved to its end
// (early warning, DESIGN.md §12).
type Demotion struct {
	Channel, ChannelRegion string
	Reason, Detail         string
	Until                  time.Time
}

// Demoted records an EventEarlyWarning event on the dispatch span.
func (c CallSpan) Demoted(d Demotion) {
	a := [5]attribute.KeyValue{
		attribute.String(AttrChannel, d.Channel),
		attribute.String(AttrChannelRegion, d.ChannelRegion),
		attribute.String(AttrEarlyWarningReason, d.Reason),
		attribute.String(AttrEarlyWarningUntil, d.Until.UTC().Format(time.RFC3339Nano)),
	}
	n := 4
	if d.Detail != "" {
		a[n] = attribute.String(AttrEarlyWarningDetail, d.Detail)
		n++
	}
	if c.sp != nil {
		c.sp.eventAttrs(EventEarlyWarning, append([]attribute.KeyValue(nil), a[:n]...))
		return
	}
	c.live.AddEvent(EventEarlyWarning, trace.WithAttributes(a[:n]...))
}

// Backoff records the wait before a same-channel retry; the returned func
// ends it.
func (c CallSpan) Backoff(ctx context.Context, channel string, d time.Duration) (end func()) {
	if c.sp != nil {
		sp := c.sp.rec.add(recBackoff, c.under(ctx), SpanRetryBackoff)
		sp.s1, sp.n1 = channel, int64(d)
		return sp.finish
	}
	var a [2]attribute.KeyValue
	_, span := c.s.tracer.Start(ctx, SpanRetryBackoff, trace.WithAttributes(appendBackoffAttrs(a[:0], channel, d)...))
	return func() { span.End() }
}

// Degraded records the degraded reply (exhaustion or chain deadline).
type Degraded struct {
	Reason, Model, Mode, Code string
}

// Degraded records a "degraded reply" span under the dispatch span.
func (c CallSpan) Degraded(ctx context.Context, d Degraded) {
	if c.sp != nil {
		sp := c.sp.rec.add(recDegraded, c.sp.idx, SpanDegradedReply)
		sp.s1, sp.s2, sp.s3, sp.s4 = d.Reason, d.Model, d.Mode, d.Code
		sp.finish()
		return
	}
	var a [4]attribute.KeyValue
	_, span := c.s.tracer.Start(c.Context(ctx), SpanDegradedReply,
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(appendDegradedAttrs(a[:0], &d)...))
	span.End()
}

// CallEnd is what the dispatch and SERVER spans record when the request ends.
type CallEnd struct {
	Model, Chain string
	Hops         int
	Outcome      string
	Path         string // hopgate.failover.path
	Tenant       string // "" when the gateway has no client keys
	ServedModel  string // "" when no model served (degraded reply)
	// TimedOut marks a request that met a timer that did not fail it (the
	// gate committing on its timeout): the trace is kept like a failover.
	TimedOut bool
}

// End ends the dispatch span and puts the request's outcome on the SERVER
// span (the span of ctx, the handler's context). A compact record goes to
// the sampler here: every span of the request has ended.
func (c CallSpan) End(ctx context.Context, e *CallEnd) {
	if sp := c.sp; sp != nil {
		r := sp.rec
		if r.sent {
			// Ended before: the record is the exporters' now, read
			// from their goroutines, and must not change.
			return
		}
		r.call = *e
		if callFailed(e.Outcome) {
			sp.fail(e.Outcome)
		}
		sp.finish()
		endServer(ctx, e)
		r.sent = true
		r.s.sink.endRecord(r)
		return
	}
	var a [7]attribute.KeyValue
	c.live.SetAttributes(appendCallEndAttrs(a[:0], e)...)
	if callFailed(e.Outcome) {
		c.live.SetStatus(codes.Error, e.Outcome)
	}
	c.live.End()
	endServer(ctx, e)
}

// endServer puts the request's outcome on the SERVER span of ctx.
func endServer(ctx context.Context, e *CallEnd) {
	server := trace.SpanFromContext(ctx)
	r := [5]attribute.KeyValue{
		attribute.String(AttrFailoverPath, e.Path),
		attribute.String(AttrOutcome, e.Outcome),
		attribute.String(AttrModel, e.Model),
	}
	n := 3
	if e.Tenant != "" {
		r[n] = attribute.String(AttrTenant, e.Tenant)
		n++
	}
	if e.TimedOut {
		r[n] = attribute.Bool(AttrTimedOut, true)
		n++
	}
	server.SetAttributes(r[:n]...)
	switch e.Outcome {
	case OutcomeOK, OutcomeFailoverOK, OutcomeFinalError, OutcomeCanceled:
		// the client's own errors and departures are not the server's
	default:
		server.SetStatus(codes.Error, e.Outcome)
	}
}

// HopStart is what is known of a hop before it is sent.
type HopStart struct {
	Operation     string // gen_ai.operation.name, e.g. OperationChat
	Provider      string // gen_ai.provider.name
	RequestModel  string // the chain entry's upstream model
	Channel       string
	ChannelRegion string
	Index         int // hopgate.hop.index: attempts before this one
	Retry         int // same-channel retry number (0: first try)
	// BaseURL and Path make server.address, server.port and url.full.
	BaseURL, Path string
	// Continuation: the mode of a mid-stream resume hop ("" otherwise) and
	// the bytes of text already delivered that it must continue.
	Continuation string
	Delivered    int
}

// HopSpan is the CLIENT span of one hop ("{operation} {upstream_model}").
type HopSpan struct {
	s    *Spans
	sp   *spanRec
	live trace.Span
}

// StartHop starts a hop's span under parent; the returned context carries
// it (the upstream request's traceparent names it).
func (s *Spans) StartHop(parent context.Context, h *HopStart) (context.Context, HopSpan) {
	u := s.urlAttrs(h.BaseURL, h.Path)
	name := s.name(h.Operation, h.RequestModel)
	if p := spanIn(parent); p != nil {
		r := p.rec
		sp := r.add(recHop, p.idx, name)
		hr := r.newHop(sp)
		hr.start, hr.url = *h, u
		return trace.ContextWithSpan(parent, sp), HopSpan{s: s, sp: sp}
	}
	var a [12]attribute.KeyValue
	ctx, span := s.tracer.Start(parent, name,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(appendHopStartAttrs(a[:0], h, u)...))
	return ctx, HopSpan{s: s, live: span}
}

// urlKey is an upstream URL as the config gives it.
type urlKey struct{ base, path string }

// urlAttrs returns the server.address, server.port and url.full attributes
// of the upstream URL base+path (none if it does not parse: the request
// then fails before it is sent).
func (s *Spans) urlAttrs(base, path string) []attribute.KeyValue {
	return s.urls.get(urlKey{base, path}, maxCachedURLs, func() []attribute.KeyValue {
		u, err := url.Parse(base + path)
		if err != nil {
			return nil
		}
		port := u.Port()
		if port == "" {
			port = "443"
			if u.Scheme == "http" {
				port = "80"
			}
		}
		p, _ := strconv.Atoi(port)
		return []attribute.KeyValue{
			attribute.String("server.address", u.Hostname()),
			attribute.Int("server.port", p),
			attribute.String("url.full", u.Scheme+"://"+u.Host+u.Path),
		}
	})
}

// child starts a span of kind what named name under the record span ctx
// carries, the hop itself when ctx carries none of its record's.
func (h HopSpan) child(ctx context.Context, what recKind, name string) *spanRec {
	parent := h.sp.idx
	if p := spanIn(ctx); p != nil && p.rec == h.sp.rec {
		parent = p.idx
	}
	return h.sp.rec.add(what, parent, name)
}

// AwaitSpan is the hop's "await headers" span: L4's wait.
type AwaitSpan struct {
	sp   *spanRec
	live trace.Span
}

// AwaitHeaders starts the "await headers" span under the hop (ctx: the
// hop's context).
func (h HopSpan) AwaitHeaders(ctx context.Context) AwaitSpan {
	if h.sp != nil {
		return AwaitSpan{sp: h.child(ctx, recAwait, SpanAwaitHeaders)}
	}
	_, span := h.s.tracer.Start(ctx, SpanAwaitHeaders, trace.WithSpanKind(trace.SpanKindInternal))
	return AwaitSpan{live: span}
}

// Arrived ends the wait: headers arrived, or the hop ended without failing
// the channel (the client left).
func (a AwaitSpan) Arrived() {
	if a.sp != nil {
		a.sp.finish()
		return
	}
	a.live.End()
}

// TimedOut ends the wait with the header timeout after d.
func (a AwaitSpan) TimedOut(d time.Duration) {
	desc := "header timeout after " + d.String()
	if a.sp != nil {
		a.sp.flag = true
		a.sp.fail(desc)
		a.sp.finish()
		return
	}
	a.live.SetAttributes(attribute.String(AttrErrorType, ErrTypeHeaderTimeout))
	a.live.SetStatus(codes.Error, desc)
	a.live.End()
}

// Failed ends the wait with a transport error.
func (a AwaitSpan) Failed(err error) {
	if a.sp != nil {
		a.sp.fail(err.Error())
		a.sp.finish()
		return
	}
	a.live.SetStatus(codes.Error, err.Error())
	a.live.End()
}

// GateSpan is the hop's "stream gate" span: L3's hold.
type GateSpan struct {
	sp   *spanRec
	live trace.Span
}

// Gate starts the "stream gate" span under the hop.
func (h HopSpan) Gate(ctx context.Context) GateSpan {
	if h.sp != nil {
		return GateSpan{sp: h.child(ctx, recGate, SpanStreamGate)}
	}
	_, span := h.s.tracer.Start(ctx, SpanStreamGate, trace.WithSpanKind(trace.SpanKindInternal))
	return GateSpan{live: span}
}

// Decided ends the gate with its decision and what it held.
func (g GateSpan) Decided(decision string, frames, bytes int) {
	if g.sp != nil {
		g.sp.s1, g.sp.n1, g.sp.n2 = decision, int64(frames), int64(bytes)
		if gateFailed(decision) {
			g.sp.fail(decision)
		}
		g.sp.finish()
		return
	}
	var a [3]attribute.KeyValue
	g.live.SetAttributes(appendGateAttrs(a[:0], decision, frames, bytes)...)
	if gateFailed(decision) {
		g.live.SetStatus(codes.Error, decision)
	}
	g.live.End()
}

// Dropped records what a cross-family hop left out of the request: fields
// the target family cannot express, betas its allow-list refused.
func (h HopSpan) Dropped(fields, betas []string) {
	if len(fields) == 0 && len(betas) == 0 {
		return
	}
	if h.sp != nil {
		if len(fields) > 0 {
			h.sp.hop.fields = fields
		}
		if len(betas) > 0 {
			h.sp.hop.betas = betas
		}
		return
	}
	var a [2]attribute.KeyValue
	h.live.SetAttributes(appendDroppedAttrs(a[:0], fields, betas)...)
}

// Error records err as an exception event.
func (h HopSpan) Error(err error) {
	if err == nil {
		return
	}
	if h.sp != nil {
		h.sp.event("", err)
		return
	}
	h.live.RecordError(err)
}

// Stream ends of a committed answer (hopgate.stream.end).
const (
	StreamInterrupted = "interrupted" // in-band upstream_stream_interrupted, no [DONE]
	StreamAborted     = "aborted"     // a binary body: the connection was broken
	StreamClientGone  = "client_gone"
	StreamResumed     = "resumed"       // a continuation completed the stream
	StreamShutdown    = "shutting_down" // in-band gateway_shutting_down: the gateway's drain ran out
)

// StreamEnd records how a committed answer ended (the hop's end gives an
// interrupted or aborted one error.type stream_interrupted) and why, for
// an aborted one, as an event.
func (h HopSpan) StreamEnd(end, why string) {
	if h.sp != nil {
		h.sp.hop.streamEnd = end
		if end == StreamAborted {
			h.sp.event(abortedEvent(why), nil)
		}
		return
	}
	h.live.SetAttributes(attribute.String(AttrStreamEnd, end))
	if end == StreamAborted {
		h.live.AddEvent(abortedEvent(why))
	}
}

// HopEnd is how a hop ended.
type HopEnd struct {
	Outcome string // hopgate.hop.outcome
	Status  int    // the upstream response status (0: none)
	// Failed: the channel failed; the span's status is an error described
	// by Label, its fate on the failover path.
	Failed     bool
	Label      string
	ErrorType  string        // error.type ("" for none)
	RetryAfter time.Duration // the upstream's Retry-After (0: none)
	// The serving hop's response model and usage.
	ResponseModel             string
	InputTokens, OutputTokens int64
	Usage                     bool
	// Dropped counts frames of a served stream that were not JSON.
	Dropped int
}

// End ends the hop's span with every attribute of its end in one call.
func (h HopSpan) End(e *HopEnd) {
	if sp := h.sp; sp != nil {
		sp.hop.end, sp.hop.ended = *e, true
		if e.Failed {
			sp.fail(e.Label)
		}
		sp.finish()
		return
	}
	var a [9]attribute.KeyValue
	h.live.SetAttributes(appendHopEndAttrs(a[:0], e)...)
	if e.Failed {
		h.live.SetStatus(codes.Error, e.Label)
	}
	h.live.End()
}
