package dispatch

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

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

// errChainDeadline is why a call stopped at its chain deadline (the cause
// of its running hop's context).
var errChainDeadline = errors.New("chain deadline exceeded before an answer was committed")

// call is one client request while its chains are walked: L2 (the walk,
// same-channel retries, fallbacks, the forced trial of a fully open chain),
// the steps of the failover path and the outcome. Each hop is an attempt
// (attempt.go); what reached the client belongs to the responder
// (responder.go).
type call struct {
	e         *Engine
	req       *Request
	rw        responder
	clientCtx context.Context // the client's: cancellation means the client left
	ctx       context.Context // clientCtx plus the dispatch span: every hop's parent
	stop      walkStop
	deadline  clockwork.Timer // the chain deadline (nil: none)
	start     time.Time
	requestID string
	span      telemetry.CallSpan

	steps    []telemetry.Step
	attempts int
	// statuses of upstream answers of failed hops; -1 marks a hop without one.
	statuses   []int
	served     *config.Model
	failedOver bool
	// demoted: chain entries early warning moved to the end (demote.go).
	demoted    []demotedEntry
	retryAfter time.Duration // soonest Retry-After of a failed hop
	timedOut   bool          // the gate committed on its timeout (trace kept)
	usage      Usage         // reported by the hop that served the answer
	// native: a Responses field only the OpenAI family serves, for a walk
	// that skips Anthropic-family entries (responses.go); "" for most.
	native string
	// sp: the speech request, parsed for elevenlabs entries (speech.go).
	sp *speechCall
	// ans is what Start returns; a committed stream (ans.open) is passed
	// on from the caller's frame (pump.go), and the walk is over once it
	// is open.
	ans Answer
	// rt is a realtime session's client side (realtime.go); nil for
	// every other request.
	rt *session
	// prompt counts the input tokens of a streamed Anthropic request a
	// translated stream reports up front (promptcount.go); nil until a hop
	// needs it.
	prompt *promptCount

	// Backing arrays of steps and statuses: most requests take a step or
	// two, and the call is allocated anyway.
	stepsBuf    [4]telemetry.Step
	statusesBuf [4]int
}

// Serve walks the chain for req and writes exactly one response to w.
func (e *Engine) Serve(w http.ResponseWriter, r *http.Request, req *Request) Result {
	a := e.Start(w, r, req)
	a.Pump()
	return a.End()
}

// Start is Serve up to the commit of a streamed answer: it walks the chain
// and returns the request's Answer, answered, or with a committed stream
// still open that the caller passes on with Answer.Pump; Answer.End then
// returns the Result.
//
// A stream parks its goroutine for minutes in Pump's read of the next
// frame, and the runtime shrinks a goroutine stack only while its live
// part is under a quarter of it: returning from the walk before the
// stream is passed on leaves only the caller's frames under Pump, and
// the walk's deep frames (begin, run, the hops, the gate) are gone by
// then (docs/performance.md, memory per idle stream).
func (e *Engine) Start(w http.ResponseWriter, r *http.Request, req *Request) *Answer {
	c := e.begin(w, r, req)
	done := false
	defer func() {
		if !done {
			c.release() // a panic in the walk
		}
	}()
	c.run()
	done = true
	return &c.ans
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
		req:       req,
		clientCtx: r.Context(),
		start:     e.clock.Now(),
	}
	c.rw.w, c.rw.rc = w, http.NewResponseController(fw)
	c.ans.c, c.ans.r = c, r
	c.steps, c.statuses = c.stepsBuf[:0], c.statusesBuf[:0]
	c.requestID = RequestID(r.Context())
	ctx, span := e.tel.Spans.StartCall(r.Context(), req.Model.Name)
	c.span = span

	// The chain deadline ends the request with the degraded reply unless an
	// answer was claimed first; a committed stream is never cut by it.
	c.ctx, c.stop.client = ctx, c.clientCtx
	if d := req.Model.Policy.ChainDeadline; d > 0 {
		c.deadline = e.clock.AfterFunc(d, func() {
			if c.rw.expire() {
				c.stop.cancel(errChainDeadline)
			}
		})
	}
	return c
}

// release stops the chain deadline and the call, and with it the hop the
// walk started last.
func (c *call) release() {
	if c.deadline != nil {
		c.deadline.Stop()
	}
	c.stop.cancel(context.Canceled)
}

// walkStop is why a call's walk stops before its client leaves (the chain
// deadline, the call's end), and the running hop's context, which is
// cancelled with that cause. The call has no cancellable context of its
// own: a context.WithCancelCause between the client's and each hop's cost
// a context, its done channel and its children map per request: 5 of a
// completion's allocations and 335 of its bytes (BenchmarkCompletionThroughput).
type walkStop struct {
	client context.Context // the client's
	mu     sync.Mutex
	cause  error
	hop    context.CancelCauseFunc // the running hop's (or backoff's)
}

// cancel stops the walk with cause and cancels the running hop's context
// with it. The first cause stays, and a client that left first is that
// cause: a deadline after it is a canceled request, not a timed-out one,
// as when the call's context was a child of the client's. Safe from any
// goroutine (the chain deadline's timer).
func (s *walkStop) cancel(cause error) {
	s.mu.Lock()
	if s.cause == nil {
		if s.client.Err() != nil {
			cause = context.Cause(s.client)
		}
		s.cause = cause
	}
	cause = s.cause
	hop := s.hop
	s.mu.Unlock()
	if hop != nil {
		hop(cause)
	}
}

// watch makes hop the running hop's cancel: a cancel from now on reaches
// it, and one that came first cancels it at once.
func (s *walkStop) watch(hop context.CancelCauseFunc) {
	s.mu.Lock()
	s.hop = hop
	cause := s.cause
	s.mu.Unlock()
	if cause != nil {
		hop(cause)
	}
}

// err is why the walk must stop (nil: it goes on): the chain deadline, the
// call's end or the client's leaving; what the call context's
// context.Cause was when the call had one.
func (s *walkStop) err() error {
	s.mu.Lock()
	cause := s.cause
	s.mu.Unlock()
	if cause == nil && s.client.Err() != nil {
		cause = context.Cause(s.client)
	}
	return cause
}

// end records the request on the dispatch and server spans, the request
// counter and the failover log, and returns its summary.
//
//go:noinline
func (c *call) end(r *http.Request) Result {
	req := c.req
	path := telemetry.FormatPath(c.steps)
	res := Result{Outcome: c.rw.outcome, Status: c.rw.status, Path: path, Attempts: c.attempts, Aborted: c.rw.aborted,
		Answered: c.rw.answered, Usage: c.usage, Delivered: c.rw.counted}
	if c.served != nil {
		res.ServedModel = c.served.Name
	}
	c.span.End(r.Context(), &telemetry.CallEnd{
		Model: req.Model.Name, Chain: c.e.chain(req.Model), Hops: c.attempts, Outcome: res.Outcome,
		Path: path, Tenant: req.Tenant, ServedModel: res.ServedModel, TimedOut: c.timedOut,
	})
	c.e.tel.Metrics.Request(r.Context(), req.Model.Name, req.Operation, res.Outcome)
	if len(c.steps) > 1 || (res.Outcome != OutcomeOK && res.Outcome != OutcomeCanceled) {
		c.e.tel.Failovers.Add(telemetry.FailoverEntry{
			Time: c.start, Model: req.Model.Name, ServedModel: res.ServedModel, Path: path,
			Outcome: res.Outcome, Status: res.Status, TraceID: c.requestID, Attempts: c.attempts,
		})
	}
	return res
}

// run walks the model's chain, then its opt-in fallbacks that serve the
// request's operation. A realtime session has none: its 101, sent before
// the walk, names the model (X-Hopgate-Model), and a session opened on
// another model would be the silent substitution DESIGN.md §3 forbids.
func (c *call) run() {
	models := make([]*config.Model, 0, 1+len(c.req.Model.FallbackModels))
	models = append(models, c.req.Model)
	op := c.req.Operation
	for _, name := range c.req.Model.FallbackModels {
		if op == config.OpRealtime {
			break
		}
		if m := c.req.Config.Model(name); m != nil && m.Serves(op) {
			models = append(models, m)
		}
	}
	c.native = nativeOnly(c.req, models)
	c.sp = speechFor(c.req, models)
	contextFallbackUsed := false
	var last *classify.HopError
	var skips []skipped
	tried := 0
	for i := 0; i < len(models); i++ {
		m := models[i]
		c.served = m
		var n int
		last, skips, n = c.walkChain(m, skips)
		if c.over() {
			return
		}
		tried += n
		if last != nil && last.ContextLength() && m.ContextFallback != "" && !contextFallbackUsed {
			if fb := c.req.Config.Model(m.ContextFallback); fb != nil && fb.Serves(op) {
				// The request does not fit this model: the model itself
				// named a larger one. Visible in the answer, never silent.
				contextFallbackUsed = true
				models = append(models[:i+1], fb)
				continue
			}
		}
		if last != nil && last.Class() != classify.Retryable || c.stop.err() != nil {
			break
		}
	}
	if tried == 0 && len(skips) > 0 && c.stop.err() == nil {
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
		last = c.tryChannel(best.model, best.entry, best.br, best.br.ForceTrial())
		if c.over() {
			return
		}
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

// walkChain tries one model's chain, skipping open channels (and with
// demoted channels last, see demote.go), until an answer is written or a
// hop fails with a result that is not retryable.
// It returns the last hop's error (nil when none was tried), the skips so
// far, and how many entries it tried, so run can decide on a forced trial.
func (c *call) walkChain(m *config.Model, skips []skipped) (last *classify.HopError, _ []skipped, tried int) {
	for _, entry := range chainOrder(c, m) {
		if c.stop.err() != nil {
			return c.ctxError(), skips, tried
		}
		if c.native != "" && config.AnthropicFamily(entry.Channel.Provider) {
			c.steps = append(c.steps, unsupportedStep(entry))
			continue
		}
		if e := c.sp.skip(c.req, c.requestID, entry); e != nil {
			c.steps = append(c.steps, unsupportedStep(entry))
			if last == nil {
				last = e // the answer when no entry can serve the request
			}
			continue
		}
		br := c.e.breakerFor(entry.Channel)
		ticket, ok := br.Allow()
		if !ok {
			c.skip(m, entry, br, false)
			skips = append(skips, skipped{m, entry, br, br.ReopenAt()})
			continue
		}
		tried++
		last = c.tryChannel(m, entry, br, ticket)
		if c.over() || last == nil || last.Class() != classify.Retryable {
			return last, skips, tried
		}
	}
	return last, skips, tried
}

// skip records an L1 skip: nothing was sent to the channel.
func (c *call) skip(m *config.Model, entry config.Entry, br *breaker.Breaker, forced bool) {
	ch := entry.Channel
	c.span.Skip(c.ctx, telemetry.Skip{
		Channel: ch.ID, ChannelRegion: ch.Region, State: br.State().String(), ReopenAt: br.ReopenAt(), Forced: forced,
	})
	if forced {
		c.steps = append(c.steps, telemetry.Step{Channel: ch.ID, Result: "forced"})
		return
	}
	c.steps = append(c.steps, telemetry.Step{Channel: ch.ID, Result: "open"})
	c.e.tel.Metrics.BreakerSkip(c.ctx, ch.ID, ch.Region, m.Name)
}

// tryChannel sends the request to one channel, with the channel's optional
// same-channel retries. It returns the last hop's error, nil on success.
func (c *call) tryChannel(m *config.Model, entry config.Entry, br *breaker.Breaker, ticket breaker.Ticket) *classify.HopError {
	ch := entry.Channel
	// held: ticket is ours until recorded or handed to the open stream. A
	// panic in the hop gives it back, or a half-open channel's only trial
	// slot would stay taken until the breaker's trial timeout.
	held := true
	defer func() {
		if held {
			br.Done(ticket, breaker.Excluded)
		}
	}()
	for try := 0; ; try++ {
		err := c.hop(m, entry, try)
		if err == errStreamOpen {
			// The hop's result reaches the breaker when the stream ends.
			if c.req.Operation == config.OpRealtime && ticket.Trial() && !ticket.Forced() {
				// A session lasts minutes: as the half-open trial it would
				// hold the channel's only slot (every other request
				// skipped) until it ends. Its open answers the trial; its
				// end still reports, on a ticket that holds no slot.
				br.Done(ticket, breaker.Success)
				ticket = br.ForceTrial()
			}
			c.ans.br, c.ans.ticket = br, ticket
			held = false
			return err
		}
		held = false
		c.recordBreaker(br, ticket, err)
		if c.over() || err == nil || err.Class() != classify.Retryable {
			return err
		}
		// Same-channel retry: never after a timeout of any kind (the
		// channel already cost the caller that wait: the next entry is
		// tried instead), never past the chain deadline.
		if try >= ch.Retries || err.Timeout() || err.ChainDeadline() || c.stop.err() != nil {
			return err
		}
		wait := c.backoff(try, err.RetryAfter, m.Policy.RetryAfterMax)
		if wait < 0 {
			return err // the provider asked for longer than we wait: move on
		}
		if !c.sleep(ch, wait) {
			return err
		}
		var ok bool
		if ticket, ok = br.Allow(); !ok {
			return err
		}
		held = true
	}
}

// hop runs one attempt on entry's channel; a stream cut after commit is
// then resumed (mid_stream: resume) or ended with the in-band error.
func (c *call) hop(m *config.Model, entry config.Entry, try int) *classify.HopError {
	a := c.newAttempt(m, entry, try, "")
	if c.rt != nil {
		err := (&rtAttempt{attempt: a}).session() // realtime_hop.go
		if err == errStreamOpen {
			return err // the hop ends with its session (rtAttempt.pass)
		}
		a.end(err)
		return err
	}
	err := a.run()
	if err == errStreamOpen {
		return err // the hop ends with its stream (Answer.End)
	}
	return a.finish(err)
}

// finish ends a hop of the walk: its span, metrics and step, then, for a
// stream cut after commit, the resume or the in-band error.
func (a *attempt) finish(err *classify.HopError) *classify.HopError {
	a.end(err)
	if err != nil && err.Kind == classify.KindCut && !a.c.rw.aborted {
		a.c.afterCut(a.m, a.entry, a.why, a.codec)
	}
	if err != nil && err.Kind == classify.KindShutdown {
		a.c.rw.deliveringCut(a.c.req.Delivering, a.c.usage) // the error frame is the last write
		a.c.rw.interrupt(shutdownFrame(a.c.req, a.c.requestID, a.codec))
	}
	return err
}

// over reports that the walk is over: an answer was written, or a
// committed stream waits to be passed on (Start).
func (c *call) over() bool { return c.rw.written || c.ans.open }

// afterCut continues a committed stream that was cut, or ends it with the
// in-band error frame: a rejected continuation never masks the failure.
func (c *call) afterCut(m *config.Model, entry config.Entry, why string, k codec) {
	if m.Policy.MidStream == config.MidStreamResume && !c.rw.toolCalls && !c.e.streams.isClosing() && c.resume(m, entry) {
		c.rw.outcome = OutcomeFailoverOK
		return
	}
	c.rw.deliveringCut(c.req.Delivering, c.usage) // the error frame is the last write
	c.rw.interrupt(cutFrame(c.req, c.requestID, k, "channel "+entry.Channel.ID+": "+why+"; the answer above is incomplete"))
}

// recordBreaker feeds a hop's result to the breaker (DESIGN.md §3 effects).
func (c *call) recordBreaker(br *breaker.Breaker, t breaker.Ticket, err *classify.HopError) {
	switch {
	case c.req.CountTokens:
		// A count says little of how the channel serves (DESIGN.md §14).
		br.Done(t, breaker.Excluded)
	case err == nil:
		br.Done(t, breaker.Success)
	case !err.AboutChannel():
		// Final client errors, cancellations, the chain deadline and the
		// buffer budget never count: counting the deadline would open
		// healthy channels in an incident (header_timeout, below the
		// deadline in the chat profile, still catches a hanging channel),
		// and counting the budget would let an overloaded gateway open
		// every breaker it has.
		br.Done(t, breaker.Excluded)
	default:
		// The provider said when to come back: honoured even below the
		// failure threshold (capped at breaker.MaxRetryAfter), unless the
		// result is stale.
		br.DoneRetryAfter(t, breaker.Failure, err.RetryAfter)
		if ra := err.RetryAfter; ra > 0 && (c.retryAfter == 0 || ra < c.retryAfter) {
			c.retryAfter = ra
		}
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
// The wait is watched like a hop: the chain deadline ends it.
func (c *call) sleep(ch *config.Channel, d time.Duration) bool {
	defer c.span.Backoff(c.ctx, ch.ID, d)()
	ctx, stop := context.WithCancelCause(c.ctx)
	defer stop(nil)
	c.stop.watch(stop)
	t := c.e.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return true
	case <-ctx.Done():
		return false
	}
}

// ctxError is the walk's result when the request context ended between hops.
func (c *call) ctxError() *classify.HopError {
	cause := c.stop.err()
	if cause == errChainDeadline {
		return &classify.HopError{Kind: classify.KindDeadline, Cause: errChainDeadline}
	}
	return &classify.HopError{Kind: classify.KindCanceled, Cause: cause}
}

// finish writes the reply when no hop wrote one: a final upstream answer
// (after fallbacks), exhaustion, the chain deadline, or nothing at all for a
// client that left.
func (c *call) finish(last *classify.HopError) {
	if c.rt != nil {
		c.rt.finish(c, last) // the client is a WebSocket (realtime.go)
		return
	}
	switch {
	case c.clientCtx.Err() != nil && c.stop.err() != errChainDeadline:
		c.rw.outcome = OutcomeCanceled
		c.rw.status = 499 // client closed request (nginx convention; never sent)
	case !c.rw.claim():
		// The chain deadline claimed the reply, possibly an instant ago,
		// after the last hop failed: its reply, never "exhausted".
		c.deadlineReply()
	case last != nil && last.Class() == classify.Final:
		// A final upstream answer (e.g. context length without a
		// context_fallback): passed through unchanged.
		c.writeFinal(last)
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

// writeFinal passes a final upstream answer through unchanged (the caller
// holds the claim).
func (c *call) writeFinal(e *classify.HopError) {
	g := c.headers()
	c.rw.writeHead(head{status: e.Status, contentType: e.ContentType, length: int64(len(e.Body))}, &g)
	_ = c.rw.write(e.Body)
	c.rw.outcome = OutcomeFinalError
}

// claimAnswer claims the reply for the answer of the hop on channel, whose
// result on the failover path is step, and returns hopgate's headers for
// it, to be written with the answer's head; false when the chain deadline
// claimed the reply first.
func (c *call) claimAnswer(channel, step string) (gatewayHeaders, bool) {
	if !c.rw.claim() {
		return gatewayHeaders{}, false
	}
	// The path includes the hop being committed: its own step is appended
	// when the hop ends.
	c.steps = append(c.steps, telemetry.Step{Channel: channel, Result: step})
	g := c.headers()
	c.steps = c.steps[:len(c.steps)-1]
	c.rw.answered = true
	return g, true
}

// headers are hopgate's response headers as of now: X-Hopgate-Model names
// the model that served (the requested one when none did).
func (c *call) headers() gatewayHeaders {
	model := c.req.Model.Name
	if c.served != nil {
		model = c.served.Name
	}
	g := gatewayHeaders{requestID: c.requestID, model: model, attempts: strconv.Itoa(c.attempts),
		traceparent: Traceparent(c.clientCtx)}
	if c.req.Config.Telemetry.Path {
		g.path = telemetry.FormatPath(c.steps)
	}
	return g
}

// okOutcome is the outcome of a request answered now: plain ok, or a
// failover when anything came before (a skip, a failed hop, a fallback).
func (c *call) okOutcome() string {
	if c.failedOver || len(c.steps) > 0 || c.served != c.req.Model {
		return OutcomeFailoverOK
	}
	return OutcomeOK
}

// lostCommit: the chain deadline fired while a hop was about to commit. Its
// timer claimed the reply but may not have stopped the walk yet; stop it
// here (same cause), so the walk ends at once and finish answers with the
// deadline reply.
func (c *call) lostCommit() *classify.HopError {
	c.stop.cancel(errChainDeadline)
	return &classify.HopError{Kind: classify.KindDeadline, Cause: errChainDeadline}
}

// dropBody lets go of the client body once an answer is committed that no
// later hop can need: an open stream then holds no copy of a prompt larger
// than smallBody (a smaller one stays in the hop's request body).
func (c *call) dropBody() {
	c.req.Body = nil
	c.req.BodyHold.Release()
}

// sharedStatus: when every hop returned the same upstream status, the client
// gets that status (a 429 everywhere is a 429), else 502. Only a status
// that reads retryable is passed on: a Bedrock 400 for our account's quota
// failed over, and would tell the client its request is at fault.
func sharedStatus(statuses []int) (int, bool) {
	if len(statuses) == 0 {
		return 0, false
	}
	for _, s := range statuses {
		if s != statuses[0] || s <= 0 {
			return 0, false
		}
	}
	if statuses[0] < 400 || classify.Status(statuses[0]) != classify.Retryable {
		return 0, false
	}
	return statuses[0], true
}

// chainKey keys Engine.chains: the size of a pointer, so boxing it for the
// sync.Map does not allocate.
type chainKey struct{ m *config.Model }

// maxCachedChains bounds Engine.chains: each reload brings new models.
const maxCachedChains = 4096

// chain is the hopgate.chain attribute of m ("a,b,c"), cached.
func (e *Engine) chain(m *config.Model) string {
	if v, ok := e.chains.Load(chainKey{m}); ok {
		return v.(string)
	}
	var b strings.Builder
	for i, en := range m.Chain {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(en.Channel.ID)
	}
	v := b.String()
	if e.nchains.Load() < maxCachedChains {
		if _, loaded := e.chains.LoadOrStore(chainKey{m}, v); !loaded {
			e.nchains.Add(1)
		}
	}
	return v
}
