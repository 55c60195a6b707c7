package dispatch

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/dispatch/apierror"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/telemetry"
)

// degraded writes the reply of a chain that produced no answer: the
// exhaustion error, or the degraded reply when the chain deadline fired.
// With degraded_reply.mode "message" both become a 200 chat message marked
// X-Hopgate-Degraded: 1; by default they are errors.
func (c *call) degraded(reason string, e *apierror.Error) {
	m := c.req.Model
	c.served = nil
	if c.state.Load() == stateCommitted {
		return
	}
	c.state.Store(stateCommitted)
	_, span := c.e.tel.Tracer.Start(c.ctxForSpans(), telemetry.SpanDegradedReply,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String(telemetry.AttrDegradedReason, reason),
			attribute.String(telemetry.AttrModel, m.Name),
			attribute.String(telemetry.AttrDegradedMode, m.Policy.DegradedMode),
			attribute.String(telemetry.AttrErrorCode, e.Code),
		))
	defer span.End()
	c.e.tel.Metrics.Degraded(c.clientCtx, m.Name, reason)
	if reason == "chain_deadline" {
		c.outcome = OutcomeDeadline
	} else {
		c.outcome = OutcomeExhausted
	}
	h := c.w.Header()
	c.setHeaders(h)
	if m.Policy.DegradedMode == config.DegradedMessage && c.req.Operation == "chat" {
		h.Set("X-Hopgate-Degraded", "1")
		c.outcome = OutcomeDegraded
		c.writeDegradedMessage(m)
		return
	}
	c.status = e.Status
	apierror.Write(c.w, c.requestID, e)
}

// ctxForSpans parents late spans under the dispatch span even when the
// request context has been cancelled by the deadline.
func (c *call) ctxForSpans() context.Context {
	return trace.ContextWithSpan(context.WithoutCancel(c.clientCtx), c.span)
}

// writeDegradedMessage answers with a marked assistant message, in the
// shape the client asked for (stream or not).
func (c *call) writeDegradedMessage(m *config.Model) {
	msg := m.Policy.DegradedMessage
	content, _ := json.Marshal(msg)
	id := "hopgate-degraded-" + c.requestID
	created := strconv.FormatInt(c.e.clock.Now().Unix(), 10)
	model, _ := json.Marshal(m.Name)
	c.status = http.StatusOK
	if c.req.Stream {
		c.w.Header().Set("Content-Type", "text/event-stream")
		c.w.Header().Set("Cache-Control", "no-cache")
		c.w.WriteHeader(http.StatusOK)
		chunk := `data: {"id":"` + id + `","object":"chat.completion.chunk","created":` + created + `,"model":` + string(model) +
			`,"choices":[{"index":0,"delta":{"role":"assistant","content":` + string(content) + `},"finish_reason":null}]}` + "\n\n"
		fin := `data: {"id":"` + id + `","object":"chat.completion.chunk","created":` + created + `,"model":` + string(model) +
			`,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
		_ = c.writeFrame([]byte(chunk))
		_ = c.writeFrame([]byte(fin))
		_ = c.writeFrame([]byte("data: [DONE]\n\n"))
		return
	}
	body := `{"id":"` + id + `","object":"chat.completion","created":` + created + `,"model":` + string(model) +
		`,"choices":[{"index":0,"message":{"role":"assistant","content":` + string(content) + `},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}` + "\n"
	c.w.Header().Set("Content-Type", "application/json")
	c.w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	c.w.WriteHeader(http.StatusOK)
	_, _ = c.w.Write([]byte(body))
}
