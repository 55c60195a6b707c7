package dispatch

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/dispatch/apierror"
)

// Claims on a request's reply. The chain deadline's timer and the first
// decisive answer race for it: exactly one wins, by compare-and-swap.
const (
	replyOpen     int32 = iota // nothing has claimed the reply
	replyClaimed               // an answer, a final error or hopgate's own reply
	replyDeadline              // the chain deadline: the degraded reply follows
)

// responder owns what reached the client: who may answer (the claim),
// the one status line with hopgate's headers, the bytes of the answer, the
// in-band error frame of a stream that could not be completed, and the
// broken connection of a binary body that could not. Only the request's
// goroutine writes; the deadline timer only claims.
type responder struct {
	w  http.ResponseWriter
	rc *http.ResponseController

	state   atomic.Int32
	written bool // the status line is out: nothing else may be tried
	status  int
	outcome string
	aborted bool // a binary body was cut: the connection must break

	// What a committed stream delivered.
	finish    bool   // a finish_reason
	done      bool   // [DONE]
	toolCalls bool   // tool-call deltas (no resume after them)
	keepText  bool   // the delivered text is kept (mid_stream: resume)
	delivered []byte // that text
	pending   bool   // frames written but not flushed yet
	// run is frames passed on but not yet written: consecutive bytes of
	// the stream reader's buffer, written at once before the next write,
	// flush or read (runs.go); join extends it (nil: each write goes out).
	run  []byte
	join func(run, raw []byte) ([]byte, bool)
	// answered: an upstream answer was committed (what a wallet charges);
	// counted is what it delivered so far.
	answered bool
	counted  Delivered
	// marked: Request.Delivering was called (delivery.go).
	marked bool
}

// claim takes the reply for an answer; false when the chain deadline took
// it first.
func (r *responder) claim() bool { return r.state.CompareAndSwap(replyOpen, replyClaimed) }

// expire takes the reply for the chain deadline; false when an answer was
// claimed first (a committed stream is never cut by the deadline).
func (r *responder) expire() bool { return r.state.CompareAndSwap(replyOpen, replyDeadline) }

// gatewayHeaders are hopgate's response headers (DESIGN.md §4).
type gatewayHeaders struct {
	requestID, model, attempts, traceparent string
	path                                    string // "" when the path header is off
}

// RequestID is the trace id of the request's span: X-Request-Id, on every
// answer and refusal (package api's too), and the request_id of hopgate's
// error bodies.
func RequestID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}

// Traceparent renders the W3C traceparent of the request's server span.
func Traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	flags := "00"
	if sc.IsSampled() {
		flags = "01"
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + flags
}

// head is the status line and the answer's own headers.
type head struct {
	status      int
	contentType string // "" for none
	length      int64  // Content-Length, < 0 for none
	stream      bool   // an SSE stream: no caching, no proxy buffering
}

// writeHead writes the status line with the answer's headers and
// hopgate's, once: the caller holds the claim.
func (r *responder) writeHead(h head, g *gatewayHeaders) {
	hdr := r.w.Header()
	// One backing array for the values instead of one per Set; each value
	// is capped at length 1, so an append elsewhere copies it.
	vals := make([]string, 7)
	vals[0], vals[1], vals[2] = g.requestID, g.model, g.attempts
	hdr["X-Request-Id"] = vals[0:1:1]
	hdr["X-Hopgate-Model"] = vals[1:2:2]
	hdr["X-Hopgate-Attempts"] = vals[2:3:3]
	if g.traceparent != "" {
		vals[3] = g.traceparent
		hdr["Traceparent"] = vals[3:4:4]
	}
	if g.path != "" {
		vals[4] = g.path
		hdr["X-Hopgate-Path"] = vals[4:5:5]
	}
	if h.contentType != "" {
		vals[5] = h.contentType
		hdr["Content-Type"] = vals[5:6:6]
	}
	if h.length >= 0 {
		vals[6] = strconv.FormatInt(h.length, 10)
		hdr["Content-Length"] = vals[6:7:7]
	}
	if h.stream {
		hdr.Set("Cache-Control", "no-cache")
		hdr.Set("X-Accel-Buffering", "no") // tell nginx-style proxies not to buffer
	}
	r.w.WriteHeader(h.status)
	r.status = h.status
	r.written = true
}

// writeStatus writes the status line of a reply whose headers are set.
func (r *responder) writeStatus(status int) {
	r.w.WriteHeader(status)
	r.status = status
	r.written = true
}

// writeError writes hopgate's own error reply (the caller holds the claim).
func (r *responder) writeError(g *gatewayHeaders, requestID string, e *apierror.Error, anthropic bool) {
	r.setGatewayHeaders(g)
	r.status = e.Status
	r.written = true
	if anthropic {
		apierror.WriteAnthropic(r.w, requestID, e)
		return
	}
	apierror.Write(r.w, requestID, e)
}

// setGatewayHeaders sets hopgate's headers without writing the status line
// (replies written by apierror or as a degraded message).
func (r *responder) setGatewayHeaders(g *gatewayHeaders) {
	hdr := r.w.Header()
	hdr.Set("X-Request-Id", g.requestID)
	hdr.Set("X-Hopgate-Model", g.model)
	hdr.Set("X-Hopgate-Attempts", g.attempts)
	if g.traceparent != "" {
		hdr.Set("Traceparent", g.traceparent)
	}
	if g.path != "" {
		hdr.Set("X-Hopgate-Path", g.path)
	}
}

// write writes bytes of the answer without flushing: a frame that
// continues the run is only added to it.
func (r *responder) write(b []byte) error {
	if r.queue(b) {
		return nil
	}
	_, err := r.w.Write(b)
	return err
}

// flush sends what was written.
func (r *responder) flush() error {
	r.pending = false
	if err := r.writeRun(); err != nil {
		return err
	}
	return r.rc.Flush()
}

// frame writes one frame and flushes it; false when the client is gone.
func (r *responder) frame(b []byte) bool {
	if r.write(b) != nil {
		return false
	}
	return r.flush() == nil
}

// flushPending flushes frames written without a flush.
func (r *responder) flushPending() {
	if r.pending {
		_ = r.flush()
	}
}

// interrupt ends a committed stream that cannot be completed with the
// in-band error frame and no [DONE], so no client mistakes it for a full
// answer (DESIGN.md §2, after commit).
func (r *responder) interrupt(frame []byte) {
	_ = r.frame(frame)
	r.outcome = OutcomeInterrupted
}

// abort marks a committed binary body that was cut: bytes of audio cannot
// carry an error frame, so the HTTP layer breaks the connection
// (Result.Aborted) and the client sees a truncated transfer.
func (r *responder) abort() {
	r.aborted = true
	r.outcome = OutcomeInterrupted
}

// retryAfterHint is the Retry-After of the deadline's degraded reply.
func retryAfterHint(d time.Duration) time.Duration {
	if d <= 0 {
		return time.Second
	}
	return d
}
