package dispatch

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/dispatch/apierror"
	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/gate"
	"github.com/hopgate/hopgate/internal/sse"
	"github.com/hopgate/hopgate/telemetry"
)

// frameItem is one upstream frame. Before commit the reader goroutine hands
// it to the gate loop and raw and text are owned copies; after commit the
// hop's goroutine reads frames itself and they alias the sse.Reader's buffer,
// valid until the next frame is read.
type frameItem struct {
	raw  []byte
	info gate.Info
	text []byte
	err  error
}

// frameFeed is a goroutine reading and classifying the frames of one
// upstream body (readFrames), so a loop can wait on frames and timers at
// once.
type frameFeed struct {
	items chan frameItem
	// next is nil unless the reader waits after each frame for the loop's
	// answer (true: read on, false: stop so the loop takes rd over).
	next chan bool
	stop chan struct{}
	done chan struct{}
}

// startFrames starts the reader goroutine on rd. handoff: it waits after
// each frame for an answer on next.
func (c *call) startFrames(rd *sse.Reader, inspect func(sse.Frame) gate.Info, keepText, handoff bool) *frameFeed {
	f := &frameFeed{items: make(chan frameItem, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if handoff {
		f.next = make(chan bool, 1)
	}
	go func() {
		defer close(f.done)
		c.readFrames(rd, inspect, keepText, f.items, f.next, f.stop)
	}()
	return f
}

// close stops the reader and waits for it: a reader blocked on a send sees
// stop, one blocked in a read sees the hop cancelled and the body closed.
func (f *frameFeed) close(cancelHop context.CancelCauseFunc, body io.Closer) {
	close(f.stop)
	cancelHop(nil)
	_ = body.Close()
	<-f.done
}

// inspector is the frame classifier of the request's event format, for the
// frames of one upstream stream in order (chat chunks repeat their head:
// gate.ChatInspector compares it instead of parsing it again).
func (c *call) inspector() func(sse.Frame) gate.Info {
	if c.req.Events == ResponsesEvents {
		return gate.InspectResponses
	}
	return new(gate.ChatInspector).Inspect
}

// readFrames sends each frame of rd to out as owned copies (the text only
// when keepText). With next non-nil it waits after each frame for the
// receiver's answer and returns on false, so the receiver can take rd over
// at a frame boundary. It returns after sending an error.
func (c *call) readFrames(rd *sse.Reader, inspect func(sse.Frame) gate.Info, keepText bool,
	out chan<- frameItem, next <-chan bool, stop <-chan struct{}) {
	for {
		f, err := rd.Next()
		var it frameItem
		if len(f.Raw) > 0 && (err == nil) {
			it.raw = append([]byte(nil), f.Raw...)
			it.info = inspect(f)
			if keepText && len(it.info.Text) > 0 {
				it.text = append([]byte(nil), it.info.Text...)
			}
			it.info.Text = nil
		}
		it.err = err
		select {
		case out <- it:
		case <-stop:
			return
		}
		if err != nil {
			return
		}
		if next != nil {
			select {
			case more := <-next:
				if !more {
					return
				}
			case <-stop:
				return
			}
		}
	}
}

// streamState tracks what reached the client after commit.
type streamState struct {
	finish    bool // a finish_reason was delivered
	done      bool // [DONE] was delivered
	toolCalls bool
	usage     gate.Usage
	model     string
	malformed int
	// keepText: the model may resume a cut stream (mid_stream: resume), so
	// the delivered text is kept; otherwise it is never copied.
	keepText    bool
	delivered   []byte // content text delivered (for mid-stream resume)
	wroteFrames int
	pending     bool // frames written but not yet flushed
}

// stream runs the L3 gate on an SSE answer, then passes the stream through.
//
// Before commit a reader goroutine feeds the gate loop, which also waits on
// the gate timer. The reader stops at every frame until the loop answers,
// so at commit it exits and the hop's goroutine reads the rest itself: no
// handoff per frame, no copies, and one goroutine fewer per open stream.
// After commit every wait is a blocking read, which the hop context ends:
// the client leaving, or the idle timer cancelling it.
//
// The gate and the pass-through are calls of their own: an open stream
// parks its goroutine in pass for minutes, and only pass's small frame (not
// the gate's) is then on the stack (see Engine.Serve).
func (c *call) stream(hopCtx, hctx context.Context, span trace.Span, cancelHop context.CancelCauseFunc,
	m *config.Model, entry config.Entry, resp *http.Response) hopResult {
	st := &streamState{keepText: m.Policy.MidStream == config.MidStreamResume}
	rd := sse.NewReader(resp.Body, c.e.maxFrame)
	inspect := c.inspector()
	feed := c.startFrames(rd, inspect, st.keepText, true)
	defer feed.close(cancelHop, resp.Body)
	res, committed, awaiting := c.gateStream(hopCtx, hctx, span, m, entry, resp, feed, st)
	if !committed {
		return res
	}
	if !st.keepText {
		c.dropBody() // only a resume would send it again
	}
	return c.pass(hopCtx, hctx, span, cancelHop, m, entry, st, rd, inspect, feed, awaiting)
}

// gateStream is L3: it holds frames until one is decisive and commits
// them, or fails the hop. committed reports a commit (res is then unset);
// awaiting that the reader goroutine waits for an answer about its last
// frame.
//
//go:noinline
func (c *call) gateStream(hopCtx, hctx context.Context, span trace.Span, m *config.Model, entry config.Entry,
	resp *http.Response, feed *frameFeed, st *streamState) (res hopResult, committed, awaiting bool) {
	ch := entry.Channel
	pol := m.Policy
	items, next := feed.items, feed.next

	// L3: hold frames until one is decisive.
	gateStart := c.e.clock.Now()
	_, gspan := c.e.tel.Tracer.Start(hctx, telemetry.SpanStreamGate, trace.WithSpanKind(trace.SpanKindInternal))
	var held [][]byte
	heldBytes := 0
	var gt clockwork.Timer
	if pol.GateTimeout > 0 {
		gt = c.e.clock.NewTimer(pol.GateTimeout)
		defer gt.Stop()
	}
	decide := func(decision string) {
		gspan.SetAttributes(
			attribute.String(telemetry.AttrGateDecision, decision),
			attribute.Int(telemetry.AttrGateFramesHeld, len(held)),
			attribute.Int(telemetry.AttrGateBytesHeld, heldBytes),
		)
		if decision != telemetry.GateCommitContent && decision != telemetry.GateCommitTimeout {
			gspan.SetStatus(codes.Error, decision)
		}
		gspan.End()
		c.e.tel.Metrics.GateDecision(hctx, ch.ID, m.Name, decision, c.e.clock.Since(gateStart))
	}
	fail := func(decision, label string) (hopResult, bool, bool) {
		decide(decision)
		span.SetAttributes(attribute.String(telemetry.AttrErrorType, label))
		return hopResult{class: classify.Retryable, status: resp.StatusCode, label: label}, false, false
	}
	var gateC <-chan time.Time
	if gt != nil {
		gateC = gt.Chan()
	}
gateLoop:
	for {
		if awaiting {
			next <- true
			awaiting = false
		}
		select {
		case it := <-items:
			awaiting = it.err == nil
			if it.err != nil {
				if r, ok := c.ctxEnded(hopCtx); ok {
					decide(telemetry.GateDiscardEOF)
					return r, false, false
				}
				if errors.Is(it.err, sse.ErrFrameTooLarge) {
					// A frame that never ends (or is absurdly long) is a broken
					// upstream, bounded by MaxFrame rather than by memory.
					return fail(telemetry.GateDiscardError, errTypeFrameTooLarge)
				}
				return fail(telemetry.GateDiscardEOF, telemetry.ErrTypeStreamEOF)
			}
			switch it.info.Kind {
			case gate.Error:
				return fail(telemetry.GateDiscardError, telemetry.ErrTypeStreamError)
			case gate.Done:
				// [DONE] before anything decisive: an empty answer.
				return fail(telemetry.GateDiscardEOF, telemetry.ErrTypeStreamEOF)
			case gate.Malformed:
				st.malformed++
				c.e.tel.Metrics.MalformedFrame(hctx, ch.ID, m.Name)
				continue
			case gate.Content, gate.Finish:
				if !c.commitStream(resp, held, it, st) {
					decide(telemetry.GateCommitContent)
					return c.lostCommit(hopCtx), false, false
				}
				decide(telemetry.GateCommitContent)
				break gateLoop
			default: // Hold
				if it.info.UsageOnly {
					st.usage = it.info.Usage
					if !c.req.Fields.IncludeUsage {
						continue
					}
				}
				if heldBytes+len(it.raw) > c.e.maxHeld {
					return fail(telemetry.GateDiscardError, "gate_overflow")
				}
				held = append(held, it.raw)
				heldBytes += len(it.raw)
			}
		case <-gateC:
			if pol.GateOnTimeout == config.OnTimeoutFailover {
				return fail(telemetry.GateFailoverTimeout, telemetry.ErrTypeGateTimeout)
			}
			// A slow model is not a broken one: commit what we have.
			if !c.commitStream(resp, held, frameItem{}, st) {
				decide(telemetry.GateCommitTimeout)
				return c.lostCommit(hopCtx), false, false
			}
			decide(telemetry.GateCommitTimeout)
			c.timedOut = true
			break gateLoop
		case <-hopCtx.Done():
			r, _ := c.ctxEnded(hopCtx)
			decide(telemetry.GateDiscardEOF)
			return r, false, false
		}
	}
	return hopResult{}, true, awaiting
}

// pass passes the frames of a committed stream through: never holding one
// back waiting for the next, never presenting a truncated answer as
// complete.
//
//go:noinline
func (c *call) pass(hopCtx, hctx context.Context, span trace.Span, cancelHop context.CancelCauseFunc,
	m *config.Model, entry config.Entry, st *streamState, rd *sse.Reader, inspect func(sse.Frame) gate.Info,
	feed *frameFeed, awaiting bool) hopResult {
	pol := m.Policy
	var idle clockwork.Timer
	if d := pol.StreamIdleTimeout; d > 0 {
		// The timer ends a blocked read by cancelling the hop; every frame
		// re-arms it.
		idle = c.e.clock.AfterFunc(d, func() { cancelHop(errIdleTimeout) })
		defer idle.Stop()
	}
	if !awaiting {
		// Committed on the gate timer while the reader was reading: its
		// frame comes first.
		if res, end := c.readerFrame(hopCtx, hctx, span, m, entry, st, feed, idle); end {
			return res
		}
	} else {
		feed.next <- false
		<-feed.done
	}
	// The reader goroutine has exited: rd is ours.
	var it frameItem
	for {
		if st.pending && !rd.Buffered() {
			// Nothing more has arrived: the client gets what we have now.
			st.pending = false
			if c.rc.Flush() != nil {
				return c.clientGone(span)
			}
		}
		f, err := rd.Next()
		it = frameItem{err: err}
		if err == nil {
			if idle != nil {
				idle.Reset(pol.StreamIdleTimeout)
			}
			it.raw = f.Raw
			it.info = inspect(f)
			it.text = it.info.Text
		}
		if res, end := c.afterCommit(hopCtx, hctx, span, m, entry, st, &it); end {
			return res
		}
	}
}

// readerFrame takes the frame the reader goroutine read while the gate
// committed on its timer, stops the reader, and passes the frame on.
//
//go:noinline
func (c *call) readerFrame(hopCtx, hctx context.Context, span trace.Span, m *config.Model, entry config.Entry,
	st *streamState, feed *frameFeed, idle clockwork.Timer) (res hopResult, end bool) {
	it := <-feed.items
	feed.next <- false
	<-feed.done
	if idle != nil && it.err == nil {
		idle.Reset(m.Policy.StreamIdleTimeout)
	}
	return c.afterCommit(hopCtx, hctx, span, m, entry, st, &it)
}

// afterCommit passes one frame of a committed stream to the client, without
// flushing (the read loop flushes once nothing more is buffered). end
// reports that the hop is over, with res.
func (c *call) afterCommit(hopCtx, hctx context.Context, span trace.Span, m *config.Model, entry config.Entry,
	st *streamState, it *frameItem) (res hopResult, end bool) {
	if it.err != nil {
		if c.clientCtx.Err() != nil {
			return c.clientGone(span), true
		}
		if errors.Is(it.err, io.EOF) && st.finish {
			// Complete but without [DONE]: finish it promptly.
			if !st.done && c.req.Events == ChatEvents {
				_ = c.writeFrame([]byte("data: [DONE]\n\n"))
			}
			c.flushPending(st)
			return c.streamOK(hctx, span, m, entry, st), true
		}
		why := "upstream stream ended before the answer was complete (" + errString(it.err) + ")"
		if context.Cause(hopCtx) == errIdleTimeout {
			why = "upstream stream stalled for " + m.Policy.StreamIdleTimeout.String()
		}
		return c.interrupt(hctx, span, m, entry, st, why), true
	}
	switch it.info.Kind {
	case gate.Malformed:
		st.malformed++
		c.e.tel.Metrics.MalformedFrame(hctx, entry.Channel.ID, m.Name)
		return hopResult{}, false
	case gate.Error:
		return c.interrupt(hctx, span, m, entry, st, "upstream sent an error after the answer started"), true
	}
	if it.info.UsageOnly {
		st.usage = it.info.Usage
		if !c.req.Fields.IncludeUsage && c.req.Events == ChatEvents {
			return hopResult{}, false // we asked for it, the client did not
		}
	}
	c.note(it, st)
	if _, err := c.w.Write(it.raw); err != nil {
		return c.clientGone(span), true
	}
	st.pending = true
	if it.info.Kind == gate.Done {
		st.done = true
		c.flushPending(st)
		return c.streamOK(hctx, span, m, entry, st), true
	}
	return hopResult{}, false
}

// dropBody lets go of the client body once an answer is committed that no
// later hop can need: an open stream then holds no copy of a prompt larger
// than smallBody (a smaller one stays in the hop's request body).
func (c *call) dropBody() { c.req.Body = nil }

// flushPending flushes frames written without a flush.
func (c *call) flushPending(st *streamState) {
	if st.pending {
		st.pending = false
		_ = c.rc.Flush()
	}
}

// commitStream writes the status line, hopgate's headers, the held frames
// and the decisive frame, then flushes. False if the chain deadline won.
func (c *call) commitStream(resp *http.Response, held [][]byte, decisive frameItem, st *streamState) bool {
	if !c.commit() {
		return false
	}
	h := c.w.Header()
	h.Set("Content-Type", headerContentType(resp.Header))
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // tell nginx-style proxies not to buffer
	c.setHeadersCommitted(h, "ok")
	c.w.WriteHeader(http.StatusOK)
	c.status = http.StatusOK
	for _, f := range held {
		if _, err := c.w.Write(f); err != nil {
			return true
		}
		st.wroteFrames++
	}
	if decisive.raw != nil {
		c.deliver(decisive, st)
		return true
	}
	_ = c.rc.Flush()
	return true
}

// setHeadersCommitted sets headers at commit time: the path includes the hop
// being committed (its own step is appended when the hop ends).
func (c *call) setHeadersCommitted(h http.Header, result string) {
	c.steps = append(c.steps, telemetry.Step{Channel: c.hopChannel, Result: result})
	c.setHeaders(h)
	c.steps = c.steps[:len(c.steps)-1]
}

// deliver writes one frame and flushes it; false if the client is gone.
func (c *call) deliver(it frameItem, st *streamState) bool {
	c.note(&it, st)
	st.pending = false
	return c.writeFrame(it.raw)
}

// note records what a frame about to be delivered tells about the answer.
func (c *call) note(it *frameItem, st *streamState) {
	if it.info.FinishReason {
		st.finish = true
	}
	if it.info.ToolCalls {
		st.toolCalls = true
	}
	if it.info.Model != "" {
		st.model = it.info.Model
	}
	if it.info.Usage.Present {
		st.usage = it.info.Usage
	}
	if st.keepText && len(it.text) > 0 {
		st.delivered = append(st.delivered, it.text...)
	}
	st.wroteFrames++
}

func (c *call) writeFrame(b []byte) bool {
	if _, err := c.w.Write(b); err != nil {
		return false
	}
	return c.rc.Flush() == nil
}

// streamOK ends a complete stream.
func (c *call) streamOK(ctx context.Context, span trace.Span, m *config.Model, entry config.Entry, st *streamState) hopResult {
	c.recordUsage(ctx, span, m, entry, st.usage, st.model)
	c.setOutcomeOK()
	if st.malformed > 0 {
		span.SetAttributes(attribute.Int(telemetry.AttrStreamDropped, st.malformed))
	}
	return hopResult{class: classify.Success, done: true, status: http.StatusOK, label: "ok"}
}

// interrupt ends a committed stream that cannot be completed: an in-band
// error frame and no [DONE], so no client mistakes it for a full answer.
func (c *call) interrupt(ctx context.Context, span trace.Span, m *config.Model, entry config.Entry, st *streamState, why string) hopResult {
	ch := entry.Channel
	c.e.tel.Metrics.StreamInterrupted(ctx, ch.ID, m.Name)
	span.SetAttributes(
		attribute.String(telemetry.AttrStreamEnd, "interrupted"),
		attribute.String(telemetry.AttrErrorType, telemetry.ErrTypeStreamInterrupted),
	)
	// The cut goes on the path now, before the steps of any resume hop,
	// so the path reads in the order things happened: "a:cut -> b:prefill_ok".
	c.steps = append(c.steps, telemetry.Step{Channel: ch.ID, Result: "cut"})
	if m.Policy.MidStream == config.MidStreamResume && !st.toolCalls {
		if c.resume(ctx, m, entry, st, why) {
			return hopResult{class: classify.Retryable, done: true, status: http.StatusOK, label: "cut", stepRecorded: true}
		}
	}
	frame := apierror.StreamFrame(c.requestID, apierror.StreamInterrupted(
		"channel "+ch.ID+": "+why+"; the answer above is incomplete"))
	_ = c.writeFrame(frame)
	c.outcome = OutcomeInterrupted
	c.interrupted = true
	return hopResult{class: classify.Retryable, done: true, status: http.StatusOK, label: "cut", stepRecorded: true}
}

// clientGone ends a hop whose client left: no breaker effect.
func (c *call) clientGone(span trace.Span) hopResult {
	c.outcome = OutcomeCanceled
	c.status = 499
	span.SetAttributes(attribute.String(telemetry.AttrStreamEnd, "client_gone"))
	return hopResult{class: classify.Canceled, done: true, label: "canceled"}
}

// ctxEnded classifies a hop whose context ended (client, deadline, timer).
func (c *call) ctxEnded(hopCtx context.Context) (hopResult, bool) {
	if hopCtx.Err() == nil {
		return hopResult{}, false
	}
	switch context.Cause(hopCtx) {
	case errChainDeadline:
		return hopResult{class: classify.Retryable, label: "deadline", deadline: true}, true
	}
	if c.clientCtx.Err() != nil {
		return hopResult{class: classify.Canceled, label: "canceled"}, true
	}
	return hopResult{class: classify.Retryable, label: telemetry.ErrTypeStreamEOF}, true
}

// lostCommit: the chain deadline fired while this hop was about to commit.
// Its timer claimed the reply but may not have cancelled the request context
// yet; cancel it here (same cause), so the walk stops at once and finish
// answers with the deadline reply, not with an exhaustion error.
func (c *call) lostCommit(hopCtx context.Context) hopResult {
	c.cancel(errChainDeadline)
	return hopResult{class: classify.Retryable, label: "deadline", deadline: true}
}

// buffered handles a non-streaming 200: nothing is committed until the whole
// body has been read and classified.
func (c *call) buffered(hopCtx context.Context, span trace.Span, cancelHop context.CancelCauseFunc,
	m *config.Model, entry config.Entry, resp *http.Response) hopResult {
	var body io.Reader = resp.Body
	if d := m.Policy.StreamIdleTimeout; d > 0 {
		body = &idleReader{r: resp.Body, clock: c.e.clock, d: d, cancel: cancelHop}
	}
	b, err := readBounded(body, c.e.maxBody, resp.ContentLength)
	if ir, ok := body.(*idleReader); ok {
		ir.stop()
	}
	if err != nil {
		if r, ok := c.ctxEnded(hopCtx); ok && (r.class != classify.Retryable || r.deadline) {
			return r
		}
		label := telemetry.ErrTypeBodyError
		if context.Cause(hopCtx) == errIdleTimeout {
			label = telemetry.ErrTypeIdleTimeout
		} else if errors.Is(err, io.ErrUnexpectedEOF) {
			label = "short_body"
		}
		span.SetAttributes(attribute.String(telemetry.AttrErrorType, label))
		return hopResult{class: classify.Retryable, status: resp.StatusCode, label: label}
	}
	var info gate.Info
	if mediaType(resp.Header.Get("Content-Type")) == "application/json" || !c.req.Raw {
		info = gate.InspectBody(b)
		switch info.Kind {
		case gate.Error:
			span.SetAttributes(attribute.String(telemetry.AttrErrorType, "error_body"))
			return hopResult{class: classify.Retryable, status: resp.StatusCode, label: "error_body"}
		case gate.Malformed:
			span.SetAttributes(attribute.String(telemetry.AttrErrorType, "bad_json"))
			return hopResult{class: classify.Retryable, status: resp.StatusCode, label: "bad_json"}
		}
	}
	if !c.commit() {
		return c.lostCommit(hopCtx)
	}
	h := c.w.Header()
	vals := make([]string, 2) // one allocation for both values
	if ct := headerContentType(resp.Header); ct != "" {
		vals[0] = ct
		h["Content-Type"] = vals[0:1:1]
	}
	c.setHeadersCommitted(h, "ok")
	vals[1] = strconv.Itoa(len(b))
	h["Content-Length"] = vals[1:2:2]
	c.w.WriteHeader(resp.StatusCode)
	_, _ = c.w.Write(b)
	c.status = resp.StatusCode
	c.recordUsage(hopCtx, span, m, entry, info.Usage, info.Model)
	c.setOutcomeOK()
	return hopResult{class: classify.Success, done: true, status: resp.StatusCode, label: "ok"}
}

func (c *call) setOutcomeOK() {
	if c.failedOver || len(c.steps) > 0 || c.served != c.req.Model {
		c.outcome = OutcomeFailoverOK
	} else {
		c.outcome = OutcomeOK
	}
}

// recordUsage puts token usage and cost on the hop span and metrics. Only
// the hop that served the answer reports usage.
func (c *call) recordUsage(ctx context.Context, span trace.Span, m *config.Model, entry config.Entry, u gate.Usage, respModel string) {
	var attrs [3]attribute.KeyValue // one SetAttributes call: one copy
	n := 0
	if respModel != "" {
		attrs[n] = attribute.String(telemetry.AttrGenAIResponseMdl, respModel)
		n++
	}
	if u.Present {
		attrs[n] = attribute.Int64(telemetry.AttrGenAIInputTokens, u.InputTokens)
		attrs[n+1] = attribute.Int64(telemetry.AttrGenAIOutputTokens, u.OutputTokens)
		n += 2
	}
	span.SetAttributes(attrs[:n]...)
	if u.Present {
		cost := (float64(u.InputTokens)*entry.Price.Input + float64(u.OutputTokens)*entry.Price.Output) / 1e6
		if cost > 0 {
			c.e.tel.Metrics.Cost(ctx, entry.Channel.ID, m.Name, cost)
		}
	}
	c.e.tel.Metrics.GenAI(ctx, operationName(c.req.Operation), entry.Channel.Provider, entry.UpstreamModel, respModel, "",
		c.e.clock.Since(c.hopStart), u.InputTokens, u.OutputTokens)
}

// idleReader cancels the hop when no byte arrives for d.
type idleReader struct {
	r      io.Reader
	clock  clockwork.Clock
	d      time.Duration
	cancel context.CancelCauseFunc
	t      clockwork.Timer
}

func (ir *idleReader) Read(p []byte) (int, error) {
	if ir.t == nil {
		ir.t = ir.clock.AfterFunc(ir.d, func() { ir.cancel(errIdleTimeout) })
	} else {
		ir.t.Reset(ir.d)
	}
	return ir.r.Read(p)
}

func (ir *idleReader) stop() {
	if ir.t != nil {
		ir.t.Stop()
	}
}

func errString(err error) string {
	if errors.Is(err, io.EOF) {
		return "EOF"
	}
	return err.Error()
}
