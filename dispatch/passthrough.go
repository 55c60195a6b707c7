package dispatch

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/gate"
	"github.com/hopgate/hopgate/telemetry"
)

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
// (stream_idle_timeout) marks the request aborted, and the HTTP layer
// breaks the connection so the client sees a truncated transfer, never a
// clean end (the ReverseProxy rule, see STYLE.md).
func (c *call) passthrough(hopCtx context.Context, span trace.Span, cancelHop context.CancelCauseFunc,
	m *config.Model, entry config.Entry, resp *http.Response) hopResult {
	if !c.commit() {
		return c.lostCommit(hopCtx)
	}
	c.dropBody()
	h := c.w.Header()
	h.Set("Content-Type", headerContentType(resp.Header))
	if resp.ContentLength >= 0 {
		// The client can tell a cut body from a complete one by its length
		// too, not only by the broken connection.
		h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	c.setHeadersCommitted(h, "ok")
	c.w.WriteHeader(resp.StatusCode)
	c.status = resp.StatusCode
	_ = c.rc.Flush()

	var body io.Reader = resp.Body
	if d := m.Policy.StreamIdleTimeout; d > 0 {
		ir := &idleReader{r: resp.Body, clock: c.e.clock, d: d, cancel: cancelHop}
		defer ir.stop()
		body = ir
	}
	buf := make([]byte, passthroughChunk)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := c.w.Write(buf[:n]); werr != nil {
				return c.clientGone(span)
			}
			if c.rc.Flush() != nil {
				return c.clientGone(span)
			}
		}
		switch {
		case err == nil:
			continue
		case errors.Is(err, io.EOF):
			c.recordUsage(hopCtx, span, m, entry, gate.Usage{}, "")
			c.setOutcomeOK()
			return hopResult{class: classify.Success, done: true, status: resp.StatusCode, label: "ok"}
		case c.clientCtx.Err() != nil:
			return c.clientGone(span)
		}
		why := "upstream body failed after the answer started: " + err.Error()
		if context.Cause(hopCtx) == errIdleTimeout {
			why = "upstream body stalled for " + m.Policy.StreamIdleTimeout.String()
		}
		return c.abortBody(hopCtx, span, m, entry, why)
	}
}

// abortBody ends a committed binary answer that cannot be completed. An
// SSE stream would get an in-band error frame; bytes of audio cannot carry
// one, so the connection is broken instead (Result.Aborted).
func (c *call) abortBody(ctx context.Context, span trace.Span, m *config.Model, entry config.Entry, why string) hopResult {
	ch := entry.Channel
	c.e.tel.Metrics.StreamInterrupted(ctx, ch.ID, m.Name)
	span.SetAttributes(
		attribute.String(telemetry.AttrStreamEnd, "aborted"),
		attribute.String(telemetry.AttrErrorType, telemetry.ErrTypeStreamInterrupted),
	)
	span.AddEvent("client connection aborted: " + why)
	c.steps = append(c.steps, telemetry.Step{Channel: ch.ID, Result: "cut"})
	c.outcome = OutcomeInterrupted
	c.interrupted = true
	c.aborted = true
	return hopResult{class: classify.Retryable, done: true, status: c.status, label: "cut", stepRecorded: true}
}
