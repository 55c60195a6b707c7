package dispatch

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/dispatch/apierror"
	"github.com/hopgate/hopgate/dispatch/breaker"
	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/telemetry"
)

// Request outcomes (hopgate.outcome, the outcome label of
// hopgate_requests_total); the names live with the other telemetry names.
const (
	OutcomeOK          = telemetry.OutcomeOK
	OutcomeFailoverOK  = telemetry.OutcomeFailoverOK
	OutcomeFinalError  = telemetry.OutcomeFinalError
	OutcomeExhausted   = telemetry.OutcomeExhausted
	OutcomeDeadline    = telemetry.OutcomeDeadline
	OutcomeDegraded    = telemetry.OutcomeDegraded
	OutcomeCanceled    = telemetry.OutcomeCanceled
	OutcomeInterrupted = telemetry.OutcomeInterrupted
)

// commit states of a call: the chain deadline and the first decisive answer
// race for the right to answer the client; exactly one wins.
const (
	stateOpen int32 = iota
	stateCommitted
	stateDeadline
)

// call is the state of one client request while the chain is walked.
type call struct {
	e         *Engine
	w         http.ResponseWriter
	rc        *http.ResponseController
	req       *Request
	clientCtx context.Context // the client's context: cancellation means the client left
	ctx       context.Context // clientCtx plus the chain deadline
	// cancel ends ctx; lostCommit calls it so the chain deadline is visible
	// on ctx at once, not only when its timer goroutine gets to run.
	cancel    context.CancelCauseFunc
	deadline  clockwork.Timer // the chain deadline (nil: none)
	start     time.Time
	requestID string

	state    atomic.Int32
	steps    []telemetry.Step
	attempts int
	// statuses of upstream answers of failed hops; -1 marks a hop without one.
	statuses    []int
	served      *config.Model
	failedOver  bool
	interrupted bool
	aborted     bool // a binary body cut after commit (Result.Aborted)
	outcome     string
	status      int
	span        trace.Span    // the dispatch span
	hopChannel  string        // channel of the hop in progress
	retryAfter  time.Duration // soonest Retry-After of a failed hop
	hopStart    time.Time     // start of the hop in progress (GenAI duration)
	timedOut    bool          // the gate committed on its timeout (trace kept)

	// Backing arrays of steps and statuses: most requests take a step or
	// two, and the call is allocated anyway.
	stepsBuf    [4]telemetry.Step
	statusesBuf [4]int
}

// Serve walks the chain for req and writes exactly one response to w.
//
// Serve, like every function between it and the read that waits for the
// next frame of an open stream, keeps a small stack frame: a stream parks
// its goroutine there for minutes, and the runtime halves a goroutine's
// stack only while its live part is under a quarter of it. Work done once
// per request (begin, end) runs in calls of its own, off that stack.
func (e *Engine) Serve(w http.ResponseWriter, r *http.Request, req *Request) Result {
	c := e.begin(w, r, req)
	defer c.release()
	c.run()
	return c.end(r)
}

// begin allocates the call, starts the dispatch span and arms the chain
// deadline.
//
//go:noinline
func (e *Engine) begin(w http.ResponseWriter, r *http.Request, req *Request) *call {
	fw := w
	if req.Flusher != nil {
		fw = req.Flusher
	}
	c := &call{
		e:         e,
		w:         w,
		rc:        http.NewResponseController(fw),
		req:       req,
		clientCtx: r.Context(),
		start:     e.clock.Now(),
	}
	c.steps, c.statuses = c.stepsBuf[:0], c.statusesBuf[:0]
	c.requestID = RequestID(r.Context())

	// The dispatch span gets all its attributes in one call at the end
	// (end): the SDK copies attributes into the span at every call and
	// regrows its slice for each call after Start. None of them is for
	// samplers (hopgate's own names, no semantic convention).
	ctx, span := e.tel.Tracer.Start(r.Context(), e.cached(dispatchNameKey{req.Model}, func() string { return telemetry.SpanDispatch + " " + req.Model.Name }),
		trace.WithSpanKind(trace.SpanKindInternal))
	c.span = span

	// The chain deadline ends the request with the degraded reply unless an
	// answer was committed first; a committed stream is never cut by it.
	c.ctx, c.cancel = context.WithCancelCause(ctx)
	if d := req.Model.Policy.ChainDeadline; d > 0 {
		c.deadline = e.clock.AfterFunc(d, func() {
			if c.state.CompareAndSwap(stateOpen, stateDeadline) {
				c.cancel(errChainDeadline)
			}
		})
	}
	return c
}

// release stops the chain deadline and ends the call's context.
func (c *call) release() {
	if c.deadline != nil {
		c.deadline.Stop()
	}
	c.cancel(nil)
}

// end records the request on the dispatch and server spans, the request
// counter and the failover log, and returns its summary.
//
//go:noinline
func (c *call) end(r *http.Request) Result {
	e, req, span := c.e, c.req, c.span
	path := telemetry.FormatPath(c.steps)
	attrs := [7]attribute.KeyValue{
		attribute.String(telemetry.AttrModel, req.Model.Name),
		attribute.String(telemetry.AttrChain, e.cached(chainKey{req.Model}, func() string { return chainString(req.Model) })),
		attribute.Int(telemetry.AttrHops, c.attempts),
		attribute.String(telemetry.AttrOutcome, c.outcome),
		attribute.String(telemetry.AttrFailoverPath, path),
	}
	n := 5
	if req.Tenant != "" {
		attrs[n] = attribute.String(telemetry.AttrTenant, req.Tenant)
		n++
	}
	if c.served != nil {
		attrs[n] = attribute.String(telemetry.AttrServedModel, c.served.Name)
		n++
	}
	span.SetAttributes(attrs[:n]...)
	if c.outcome != OutcomeOK && c.outcome != OutcomeFailoverOK {
		span.SetStatus(codes.Error, c.outcome)
	}
	span.End()
	// The server span's attributes in one call (one copy into the span).
	rootAttrs := [5]attribute.KeyValue{
		attribute.String(telemetry.AttrFailoverPath, path),
		attribute.String(telemetry.AttrOutcome, c.outcome),
		attribute.String(telemetry.AttrModel, req.Model.Name),
	}
	nRoot := 3
	if req.Tenant != "" {
		rootAttrs[nRoot] = attribute.String(telemetry.AttrTenant, req.Tenant)
		nRoot++
	}
	if c.timedOut {
		rootAttrs[nRoot] = attribute.Bool(telemetry.AttrTimedOut, true)
		nRoot++
	}
	root := trace.SpanFromContext(r.Context())
	root.SetAttributes(rootAttrs[:nRoot]...)
	if c.outcome != OutcomeOK && c.outcome != OutcomeFailoverOK && c.outcome != OutcomeFinalError && c.outcome != OutcomeCanceled {
		root.SetStatus(codes.Error, c.outcome)
	}
	e.tel.Metrics.Request(r.Context(), req.Model.Name, req.Operation, c.outcome)

	res := Result{Outcome: c.outcome, Status: c.status, Path: path, Attempts: c.attempts, Aborted: c.aborted}
	if c.served != nil {
		res.ServedModel = c.served.Name
	}
	if len(c.steps) > 1 || (c.outcome != OutcomeOK && c.outcome != OutcomeCanceled) {
		e.tel.Failovers.Add(telemetry.FailoverEntry{
			Time: c.start, Model: req.Model.Name, ServedModel: res.ServedModel, Path: path,
			Outcome: c.outcome, Status: c.status, TraceID: c.requestID, Attempts: c.attempts,
		})
	}
	return res
}

// run walks the model's chain, then its opt-in fallbacks.
func (c *call) run() {
	models := make([]*config.Model, 0, 1+len(c.req.Model.FallbackModels))
	models = append(models, c.req.Model)
	for _, name := range c.req.Model.FallbackModels {
		if m := c.req.Config.Model(name); m != nil {
			models = append(models, m)
		}
	}
	contextFallbackUsed := false
	var last hopResult
	var skips []skipped
	tried := 0
	for i := 0; i < len(models); i++ {
		m := models[i]
		c.served = m
		res, done, sk, n := c.walkChain(m)
		if done {
			return
		}
		last = res
		skips = append(skips, sk...)
		tried += n
		if res.class == classify.Final && res.contextLength && m.ContextFallback != "" && !contextFallbackUsed {
			if fb := c.req.Config.Model(m.ContextFallback); fb != nil {
				// The request does not fit this model: the model itself
				// named a larger one. Visible in the answer, never silent.
				contextFallbackUsed = true
				models = append(models[:i+1], fb)
				continue
			}
		}
		if res.class == classify.Final || res.class == classify.Canceled || c.ctx.Err() != nil {
			break
		}
	}
	if tried == 0 && len(skips) > 0 && c.ctx.Err() == nil {
		// Every channel of every chain (opt-in fallback models included)
		// is open: a fully-open chain must not deadlock. Try the one whose
		// cooldown ends first, and say so in the trace. Only as a last
		// resort: while any fallback could answer, open channels get nothing.
		best := skips[0]
		for _, s := range skips[1:] {
			if s.reopen.Before(best.reopen) {
				best = s
			}
		}
		c.served = best.model
		c.skip(best.model, best.entry, best.br, true)
		res := c.tryChannel(best.model, best.entry, best.br, best.br.ForceTrial())
		if res.done {
			return
		}
		last = res
	}
	c.finish(last)
}

// skipped is a chain entry whose breaker was open.
type skipped struct {
	model  *config.Model
	entry  config.Entry
	br     *breaker.Breaker
	reopen time.Time
}

// walkChain tries one model's chain, skipping open channels. done reports
// that a response has been written (success, final error passthrough,
// cancellation, or interruption); skips and tried let run decide on a
// forced trial once every chain has been walked.
func (c *call) walkChain(m *config.Model) (last hopResult, done bool, skips []skipped, tried int) {
	last.class = classify.Retryable
	for _, entry := range m.Chain {
		if c.ctx.Err() != nil {
			return c.ctxResult(), false, skips, tried
		}
		br := c.e.breakerFor(entry.Channel)
		ticket, ok := br.Allow()
		if !ok {
			c.skip(m, entry, br, false)
			skips = append(skips, skipped{m, entry, br, br.ReopenAt()})
			continue
		}
		tried++
		res := c.tryChannel(m, entry, br, ticket)
		if res.done {
			return res, true, skips, tried
		}
		last = res
		if res.class != classify.Retryable {
			return res, false, skips, tried
		}
	}
	return last, false, skips, tried
}

// skip records an L1 skip: nothing was sent to the channel.
func (c *call) skip(m *config.Model, entry config.Entry, br *breaker.Breaker, forced bool) {
	ch := entry.Channel
	reopen := br.ReopenAt()
	attrs := []attribute.KeyValue{
		attribute.String(telemetry.AttrChannel, ch.ID),
		attribute.String(telemetry.AttrChannelRegion, ch.Region),
		attribute.String(telemetry.AttrBreakerState, br.State().String()),
	}
	if !reopen.IsZero() {
		attrs = append(attrs, attribute.String(telemetry.AttrBreakerReopenAt, reopen.UTC().Format(time.RFC3339Nano)))
	}
	if forced {
		attrs = append(attrs, attribute.Bool(telemetry.AttrBreakerForced, true))
	}
	_, span := c.e.tel.Tracer.Start(c.ctx, telemetry.SpanBreakerSkip+" "+ch.ID,
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	if forced {
		span.AddEvent("every channel of the chain is open: trying the one whose cooldown ends first")
	} else {
		c.steps = append(c.steps, telemetry.Step{Channel: ch.ID, Result: "open"})
		c.e.tel.Metrics.BreakerSkip(c.ctx, ch.ID, ch.Region, m.Name)
	}
	span.End()
	if forced {
		c.steps = append(c.steps, telemetry.Step{Channel: ch.ID, Result: "forced"})
	}
}

// tryChannel sends the request to one channel, with the channel's optional
// same-channel retries.
func (c *call) tryChannel(m *config.Model, entry config.Entry, br *breaker.Breaker, ticket breaker.Ticket) hopResult {
	ch := entry.Channel
	var res hopResult
	for try := 0; ; try++ {
		res = c.hop(m, entry, try)
		c.recordBreaker(br, ticket, res)
		if res.done || res.class != classify.Retryable {
			return res
		}
		// Same-channel retry: never after a header timeout (the channel
		// already cost us the full timeout), never past the chain deadline.
		if try >= ch.Retries || res.headerTimeout || c.ctx.Err() != nil {
			return res
		}
		wait := c.backoff(try, res.retryAfter, m.Policy.RetryAfterMax)
		if wait < 0 {
			return res // the provider asked for longer than we wait: move on
		}
		if !c.sleep(ch, wait) {
			return res
		}
		var ok bool
		if ticket, ok = br.Allow(); !ok {
			return res
		}
	}
}

// recordBreaker feeds the hop's result to the breaker (DESIGN.md §3 effects).
func (c *call) recordBreaker(br *breaker.Breaker, t breaker.Ticket, res hopResult) {
	switch res.class {
	case classify.Success:
		br.Done(t, breaker.Success)
	case classify.Retryable:
		if res.deadline {
			// The chain deadline is the caller's budget, not a verdict on
			// this channel: a later hop only gets what earlier hops left,
			// and counting it would open healthy channels in an incident
			// (header_timeout, below the deadline in the chat profile,
			// still catches a hanging channel).
			br.Done(t, breaker.Excluded)
			return
		}
		// The provider said when to come back: honoured even below the
		// failure threshold (capped at breaker.MaxRetryAfter), unless the
		// result is stale.
		br.DoneRetryAfter(t, breaker.Failure, res.retryAfter)
		if res.retryAfter > 0 && (c.retryAfter == 0 || res.retryAfter < c.retryAfter) {
			c.retryAfter = res.retryAfter
		}
	default: // final client errors and cancellations never count
		br.Done(t, breaker.Excluded)
	}
}

// backoff returns the wait before retry number try+1: the provider's
// Retry-After when given and not above max (negative: too long, move on),
// else jittered exponential backoff from 100 ms.
func (c *call) backoff(try int, retryAfter, max time.Duration) time.Duration {
	if retryAfter > 0 {
		if retryAfter > max {
			return -1
		}
		return retryAfter
	}
	base := 100 * time.Millisecond << min(try, 6)
	// Full jitter halves synchronized retries from many gateways.
	return base/2 + time.Duration(c.e.jitter()*float64(base/2))
}

// sleep waits on the engine clock; false if the request ended meanwhile.
func (c *call) sleep(ch *config.Channel, d time.Duration) bool {
	_, span := c.e.tel.Tracer.Start(c.ctx, telemetry.SpanRetryBackoff,
		trace.WithAttributes(attribute.String(telemetry.AttrChannel, ch.ID), attribute.Int64(telemetry.AttrBackoffMillis, d.Milliseconds())))
	defer span.End()
	t := c.e.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return true
	case <-c.ctx.Done():
		return false
	}
}

// ctxResult is the result when the request context ended between hops.
func (c *call) ctxResult() hopResult {
	if context.Cause(c.ctx) == errChainDeadline {
		return hopResult{class: classify.Retryable, deadline: true}
	}
	return hopResult{class: classify.Canceled}
}

// finish writes the reply when no hop produced one: exhaustion, deadline,
// final context-length error without fallback, or client cancellation.
func (c *call) finish(last hopResult) {
	switch {
	case c.clientCtx.Err() != nil && context.Cause(c.ctx) != errChainDeadline:
		c.outcome = OutcomeCanceled
		c.status = 499 // client closed request (nginx convention; never sent)
	case context.Cause(c.ctx) == errChainDeadline:
		c.deadlineReply()
	case last.final != nil:
		// A final upstream answer after fallbacks were exhausted (e.g. context
		// length without a context_fallback): pass it through unchanged,
		// unless the chain deadline claimed the reply meanwhile.
		if !c.writeFinal(last) {
			c.deadlineReply()
		}
	default:
		status := http.StatusBadGateway
		e := apierror.AllChannelsFailed(status, telemetry.FormatPath(c.steps))
		if s, ok := sharedStatus(c.statuses); ok {
			e.Status = s
		}
		// Pass on the soonest Retry-After a provider gave, so clients that
		// honour it (OpenAI SDKs do) wait as long as the provider asked.
		e.RetryAfter = min(c.retryAfter, breaker.MaxRetryAfter)
		c.degraded("exhausted", e)
	}
}

// deadlineReply is the degraded reply of a chain that hit its deadline.
func (c *call) deadlineReply() {
	c.e.tel.Metrics.ChainExceeded(c.clientCtx, c.req.Model.Name)
	c.degraded("chain_deadline", apierror.EngineOverloaded(
		"no channel answered within the chain deadline of "+c.req.Model.Policy.ChainDeadline.String()+"; path: "+telemetry.FormatPath(c.steps),
		retryAfterHint(c.req.Model.Policy.ChainDeadline)))
}

// sharedStatus: when every hop returned the same upstream status, the client
// gets that status (a 429 everywhere is a 429), else 502.
func sharedStatus(statuses []int) (int, bool) {
	if len(statuses) == 0 {
		return 0, false
	}
	for _, s := range statuses {
		if s != statuses[0] || s <= 0 {
			return 0, false
		}
	}
	if statuses[0] < 400 {
		return 0, false
	}
	return statuses[0], true
}

func retryAfterHint(d time.Duration) time.Duration {
	if d <= 0 {
		return time.Second
	}
	return d
}

// Keys of Engine.cached strings, one type per kind, each the size of a
// pointer: a larger key would allocate when boxed for the sync.Map.
type (
	chainKey        struct{ m *config.Model }
	dispatchNameKey struct{ m *config.Model }
)

// maxCachedNames bounds Engine.names: keys come from the config, and each
// reload brings new *config.Model keys.
const maxCachedNames = 4096

// cached returns the string of key k, built by build on a miss: span names
// and the chain attribute repeat for every request, and building them
// allocates.
func (e *Engine) cached(k any, build func() string) string {
	if v, ok := e.names.Load(k); ok {
		return v.(string)
	}
	v := build()
	if e.nnames.Load() < maxCachedNames {
		if _, loaded := e.names.LoadOrStore(k, v); !loaded {
			e.nnames.Add(1)
		}
	}
	return v
}

func chainString(m *config.Model) string {
	var b strings.Builder
	for i, e := range m.Chain {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e.Channel.ID)
	}
	return b.String()
}

// setHeaders sets hopgate's response headers; called once, right before the
// status line is written.
func (c *call) setHeaders(h http.Header) {
	model := c.req.Model.Name
	if c.served != nil {
		model = c.served.Name
	}
	// One backing array for the values instead of one per Set; each value
	// is capped at length 1, so an append elsewhere copies it.
	vals := make([]string, 5)
	vals[0], vals[1], vals[2] = c.requestID, model, strconv.Itoa(c.attempts)
	h["X-Request-Id"] = vals[0:1:1]
	h["X-Hopgate-Model"] = vals[1:2:2]
	h["X-Hopgate-Attempts"] = vals[2:3:3]
	if tp := Traceparent(c.clientCtx); tp != "" {
		vals[3] = tp
		h["Traceparent"] = vals[3:4:4]
	}
	if c.req.Config.Telemetry.Path {
		vals[4] = telemetry.FormatPath(c.steps)
		h["X-Hopgate-Path"] = vals[4:5:5]
	}
}

// commit claims the right to answer; false when the chain deadline won.
func (c *call) commit() bool {
	return c.state.CompareAndSwap(stateOpen, stateCommitted)
}
