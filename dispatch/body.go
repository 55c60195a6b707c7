package dispatch

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/dispatch/classify"
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
	b, err := readBounded(body, c.e.maxBody, resp.ContentLength)
	if ir != nil {
		ir.stop()
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
	if !c.commit(head{status: resp.StatusCode, contentType: ct, length: int64(len(b))}, a.ch.ID, "ok") {
		return c.lostCommit()
	}
	_ = c.rw.write(b)
	a.usage, a.respModel = info.Usage, info.Model
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

// passthrough commits a binary 2xx answer at its headers and copies the
// body to the client with a flush per read. Nothing in a binary body can
// be classified, so there is no gate: the status line is the decision.
// After commit there is no failover either; a body that dies or stalls
// (stream_idle_timeout) aborts the request, and the HTTP layer breaks the
// connection so the client sees a truncated transfer, never a clean end
// (the ReverseProxy rule, see STYLE.md).
func (a *attempt) passthrough(resp *http.Response) *classify.HopError {
	c := a.c
	// The client can tell a cut body from a complete one by its length
	// too (when known), not only by the broken connection.
	if !c.commit(head{status: resp.StatusCode, contentType: headerContentType(resp.Header), length: resp.ContentLength}, a.ch.ID, "ok") {
		return c.lostCommit()
	}
	c.dropBody()
	_ = c.rw.flush()

	var body io.Reader = resp.Body
	if d := a.m.Policy.StreamIdleTimeout; d > 0 {
		ir := &idleReader{r: resp.Body, clock: c.e.clock, d: d, cancel: a.cancel}
		defer ir.stop()
		body = ir
	}
	buf := make([]byte, passthroughChunk)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if c.rw.write(buf[:n]) != nil || c.rw.flush() != nil {
				return a.clientGone()
			}
		}
		switch {
		case err == nil:
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
// by copying (io.ReadAll), up to maxPresize.
func readBounded(r io.Reader, limit, size int64) ([]byte, error) {
	n := int64(512)
	if size >= 0 {
		// +1: room for the read that reports EOF without growing.
		n = min(size, limit, maxPresize) + 1
	}
	b := make([]byte, 0, n)
	for {
		if int64(len(b)) > limit {
			return b[:limit], errBodyTooLarge
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		end := int64(cap(b))
		if end > limit+1 {
			end = limit + 1
		}
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
}

// maxPresize bounds the buffer allocated up front from a declared length:
// a lying Content-Length costs at most this much before bytes arrive.
const maxPresize = 4 << 20

var errBodyTooLarge = errors.New("upstream body exceeds the limit")

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
