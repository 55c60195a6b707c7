package dispatch

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/overload"
	"github.com/hopgate/hopgate/internal/gate"
	"github.com/hopgate/hopgate/telemetry"
)

// buffered handles a non-streaming 2xx: nothing is committed until the
// whole body has been read and classified (DESIGN.md §2 L3): an error
// object, a body that is not JSON, shorter than its Content-Length or that
// stalls is a failed hop, and the next channel is tried.
func (a *attempt) buffered(resp *http.Response) *classify.HopError {
	c := a.c
	var body io.Reader = resp.Body
	var ir *idleReader
	if d := a.m.Policy.StreamIdleTimeout; d > 0 {
		ir = &idleReader{r: resp.Body, clock: c.e.clock, d: d, cancel: a.cancel}
		body = ir
	}
	hold := overload.NewHold(c.e.budget)
	defer hold.Release() // the answer is written (or dropped) by then
	b, err := readAnswer(body, c.e.maxResponse(c.req), resp.ContentLength, &hold)
	if ir != nil {
		ir.stop()
	}
	if errors.Is(err, errBudget) {
		return &classify.HopError{Kind: classify.KindBudget, Status: resp.StatusCode, Cause: err}
	}
	if err != nil {
		if e := a.ctxEnded(); e != nil && (e.Class() != classify.Retryable || e.ChainDeadline()) {
			return e
		}
		kind := classify.KindBodyError
		if context.Cause(a.ctx) == errIdleTimeout {
			kind = classify.KindIdleTimeout
		} else if errors.Is(err, io.ErrUnexpectedEOF) {
			kind = classify.KindShortBody
		}
		return &classify.HopError{Kind: kind, Status: resp.StatusCode, Cause: err}
	}
	out, info, terr := a.dia.answerBody(resp, b)
	switch {
	case info.Kind == gate.Error:
		return &classify.HopError{Kind: classify.KindErrorBody, Status: resp.StatusCode}
	case info.Kind == gate.Malformed || terr != nil:
		return &classify.HopError{Kind: classify.KindBadJSON, Status: resp.StatusCode, Cause: terr}
	}
	ct := headerContentType(resp.Header)
	if a.dia.cross {
		ct = "application/json"
	}
	b = out
	g, ok := c.claimAnswer(a.ch.ID, "ok")
	if !ok {
		return c.lostCommit()
	}
	c.rw.writeHead(head{status: resp.StatusCode, contentType: ct, length: int64(len(b))}, &g)
	a.usage, a.respModel = info.Usage, info.Model
	// The body is the answer's last write; a charged one is flushed here
	// (the delivery rule, delivery.go).
	if c.rw.delivering(c.req.Delivering, a.usage) {
		if c.rw.write(b) == nil {
			_ = c.rw.flush()
		}
	} else {
		_ = c.rw.write(b)
	}
	return a.succeed()
}

// passthroughChunk is the read size of a binary passthrough: one read, one
// write, one flush, so audio plays while it is generated and memory per
// request stays bounded whatever the body's length.
const passthroughChunk = 32 << 10

// binaryBody reports whether a 2xx answer of a Binary request is streamed
// through as it comes. JSON is not (it may be an error object: it is read
// whole and inspected), nor is other text (an HTML page from a load
// balancer is a failed hop, not audio). SSE is: a speech request with
// stream_format "sse" has no gate classifier, so it is passed through.
func binaryBody(mt string) bool {
	switch {
	case mt == "text/event-stream":
		return true
	case mt == "", mt == "application/json", strings.HasSuffix(mt, "+json"), strings.HasPrefix(mt, "text/"):
		return false
	}
	return true
}

// passthrough commits a binary 2xx answer at its first bytes and copies
// the body to the client with a flush per read. Nothing in a binary body
// can be classified, so the first bytes are the decision (DESIGN.md §15:
// the first audio bytes commit): a body that ends or fails before any
// byte arrived is a failed hop, and the next entry is tried. After commit
// there is no failover; a body that dies or stalls (stream_idle_timeout)
// aborts the request, and the HTTP layer breaks the connection so the
// client sees a truncated transfer, never a clean end (the ReverseProxy
// rule, see STYLE.md).
func (a *attempt) passthrough(resp *http.Response) *classify.HopError {
	c := a.c
	var body io.Reader = resp.Body
	if d := a.m.Policy.StreamIdleTimeout; d > 0 {
		ir := &idleReader{r: resp.Body, clock: c.e.clock, d: d, cancel: a.cancel}
		defer ir.stop()
		body = ir
	}
	buf := make([]byte, passthroughChunk)
	// stream_gate.on_timeout: failover moves a body with no byte within
	// stream_gate.timeout on, as it moves a stream with nothing decisive;
	// commit (the default) waits: a slow provider is not a broken one.
	var first firstBytesGate
	if p := a.m.Policy; p.GateOnTimeout == config.OnTimeoutFailover && p.GateTimeout > 0 {
		t := c.e.clock.AfterFunc(p.GateTimeout, func() { first.fire(a) })
		defer t.Stop()
	}
	n, err := readFirst(body, buf)
	if first.read() {
		n = 0 // held, never sent: the hop failed over
		if err == nil {
			err = errFirstBytesTimeout
		}
	}
	if n == 0 {
		if first.fired {
			return &classify.HopError{Kind: classify.KindGateTimeout, Status: resp.StatusCode, Cause: errFirstBytesTimeout}
		}
		// Nothing reached the client: a failed hop, like a stream that
		// ends before anything decisive.
		if e := a.ctxEnded(); e != nil && (e.Class() != classify.Retryable || e.ChainDeadline()) {
			return e
		}
		switch {
		case context.Cause(a.ctx) == errIdleTimeout:
			return &classify.HopError{Kind: classify.KindIdleTimeout, Status: resp.StatusCode, Cause: err}
		case errors.Is(err, io.EOF):
			return &classify.HopError{Kind: classify.KindStreamEOF, Status: resp.StatusCode, Cause: errEmptyAudio}
		}
		return &classify.HopError{Kind: classify.KindBodyError, Status: resp.StatusCode, Cause: err}
	}
	// The client can tell a cut body from a complete one by its length
	// too (when known), not only by the broken connection.
	g, ok := c.claimAnswer(a.ch.ID, "ok")
	if !ok {
		return c.lostCommit()
	}
	c.rw.writeHead(head{status: resp.StatusCode, contentType: headerContentType(resp.Header), length: resp.ContentLength}, &g)
	c.dropBody()
	// Charged the same however much of it goes out (no usage comes with
	// a binary body): marked before its first byte (delivery.go).
	c.rw.delivering(c.req.Delivering, gate.Usage{})
	for {
		if n > 0 {
			if c.rw.write(buf[:n]) != nil || c.rw.flush() != nil {
				return a.clientGone()
			}
		}
		switch {
		case err == nil:
			n, err = body.Read(buf)
			continue
		case errors.Is(err, io.EOF):
			return a.succeed()
		case c.clientCtx.Err() != nil:
			return a.clientGone()
		}
		why := "upstream body failed after the answer started: " + err.Error()
		if context.Cause(a.ctx) == errIdleTimeout {
			why = "upstream body stalled for " + a.m.Policy.StreamIdleTimeout.String()
		}
		return a.abort(why, err)
	}
}

// readFirst reads until the body gives at least one byte or an error (a
// reader may return 0, nil).
func readFirst(r io.Reader, buf []byte) (int, error) {
	for {
		n, err := r.Read(buf)
		if n > 0 || err != nil {
			return n, err
		}
	}
}

var errEmptyAudio = errors.New("the upstream answered 2xx with an empty binary body")

var errFirstBytesTimeout = errors.New("stream gate timeout: no byte of the binary body in time")

// firstBytesGate is the gate timer of a binary body's first read: fired
// before the read returned, the hop fails over (its bytes, if the read
// won the race anyway, were never sent).
type firstBytesGate struct {
	mu          sync.Mutex
	done, fired bool
}

func (g *firstBytesGate) fire(a *attempt) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.done {
		g.fired = true
		a.cancel(errFirstBytesTimeout)
	}
}

// read marks the first read over and reports whether the timer fired
// first.
func (g *firstBytesGate) read() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.done = true
	return g.fired
}

// abort ends a committed binary answer that cannot be completed. An SSE
// stream would get an in-band error frame; bytes of audio cannot carry
// one, so the connection is broken instead (Result.Aborted).
func (a *attempt) abort(why string, cause error) *classify.HopError {
	a.c.e.tel.Metrics.StreamInterrupted(a.ctx, a.ch.ID, a.m.Name)
	a.span.StreamEnd(telemetry.StreamAborted, why)
	a.c.rw.abort()
	a.why = why
	return &classify.HopError{Kind: classify.KindCut, Status: a.status, Cause: cause}
}

// readBounded reads at most limit bytes; more is an error. size is the
// body's declared length (Content-Length, -1 if unknown): a body that says
// its length is read into one buffer of that size, not grown from 512 bytes
// by copying (io.ReadAll), up to maxPresize. A body longer than that first
// buffer is read into pooled chunks of chunkSize and copied once into a
// buffer of its exact size at the end: growing one buffer by append would
// leave a trail of discarded copies (about five times the body for a large
// one, as Go grows large slices by a quarter) that the budget never sees —
// the soak under a memory ceiling found them to be most of the heap
// (docs/reliability.md, Finding 5). Every buffer is held against hold's
// budget before it is allocated (nil: unbounded); one the budget cannot
// hold is errBudget. On an error, what was read before it is returned.
func readBounded(r io.Reader, limit, size int64, hold *overload.Hold) ([]byte, error) {
	return readBody(r, limit, size, hold, true)
}

// readBody is readBounded; keep false drops what was read past the first
// buffer when the read fails (readAnswer).
func readBody(r io.Reader, limit, size int64, hold *overload.Hold, keep bool) ([]byte, error) {
	n := int64(512)
	if size >= 0 {
		// +1: room for the read that reports EOF without growing.
		n = min(size, limit, maxPresize) + 1
	}
	if hold != nil && !hold.Grow(n) {
		return nil, errBudget
	}
	b := make([]byte, 0, n)
	for len(b) < cap(b) {
		if int64(len(b)) > limit {
			return b[:limit], errBodyTooLarge
		}
		end := min(int64(cap(b)), limit+1)
		k, err := r.Read(b[len(b):end])
		b = b[:len(b)+k]
		if err == io.EOF {
			if int64(len(b)) > limit {
				return b[:limit], errBodyTooLarge
			}
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
	return readChunks(r, b, limit, hold, keep)
}

// readChunks goes on reading a body that filled first: into chunks, then
// into one buffer of the body's size (see readBounded). On an error, the
// bytes read are joined only when keep asks for them (readAnswer's caller
// drops them).
func readChunks(r io.Reader, first []byte, limit int64, hold *overload.Hold, keep bool) ([]byte, error) {
	var chunks []*[]byte
	defer func() {
		for _, c := range chunks {
			putChunk(c)
		}
		if hold != nil {
			hold.Shrink(int64(len(chunks)) * chunkSize) // given back (chunkpool.go)
		}
	}()
	total := int64(len(first))
	// join copies what was read into one buffer, held before it is made.
	join := func(err error) ([]byte, error) {
		if err != nil && !keep {
			return nil, err
		}
		n := min(total, limit)
		if hold != nil && !hold.Grow(n) {
			return nil, errBudget
		}
		out := make([]byte, n)
		k := copy(out, first)
		for _, c := range chunks {
			k += copy(out[k:], *c)
		}
		return out, err
	}
	for {
		if total > limit {
			return join(errBodyTooLarge)
		}
		if len(chunks) == 0 || len(*chunks[len(chunks)-1]) == chunkSize {
			if hold != nil && !hold.Grow(chunkSize) {
				return nil, errBudget
			}
			chunks = append(chunks, getChunk())
		}
		c := chunks[len(chunks)-1]
		end := min(int64(len(*c))+limit+1-total, chunkSize)
		k, err := r.Read((*c)[len(*c):end])
		*c = (*c)[:len(*c)+k]
		total += int64(k)
		if err == io.EOF {
			if total > limit {
				return join(errBodyTooLarge)
			}
			return join(nil)
		}
		if err != nil {
			return join(err)
		}
	}
}

// maxPresize bounds the buffer allocated up front from a declared length:
// a lying Content-Length costs at most this much before bytes arrive.
const maxPresize = 4 << 20

var errBodyTooLarge = errors.New("upstream body exceeds the limit")

// errBudget: a buffer would cross the process's buffer budget.
var errBudget = errors.New("buffer budget exhausted: the process holds too many buffered bytes")

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
