package dispatch

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/overload"
	"github.com/hopgate/hopgate/internal/gate"
	"github.com/hopgate/hopgate/internal/provider"
	"github.com/hopgate/hopgate/internal/sse"
	"github.com/hopgate/hopgate/telemetry"
)

// Causes of a hop context ended by the stream's own timers.
var (
	errIdleTimeout = errors.New("stream idle timeout: upstream stalled")
)

// doneFrame ends a chat stream.
var doneFrame = []byte("data: [DONE]\n\n")

// frameItem is one upstream frame. Before commit the gate judges each
// frame as it is read (judge): a held frame's raw (and, with keepText, its
// text) is an owned copy, since the reader reads on before it is written;
// the raw of a decisive frame (content or a finish) aliases the reader's
// (or the codec's) buffer, which nothing reads into again before Pump has
// written it. After commit frames alias the sse.Reader's buffer, valid
// until the next frame is read.
type frameItem struct {
	raw  []byte
	info gate.Info
	text []byte
	err  error
	// textLen is len(info.Text) when the frame was read: a frame judged
	// before commit no longer carries its text unless it is kept.
	textLen int
}

// judge makes the frame fr (or the read's err) it, as k reads it for the
// client (see frameItem for which bytes are copies).
func judge(it *frameItem, k codec, fr sse.Frame, err error, keepText bool) {
	*it = frameItem{err: err}
	if err != nil {
		return
	}
	out, info := k.frame(fr)
	switch {
	case len(out) == 0:
	case info.Kind == gate.Content || info.Kind == gate.Finish:
		// Decisive: the gate commits on it or fails the hop, and
		// nothing reads on before Pump has written it.
		it.raw = out
	default:
		it.raw = append([]byte(nil), out...) // held
	}
	it.info = info
	it.textLen = len(it.info.Text)
	if keepText && len(it.info.Text) > 0 {
		it.text = append([]byte(nil), it.info.Text...)
	}
	it.info.Text = nil
}

// stream runs the L3 gate on an SSE answer. Once the gate commits, the
// stream is handed back to Start's caller (errStreamOpen, pump.go), which
// writes the commit and passes the rest through.
//
// The hop's own goroutine reads the frames, before commit as after it:
// the gate's timer does not need a reader goroutine to race against (see
// gateHold.fire). Every wait is a blocking read, which the hop context
// ends: the client leaving, the chain deadline, the gate's timer with
// on_timeout failover, the idle timer after commit.
func (a *attempt) stream(resp *http.Response) *classify.HopError {
	c := a.c
	c.rw.keepText = a.m.Policy.MidStream == config.MidStreamResume
	rd := a.frames(resp)
	if err := a.gate(resp, rd); err != nil {
		// The hop failed: nothing reads rd any more (a timer that fired
		// as the gate decided only marks the gate, see fire).
		releaseFrames(rd)
		return err
	}
	if !c.rw.keepText {
		c.dropBody() // only a resume would send it again
	}
	s := &c.ans
	if s.a == nil {
		// Not when the gate's timer committed (fire): it set s.a before
		// it listed the stream, and a shutdown may be reading it now.
		s.a = a
	}
	s.rd, s.resp = rd, resp
	return errStreamOpen
}

// The gate's states: what the hop's goroutine is doing, as its timer sees it.
const (
	gateJudging uint8 = iota // judging a frame, or deciding: no read in flight
	gateReading              // in a read of the next frame (or about to be)
	gateFired                // the timer fired
)

// gateHold is what the gate holds, how its decision is recorded, and what
// its timer may do while the hop's goroutine waits in a read.
type gateHold struct {
	a      *attempt
	resp   *http.Response
	frames [][]byte
	bytes  int
	start  time.Time
	span   telemetry.GateSpan
	hold   overload.Hold // the held frames, against the process's budget
	// cur is the frame judged last: at commit, the decisive one, which
	// the Answer points to until Pump has written it.
	cur frameItem

	// mu orders the timer against the hop's goroutine (enter, leave,
	// fire): the timer acts on the hop only while a read is in flight,
	// and the goroutine sees what it did once the read returns.
	mu    sync.Mutex
	state uint8
	// timerErr is what the timer decided when it fired during a read: the
	// hop's end, or nil when it committed and wrote the commit.
	timerErr *classify.HopError
}

// gate is L3: it holds frames until one is decisive and commits them (nil),
// or fails the hop. The hop's goroutine reads the frames itself. Its timer
// (fire) decides on its own goroutine only when a read is in flight; when
// it fires between reads the loop sees it before its next read and decides
// here. What a frame, the timer or the hop's end decides runs in calls of
// their own (take, timeout, ended), so the gate's frame stays small under
// them: the walk is at its deepest here.
//
//go:noinline
func (a *attempt) gate(resp *http.Response, rd frameSource) *classify.HopError {
	c := a.c
	pol := a.m.Policy
	g := newGateHold(a, resp)
	// Once the gate decided, held frames are written or dropped.
	defer g.hold.Release()
	if pol.GateTimeout > 0 {
		t := c.e.clock.AfterFunc(pol.GateTimeout, g.fire)
		defer t.Stop()
	}
	keepText := c.rw.keepText
	for {
		if a.ctx.Err() != nil {
			// A frame still buffered would be read without a read that
			// the hop's end interrupts.
			return g.ended()
		}
		if !g.enter() {
			return g.timeout() // the timer fired while a frame was judged
		}
		fr, err := rd.Next()
		if g.leave() {
			return g.fired(fr, err)
		}
		judge(&g.cur, a.codec, fr, err, keepText)
		if err, end := g.take(&g.cur); end {
			return err
		}
	}
}

// enter marks a read in flight; false when the timer fired first.
func (g *gateHold) enter() bool {
	g.mu.Lock()
	ok := g.state != gateFired
	if ok {
		g.state = gateReading
	}
	g.mu.Unlock()
	return ok
}

// leave marks the read over; true when the timer fired during it (and
// decided: timed).
func (g *gateHold) leave() bool {
	g.mu.Lock()
	fired := g.state == gateFired
	g.state = gateJudging
	g.mu.Unlock()
	return fired
}

// fire is the gate's timer. Between reads it only marks the gate, and the
// hop's goroutine decides before its next read. During a read it decides
// at once, as DESIGN.md §2 asks of the deadline: with on_timeout failover
// it ends the hop's context, which ends the read; with commit it commits
// and writes the commit to the client now (the status line, headers and
// held frames, flushed), and the frame the read brings is the stream's
// first after it (Answer.begin). The hop's goroutine is parked in the
// read and touches neither the reply nor the call until leave, which
// waits for this to finish.
func (g *gateHold) fire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	reading := g.state == gateReading
	g.state = gateFired
	if !reading {
		return
	}
	a := g.a
	if a.m.Policy.GateOnTimeout == config.OnTimeoutFailover {
		g.timerErr = g.timeout()
		a.cancel(nil)
		return
	}
	if g.timerErr = g.timeout(); g.timerErr != nil {
		// Lost to the chain deadline: lostCommit stopped the walk; the
		// read this hop is parked in ends with the hop's own context.
		a.cancel(nil)
		return
	}
	s := &a.c.ans
	s.a = a
	s.start()
	_ = a.c.rw.flush() // a client gone is seen by the next write
	s.begun = true
}

// fired: the timer fired while the read of fr (or err) was in flight and
// decided (fire). After a commit the read's frame is the stream's first.
//
//go:noinline
func (g *gateHold) fired(fr sse.Frame, err error) *classify.HopError {
	if g.timerErr != nil {
		return g.timerErr
	}
	s := &g.a.c.ans
	s.afterFrame, s.afterErr = fr, err
	return nil
}

// newGateHold starts the gate's span and its hold; on the heap, not in
// the gate's frame (see gate).
//
//go:noinline
func newGateHold(a *attempt, resp *http.Response) *gateHold {
	c := a.c
	return &gateHold{a: a, resp: resp, start: c.e.clock.Now(), span: a.span.Gate(a.ctx), hold: overload.NewHold(c.e.budget)}
}

// decide records the gate's decision; a commit is the stream's first
// token for early warning.
func (g *gateHold) decide(decision string) {
	a := g.a
	if decision == telemetry.GateCommitContent || decision == telemetry.GateCommitTimeout {
		a.ew.FirstToken()
	}
	g.span.Decided(decision, len(g.frames), g.bytes)
	a.c.e.tel.Metrics.GateDecision(a.ctx, a.ch.ID, a.m.Name, decision, a.c.e.clock.Since(g.start))
}

// fail decides against the hop: it failed with kind.
func (g *gateHold) fail(decision string, kind classify.Kind) *classify.HopError {
	g.decide(decision)
	return &classify.HopError{Kind: kind, Status: g.a.status}
}

// take judges the frame just read: a decisive one commits, an error or an
// end fails the hop, anything else is held. True when the gate decided.
//
//go:noinline
func (g *gateHold) take(it *frameItem) (*classify.HopError, bool) {
	a, c := g.a, g.a.c
	if it.err != nil {
		if err := a.ctxEnded(); err != nil {
			g.decide(telemetry.GateDiscardEOF)
			return err, true
		}
		if errors.Is(it.err, sse.ErrFrameTooLarge) {
			// A frame that never ends (or is absurdly long) is a broken
			// upstream, bounded by MaxFrame rather than by memory.
			return g.fail(telemetry.GateDiscardError, classify.KindFrameTooLarge), true
		}
		return g.fail(telemetry.GateDiscardEOF, classify.KindStreamEOF), true
	}
	switch it.info.Kind {
	case gate.Error:
		return g.fail(telemetry.GateDiscardError, classify.KindStreamError), true
	case gate.Done:
		// [DONE] before anything decisive: an empty answer.
		return g.fail(telemetry.GateDiscardEOF, classify.KindStreamEOF), true
	case gate.Malformed:
		a.malformed++
		c.e.tel.Metrics.MalformedFrame(a.ctx, a.ch.ID, a.m.Name)
		return nil, false
	case gate.Content, gate.Finish:
		if !g.commit(it) {
			g.decide(telemetry.GateCommitContent)
			return c.lostCommit(), true
		}
		g.decide(telemetry.GateCommitContent)
		return nil, true
	}
	// Hold
	if it.info.UsageOnly {
		a.usage = it.info.Usage
		if !c.req.Fields.IncludeUsage {
			return nil, false // we asked for it, the client did not
		}
	}
	if len(it.raw) == 0 {
		return nil, false // nothing for the client (a ping across dialects)
	}
	if g.bytes+len(it.raw) > c.e.maxHeld {
		return g.fail(telemetry.GateDiscardError, classify.KindGateOverflow), true
	}
	if !g.hold.Grow(int64(len(it.raw))) {
		// The process holds too many buffered bytes: this hop
		// fails; the next channel may be sane.
		return g.fail(telemetry.GateDiscardError, classify.KindBudget), true
	}
	g.frames = append(g.frames, it.raw)
	g.bytes += len(it.raw)
	return nil, false
}

// timeout is the gate's timer: fail over, or commit what is held.
//
//go:noinline
func (g *gateHold) timeout() *classify.HopError {
	a, c := g.a, g.a.c
	if a.m.Policy.GateOnTimeout == config.OnTimeoutFailover {
		return g.fail(telemetry.GateFailoverTimeout, classify.KindGateTimeout)
	}
	// A slow model is not a broken one: commit what we have.
	if !g.commit(nil) {
		g.decide(telemetry.GateCommitTimeout)
		return c.lostCommit()
	}
	g.decide(telemetry.GateCommitTimeout)
	c.timedOut = true
	return nil
}

// ended: the hop's context ended while the gate waited.
//
//go:noinline
func (g *gateHold) ended() *classify.HopError {
	err := g.a.ctxEnded()
	g.decide(telemetry.GateDiscardEOF)
	return err
}

// commit claims the reply for the stream and keeps what its first
// write sends: the status line, hopgate's headers, the held frames (and
// their hold on the budget) and the decisive frame (nil: the gate timed
// out). Answer.Pump writes them once the walk has returned (or the timer,
// fire, during a read). False if the chain deadline claimed the reply
// first.
func (g *gateHold) commit(decisive *frameItem) bool {
	a, resp := g.a, g.resp
	gh, ok := a.c.claimAnswer(a.ch.ID, "ok")
	if !ok {
		return false
	}
	s := &a.c.ans
	s.open = true
	s.head = head{status: http.StatusOK, contentType: headerContentType(resp.Header), length: -1, stream: true}
	s.headers, s.held, s.hold = gh, g.frames, g.hold
	g.hold = overload.Hold{} // the Answer's now
	// The decisive frame is the gate's (g.cur), not a copy: nothing
	// reads on before Pump has written it.
	s.decisive = decisive
	return true
}

// frameHandler handles one frame after commit (or of a continuation); end
// reports that the hop is over, with err (nil: the answer is complete).
type frameHandler func(it *frameItem) (err *classify.HopError, end bool)

// pass is the frame loop of a continuation (resume.go): it reads the
// frames itself, never holding one back waiting for the next (a flush
// whenever nothing more is buffered), re-arms the idle timer per frame and
// hands each frame to handle. A committed stream of the walk runs the same
// loop in Answer.Pump.
func (a *attempt) pass(rd frameSource, handle frameHandler) *classify.HopError {
	c := a.c
	var idle idleTimer
	idle.arm(a)
	defer idle.stop()
	for {
		read := !rd.Buffered() // the next frame needs a read
		if read && c.rw.pending {
			// Nothing more has arrived: the client gets what we have now.
			if c.rw.flush() != nil {
				return a.clientGone()
			}
		}
		f, err := rd.Next()
		var it frameItem
		readItem(&it, a.codec, &f, err, &idle, read)
		if err, end := handle(&it); end {
			return err
		}
	}
}

// readItem makes one read of a committed stream (frame f, or err) a frame
// for the client in it: the codec's bytes and what the frame says. A frame
// that came from a read (read) re-arms the idle timer; one that was
// already buffered arrived with an earlier frame, which did, and nothing
// blocked since: a burst of fifty frames re-arms it once, not fifty times.
func readItem(it *frameItem, k codec, f *sse.Frame, err error, idle *idleTimer, read bool) {
	*it = frameItem{err: err}
	if err == nil {
		if read {
			idle.reset()
		}
		it.raw, it.info = k.frame(*f)
		it.text = it.info.Text
		it.textLen = len(it.info.Text)
	}
}

// idleTimer is a committed stream's stream_idle_timeout: it ends a blocked
// read by cancelling the hop, and every read that brings a frame re-arms
// it.
type idleTimer struct {
	t clockwork.Timer // nil: no idle timeout
	d time.Duration
}

func (t *idleTimer) arm(a *attempt) {
	if d := a.m.Policy.StreamIdleTimeout; d > 0 {
		t.d = d
		t.t = a.c.e.clock.AfterFunc(d, func() { a.cancel(errIdleTimeout) })
	}
}

func (t *idleTimer) reset() {
	if t.t != nil {
		t.t.Reset(t.d)
	}
}

func (t *idleTimer) stop() {
	if t.t != nil {
		t.t.Stop()
	}
}

// afterCommit passes one frame of a committed stream to the client without
// flushing (pass flushes once nothing more is buffered); a stream that
// cannot be completed is cut, never presented as complete.
func (a *attempt) afterCommit(it *frameItem) (*classify.HopError, bool) {
	c := a.c
	if it.err != nil {
		if c.clientCtx.Err() != nil {
			return a.clientGone(), true
		}
		if err := shutdownCut(a); err != nil {
			return err, true
		}
		if errors.Is(it.err, io.EOF) {
			if tail, ok := a.codec.end(); ok {
				// Complete but without its end ([DONE], message_stop):
				// finish it promptly.
				c.rw.delivering(c.req.Delivering, a.usage)
				if len(tail) > 0 {
					_ = c.rw.frame(tail)
				}
				c.rw.flushPending()
				return a.succeed(), true
			}
		}
		why := "upstream stream ended before the answer was complete (" + errString(it.err) + ")"
		if context.Cause(a.ctx) == errIdleTimeout {
			why = "upstream stream stalled for " + a.m.Policy.StreamIdleTimeout.String()
		}
		return a.cut(why, it.err), true
	}
	switch it.info.Kind {
	case gate.Malformed:
		a.malformed++
		c.e.tel.Metrics.MalformedFrame(a.ctx, a.ch.ID, a.m.Name)
		return nil, false
	case gate.Error:
		return a.cut("upstream sent an error after the answer started", nil), true
	}
	if it.info.UsageOnly {
		a.usage = it.info.Usage
		if !c.req.Fields.IncludeUsage && c.req.Events == ChatEvents {
			return nil, false // we asked for it, the client did not
		}
	}
	a.note(it)
	if it.info.Kind == gate.Done {
		c.rw.delivering(c.req.Delivering, a.usage) // the closing frame is the last write
	}
	if len(it.raw) > 0 {
		if c.rw.write(it.raw) != nil {
			return a.clientGone(), true
		}
		c.rw.pending = true
	}
	if it.info.Kind == gate.Done {
		c.rw.done = true
		c.rw.flushPending()
		return a.succeed(), true
	}
	return nil, false
}

// note records what a frame about to be delivered tells about the answer.
func (a *attempt) note(it *frameItem) {
	rw := &a.c.rw
	if it.info.FinishReason {
		rw.finish = true
	}
	if it.info.ToolCalls {
		rw.toolCalls = true
		rw.counted.ToolCallFrames++
	}
	rw.counted.TextBytes += int64(it.textLen)
	if it.info.Model != "" {
		a.respModel = it.info.Model
	}
	if it.info.Usage.Present {
		a.usage = it.info.Usage
	}
	if rw.keepText && len(it.text) > 0 {
		rw.delivered = append(rw.delivered, it.text...)
	}
}

// succeed ends a hop whose answer is complete.
func (a *attempt) succeed() *classify.HopError {
	a.c.rw.outcome = a.c.okOutcome()
	return nil
}

// cut ends a hop whose committed answer cannot be completed; the walk ends
// the stream with the in-band error (or resumes it).
func (a *attempt) cut(why string, cause error) *classify.HopError {
	a.c.e.tel.Metrics.StreamInterrupted(a.ctx, a.ch.ID, a.m.Name)
	a.span.StreamEnd(telemetry.StreamInterrupted, "")
	a.why = why
	return &classify.HopError{Kind: classify.KindCut, Status: a.status, Cause: cause}
}

// clientGone ends a hop whose client left: no breaker effect.
func (a *attempt) clientGone() *classify.HopError {
	a.c.rw.outcome = OutcomeCanceled
	a.c.rw.status = 499
	a.span.StreamEnd(telemetry.StreamClientGone, "")
	return &classify.HopError{Kind: classify.KindCanceled, Cause: context.Cause(a.c.clientCtx)}
}

func errString(err error) string {
	if errors.Is(err, io.EOF) {
		return "EOF"
	}
	return err.Error()
}

// frames reads a streamed answer: Bedrock's event stream, or SSE.
func (a *attempt) frames(resp *http.Response) frameSource {
	if a.up.EventStream() {
		return provider.NewEventFrames(resp.Body, a.c.e.maxFrame)
	}
	return sse.Get(resp.Body, a.c.e.maxFrame)
}

// releaseFrames gives an SSE reader and its buffer back for the next
// stream (sse.Get) once nothing reads it and none of its frames is used
// any more: the gate decided, the pump's last run written. Bedrock's
// frames are left to the collector.
func releaseFrames(rd frameSource) {
	if r, ok := rd.(*sse.Reader); ok {
		r.Release()
	}
}

// drainMax and drainWait bound what a complete stream's end may cost: the
// bytes after its last frame and the wait for them.
const (
	drainMax  = 4 << 10
	drainWait = 2 * time.Second
)

// drain reads what follows a complete stream's last frame (the chunked
// body's terminating chunk, a trailing newline) so the transport can reuse
// the upstream connection: a body closed before its end closes the
// connection, and over TLS with HTTP/1.1 every stream then paid a new
// handshake (measured: 121 TLS connections per 1000 streams, the proxy
// 0.7). Bounded in bytes and in real time (connection hygiene, not a
// policy timer: the engine's clock is for the timeouts of DESIGN.md §2);
// an upstream that keeps the body open after its answer is cut as before.
func drain(resp *http.Response, cancel context.CancelCauseFunc) {
	t := time.AfterFunc(drainWait, func() { cancel(nil) })
	defer t.Stop()
	_, _ = io.CopyN(io.Discard, resp.Body, drainMax)
}
