package telemetry

import (
	"context"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Spans records the request path's spans (DESIGN.md §5) for package
// dispatch, as Metrics records its metrics: the engine says what happened
// (a skip, headers awaited, a header timeout, a gate decision, a hop's
// end), Spans turns it into spans and attributes. It never decides what a
// request does next.
//
// The SDK copies attributes into a span at every SetAttributes call and
// regrows its slice for each call after Start, so every span gets its
// attributes in as few calls as possible (at start and at end), from
// fixed-size arrays; the strings that repeat for every request (span names,
// the upstream URL's attributes) are built once and cached.
type Spans struct {
	tracer trace.Tracer
	names  cowCache[nameKey, string]
	urls   cowCache[urlKey, []attribute.KeyValue]
}

// NewSpans records spans with tracer.
func NewSpans(tracer trace.Tracer) *Spans {
	return &Spans{tracer: tracer}
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
	span trace.Span
}

// StartCall starts the dispatch span of a request for model under ctx (the
// SERVER span's context).
func (s *Spans) StartCall(ctx context.Context, model string) (context.Context, CallSpan) {
	ctx, span := s.tracer.Start(ctx, s.name(SpanDispatch, model), trace.WithSpanKind(trace.SpanKindInternal))
	return ctx, CallSpan{s: s, span: span}
}

// Context returns ctx (its values, not its cancellation) carrying the
// dispatch span: spans started late (the degraded reply after the chain
// deadline cancelled the request context, a mid-stream continuation) stay
// under dispatch.
func (c CallSpan) Context(ctx context.Context) context.Context {
	return trace.ContextWithSpan(ctx, c.span)
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
	var a [5]attribute.KeyValue
	a[0] = attribute.String(AttrChannel, k.Channel)
	a[1] = attribute.String(AttrChannelRegion, k.ChannelRegion)
	a[2] = attribute.String(AttrBreakerState, k.State)
	n := 3
	if !k.ReopenAt.IsZero() {
		a[n] = attribute.String(AttrBreakerReopenAt, k.ReopenAt.UTC().Format(time.RFC3339Nano))
		n++
	}
	if k.Forced {
		a[n] = attribute.Bool(AttrBreakerForced, true)
		n++
	}
	_, span := c.s.tracer.Start(ctx, c.s.name(SpanBreakerSkip, k.Channel),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(a[:n]...))
	if k.Forced {
		span.AddEvent("every channel of the chain is open: trying the one whose cooldown ends first")
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
	c.span.AddEvent(EventEarlyWarning, trace.WithAttributes(a[:n]...))
}

// Backoff records the wait before a same-channel retry; the returned func
// ends it.
func (c CallSpan) Backoff(ctx context.Context, channel string, d time.Duration) (end func()) {
	_, span := c.s.tracer.Start(ctx, SpanRetryBackoff,
		trace.WithAttributes(attribute.String(AttrChannel, channel), attribute.Int64(AttrBackoffMillis, d.Milliseconds())))
	return func() { span.End() }
}

// Degraded records the degraded reply (exhaustion or chain deadline).
type Degraded struct {
	Reason, Model, Mode, Code string
}

// Degraded records a "degraded reply" span under the dispatch span.
func (c CallSpan) Degraded(ctx context.Context, d Degraded) {
	_, span := c.s.tracer.Start(c.Context(ctx), SpanDegradedReply,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String(AttrDegradedReason, d.Reason),
			attribute.String(AttrModel, d.Model),
			attribute.String(AttrDegradedMode, d.Mode),
			attribute.String(AttrErrorCode, d.Code),
		))
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
// span (the span of ctx, the handler's context).
func (c CallSpan) End(ctx context.Context, e *CallEnd) {
	server := trace.SpanFromContext(ctx)
	a := [7]attribute.KeyValue{
		attribute.String(AttrModel, e.Model),
		attribute.String(AttrChain, e.Chain),
		attribute.Int(AttrHops, e.Hops),
		attribute.String(AttrOutcome, e.Outcome),
		attribute.String(AttrFailoverPath, e.Path),
	}
	n := 5
	if e.Tenant != "" {
		a[n] = attribute.String(AttrTenant, e.Tenant)
		n++
	}
	if e.ServedModel != "" {
		a[n] = attribute.String(AttrServedModel, e.ServedModel)
		n++
	}
	c.span.SetAttributes(a[:n]...)
	if e.Outcome != OutcomeOK && e.Outcome != OutcomeFailoverOK {
		c.span.SetStatus(codes.Error, e.Outcome)
	}
	c.span.End()

	r := [5]attribute.KeyValue{
		attribute.String(AttrFailoverPath, e.Path),
		attribute.String(AttrOutcome, e.Outcome),
		attribute.String(AttrModel, e.Model),
	}
	n = 3
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
	span trace.Span
}

// StartHop starts a hop's span under parent; the returned context carries
// it (the upstream request's traceparent names it).
func (s *Spans) StartHop(parent context.Context, h *HopStart) (context.Context, HopSpan) {
	u := s.urlAttrs(h.BaseURL, h.Path)
	var a [12]attribute.KeyValue
	a[0] = attribute.String(AttrGenAIOperation, h.Operation)
	a[1] = attribute.String(AttrGenAIProvider, h.Provider)
	a[2] = attribute.String(AttrGenAIRequestModel, h.RequestModel)
	a[3] = attribute.String(AttrChannel, h.Channel)
	a[4] = attribute.String(AttrChannelRegion, h.ChannelRegion)
	a[5] = attribute.Int(AttrHopIndex, h.Index)
	n := 6
	switch {
	case h.Continuation != "":
		a[n] = attribute.String(AttrContinuationMode, h.Continuation)
		a[n+1] = attribute.Int(AttrResumeDelivered, h.Delivered)
		n += 2
	default:
		a[n] = attribute.String("http.request.method", "POST")
		n++
		if h.Retry > 0 {
			a[n] = attribute.Int(AttrHopRetry, h.Retry)
			n++
		}
	}
	n += copy(a[n:], u)
	ctx, span := s.tracer.Start(parent, s.name(h.Operation, h.RequestModel),
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(a[:n]...))
	return ctx, HopSpan{s: s, span: span}
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

// AwaitSpan is the hop's "await headers" span: L4's wait.
type AwaitSpan struct{ span trace.Span }

// AwaitHeaders starts the "await headers" span under the hop (ctx: the
// hop's context).
func (h HopSpan) AwaitHeaders(ctx context.Context) AwaitSpan {
	_, span := h.s.tracer.Start(ctx, SpanAwaitHeaders, trace.WithSpanKind(trace.SpanKindInternal))
	return AwaitSpan{span}
}

// Arrived ends the wait: headers arrived, or the hop ended without failing
// the channel (the client left).
func (a AwaitSpan) Arrived() { a.span.End() }

// TimedOut ends the wait with the header timeout after d.
func (a AwaitSpan) TimedOut(d time.Duration) {
	a.span.SetAttributes(attribute.String(AttrErrorType, ErrTypeHeaderTimeout))
	a.span.SetStatus(codes.Error, "header timeout after "+d.String())
	a.span.End()
}

// Failed ends the wait with a transport error.
func (a AwaitSpan) Failed(err error) {
	a.span.SetStatus(codes.Error, err.Error())
	a.span.End()
}

// GateSpan is the hop's "stream gate" span: L3's hold.
type GateSpan struct{ span trace.Span }

// Gate starts the "stream gate" span under the hop.
func (h HopSpan) Gate(ctx context.Context) GateSpan {
	_, span := h.s.tracer.Start(ctx, SpanStreamGate, trace.WithSpanKind(trace.SpanKindInternal))
	return GateSpan{span}
}

// Decided ends the gate with its decision and what it held.
func (g GateSpan) Decided(decision string, frames, bytes int) {
	g.span.SetAttributes(
		attribute.String(AttrGateDecision, decision),
		attribute.Int(AttrGateFramesHeld, frames),
		attribute.Int(AttrGateBytesHeld, bytes),
	)
	if decision != GateCommitContent && decision != GateCommitTimeout {
		g.span.SetStatus(codes.Error, decision)
	}
	g.span.End()
}

// Dropped records what a cross-family hop left out of the request: fields
// the target family cannot express, betas its allow-list refused.
func (h HopSpan) Dropped(fields, betas []string) {
	switch {
	case len(fields) > 0 && len(betas) > 0:
		h.span.SetAttributes(attribute.StringSlice(AttrTranslationDropped, fields), attribute.StringSlice(AttrBetaDropped, betas))
	case len(fields) > 0:
		h.span.SetAttributes(attribute.StringSlice(AttrTranslationDropped, fields))
	case len(betas) > 0:
		h.span.SetAttributes(attribute.StringSlice(AttrBetaDropped, betas))
	}
}

// Error records err as an exception event.
func (h HopSpan) Error(err error) { h.span.RecordError(err) }

// Stream ends of a committed answer (hopgate.stream.end).
const (
	StreamInterrupted = "interrupted" // in-band upstream_stream_interrupted, no [DONE]
	StreamAborted     = "aborted"     // a binary body: the connection was broken
	StreamClientGone  = "client_gone"
	StreamResumed     = "resumed" // a continuation completed the stream
)

// StreamEnd records how a committed answer ended (the hop's end gives an
// interrupted or aborted one error.type stream_interrupted) and why, for
// an aborted one, as an event.
func (h HopSpan) StreamEnd(end, why string) {
	h.span.SetAttributes(attribute.String(AttrStreamEnd, end))
	if end == StreamAborted {
		h.span.AddEvent("client connection aborted: " + why)
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
	var a [9]attribute.KeyValue
	a[0] = attribute.String(AttrHopOutcome, e.Outcome)
	n := 1
	if e.Status > 0 {
		a[n] = attribute.Int("http.response.status_code", e.Status)
		n++
	}
	if e.ErrorType != "" {
		a[n] = attribute.String(AttrErrorType, e.ErrorType)
		n++
	}
	if e.RetryAfter > 0 {
		a[n] = attribute.Float64(AttrRetryAfter, e.RetryAfter.Seconds())
		n++
	}
	if e.ResponseModel != "" {
		a[n] = attribute.String(AttrGenAIResponseMdl, e.ResponseModel)
		n++
	}
	if e.Usage {
		a[n] = attribute.Int64(AttrGenAIInputTokens, e.InputTokens)
		a[n+1] = attribute.Int64(AttrGenAIOutputTokens, e.OutputTokens)
		n += 2
	}
	if e.Dropped > 0 {
		a[n] = attribute.Int(AttrStreamDropped, e.Dropped)
		n++
	}
	h.span.SetAttributes(a[:n]...)
	if e.Failed {
		h.span.SetStatus(codes.Error, e.Label)
	}
	h.span.End()
}
