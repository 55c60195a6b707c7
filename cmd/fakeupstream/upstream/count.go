package upstream

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
)

// countEndpoint is the token count of each Anthropic-family dialect:
// Anthropic's POST /v1/messages/count_tokens, Vertex's
// .../models/count-tokens:rawPredict (the model in the body) and
// Bedrock's CountTokens, POST /model/{id}/count-tokens with the
// InvokeModel body base64-encoded in {"input":{"invokeModel":{"body"}}}.
var countEndpoint = endpoint{method: http.MethodPost, count: true, serve: serveCount}

// parseCount reads a count body (Bedrock's unwrapped first).
func (ex *exchange) parseCount(body []byte) error {
	if ex.dialect == DialectBedrock {
		var w struct {
			Input struct {
				InvokeModel *struct {
					Body string `json:"body"`
				} `json:"invokeModel"`
			} `json:"input"`
		}
		if err := json.Unmarshal(body, &w); err != nil || w.Input.InvokeModel == nil {
			return errors.New("input.invokeModel.body: Field required")
		}
		b, err := base64.StdEncoding.DecodeString(w.Input.InvokeModel.Body)
		if err != nil {
			return errors.New("input.invokeModel.body: not base64")
		}
		body = b
	}
	m, err := parseMessagesRequest(body)
	if err != nil {
		return err
	}
	ex.msgs, ex.req = m, parsedFromMessages(m)
	return nil
}

// CountOf is the fake's token count of a prompt: one token per word of its
// system prompt and messages, plus one per message (what tests compare).
func CountOf(m *MessagesRequest) int {
	n := len(strings.Fields(m.SystemText()))
	for _, t := range m.Messages {
		n++
		for _, b := range t.Content {
			n += len(strings.Fields(blockText(b)))
		}
	}
	return n
}

// serveCount answers a count in the dialect's shape.
func serveCount(ex *exchange) {
	if ex.dialect == DialectBedrock && bedrockProfileID(ex.model) {
		// As Bedrock does: CountTokens takes foundation models only.
		ex.bedrockError(http.StatusBadRequest, "ValidationException", "The provided model doesn't support counting tokens.")
		return
	}
	if m := ex.msgs; ex.dialect == DialectBedrock && m.ThinkingEnabled() && m.MaxTokens <= m.Thinking.BudgetTokens {
		// Bedrock validates the wrapped body as an InvokeModel request.
		ex.bedrockError(http.StatusBadRequest, "ValidationException",
			"The model returned the following errors: `max_tokens` must be greater than `thinking.budget_tokens`.")
		return
	}
	n := CountOf(ex.msgs)
	b, _ := json.Marshal(map[string]int{"input_tokens": n})
	if ex.dialect == DialectBedrock {
		b, _ = json.Marshal(map[string]int{"inputTokens": n})
	}
	ex.w.Header().Set("Content-Type", "application/json")
	ex.w.WriteHeader(http.StatusOK)
	_, _ = ex.w.Write(b)
}

// bedrockProfileID reports a cross-region inference profile id
// ("us.anthropic.…").
func bedrockProfileID(id string) bool {
	geo, rest, ok := strings.Cut(id, ".")
	return ok && strings.HasPrefix(rest, "anthropic.") && !strings.Contains(geo, ":")
}
