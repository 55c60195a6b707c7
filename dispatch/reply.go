package dispatch

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/hopgate/hopgate/dispatch/apierror"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/translate"
	"github.com/hopgate/hopgate/telemetry"
)

// degraded writes the reply of a chain that produced no answer (the caller
// holds the claim, or the chain deadline does): the exhaustion error, or
// the degraded reply when the chain deadline fired. With
// degraded_reply.mode "message" both become a 200 chat message marked
// X-Hopgate-Degraded: 1; by default they are errors.
func (c *call) degraded(reason string, e *apierror.Error) {
	m := c.req.Model
	c.served = nil
	// The request context may be cancelled by the deadline: the span still
	// belongs under dispatch.
	c.span.Degraded(context.WithoutCancel(c.clientCtx), telemetry.Degraded{
		Reason: reason, Model: m.Name, Mode: m.Policy.DegradedMode, Code: e.Code,
	})
	c.e.tel.Metrics.Degraded(c.clientCtx, m.Name, reason)
	if reason == "chain_deadline" {
		c.rw.outcome = OutcomeDeadline
	} else {
		c.rw.outcome = OutcomeExhausted
	}
	g := c.headers()
	if m.Policy.DegradedMode == config.DegradedMessage && c.req.Operation == config.OpChat {
		c.rw.setGatewayHeaders(&g)
		c.rw.w.Header().Set("X-Hopgate-Degraded", "1")
		c.rw.outcome = OutcomeDegraded
		c.writeDegradedMessage(m)
		return
	}
	c.rw.writeError(&g, c.requestID, e, c.req.anthropicErrors())
}

// writeDegradedMessage answers with a marked assistant message, in the
// shape the client asked for (stream or not) and in its dialect: a
// /v1/messages client gets an Anthropic message (its events), built by the
// same translators as an OpenAI-family channel's answer to it.
func (c *call) writeDegradedMessage(m *config.Model) {
	msg := m.Policy.DegradedMessage
	content, _ := json.Marshal(msg)
	id := "hopgate-degraded-" + c.requestID
	created := strconv.FormatInt(c.e.clock.Now().Unix(), 10)
	model, _ := json.Marshal(m.Name)
	anthropic := c.req.Events == MessagesEvents
	h := c.rw.w.Header()
	if c.req.Stream {
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		c.rw.writeStatus(http.StatusOK)
		chunks := [][]byte{
			[]byte(`{"id":"` + id + `","object":"chat.completion.chunk","created":` + created + `,"model":` + string(model) +
				`,"choices":[{"index":0,"delta":{"role":"assistant","content":` + string(content) + `},"finish_reason":null}]}`),
			[]byte(`{"id":"` + id + `","object":"chat.completion.chunk","created":` + created + `,"model":` + string(model) +
				`,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`),
			[]byte("[DONE]"),
		}
		var tr *translate.ChatToMessagesStream
		if anthropic {
			tr = translate.NewChatToMessagesStream()
		}
		for _, data := range chunks {
			var out []byte
			if tr != nil {
				out, _ = tr.Event(nil, "", data)
			} else {
				out = append(append([]byte("data: "), data...), "\n\n"...)
			}
			_ = c.rw.frame(out)
		}
		return
	}
	body := []byte(`{"id":"` + id + `","object":"chat.completion","created":` + created + `,"model":` + string(model) +
		`,"choices":[{"index":0,"message":{"role":"assistant","content":` + string(content) + `},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}`)
	if anthropic {
		if b, _, err := translate.ChatCompletionToMessage(body); err == nil {
			body = b
		}
	}
	body = append(body, '\n')
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	c.rw.writeStatus(http.StatusOK)
	_ = c.rw.write(body)
}
