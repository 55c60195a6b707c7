package provider

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/hopgate/hopgate/dispatch/config"
)

// countURL is the token-counting endpoint of an Anthropic-family channel:
// Anthropic's /v1/messages/count_tokens, Vertex's count-tokens:rawPredict
// (the model in the body), Bedrock's CountTokens
// (/model/{id}/count-tokens).
func (u *Upstream) countURL(r *Request) string {
	base := u.ch.BaseURL
	switch u.ch.Provider {
	case config.ProviderBedrock:
		return base + "/model/" + url.PathEscape(BedrockCountModel(r.Model)) + "/count-tokens"
	case config.ProviderVertex:
		return base + "/v1/projects/" + url.PathEscape(u.ch.Project) + "/locations/" + url.PathEscape(u.ch.Region) +
			"/publishers/anthropic/models/count-tokens:rawPredict"
	}
	return base + "/v1/messages/count_tokens"
}

// BedrockCountModel is the model id Bedrock's CountTokens takes for an
// entry's upstream_model: the foundation model of a cross-region
// inference profile ("us.anthropic.claude-…" → "anthropic.claude-…"),
// since CountTokens refuses profile ids ("The provided model doesn't
// support counting tokens", a ValidationException) while a profile and
// its foundation model share one tokenizer. Any other id (a foundation
// model, an ARN) is kept.
func BedrockCountModel(id string) string {
	geo, rest, ok := strings.Cut(id, ".")
	if !ok || !strings.HasPrefix(rest, "anthropic.") {
		return id
	}
	switch geo {
	case "us", "eu", "apac", "global", "us-gov", "jp", "au", "ca":
		return rest
	}
	return id
}

// bedrockCountMaxTokens is the max_tokens of the InvokeModel body Bedrock's
// CountTokens wraps when the client's count_tokens body has none (it never
// has: the field is not part of that API), since Bedrock validates the
// wrapped body as an InvokeModel request (with thinking, one above its
// budget). It does not change the count.
const bedrockCountMaxTokens = 1

// prepareCount adapts a count_tokens body: Vertex keeps the model in the
// body and takes anthropic_version; Bedrock takes the InvokeModel body it
// would count, base64-encoded, in {"input":{"invokeModel":{"body":…}}}.
func (u *Upstream) prepareCount(body []byte, r *Request) ([]byte, []string, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return nil, nil, fmt.Errorf("request body is not a JSON object")
	}
	betas, dropped := AllowedBetas(u.ch.Provider, r.Beta)
	if u.ch.Provider == config.ProviderVertex {
		if _, ok := top["anthropic_version"]; !ok {
			top["anthropic_version"] = json.RawMessage(`"` + VertexVersion + `"`)
		}
		out, err := json.Marshal(top)
		return out, dropped, err
	}
	delete(top, "model")
	delete(top, "stream")
	if _, ok := top["anthropic_version"]; !ok {
		top["anthropic_version"] = json.RawMessage(`"` + BedrockVersion + `"`)
	}
	if _, ok := top["max_tokens"]; !ok {
		n := int64(bedrockCountMaxTokens)
		// With thinking (Claude Code counts a history holding thinking
		// blocks with it on), InvokeModel wants max_tokens above the
		// budget.
		var th struct {
			BudgetTokens int64 `json:"budget_tokens"`
		}
		if v, ok := top["thinking"]; ok && json.Unmarshal(v, &th) == nil && th.BudgetTokens >= n {
			n = th.BudgetTokens + 1
		}
		top["max_tokens"] = json.RawMessage(fmt.Sprint(n))
	}
	if len(betas) > 0 {
		b, _ := json.Marshal(betas)
		top["anthropic_beta"] = b
	}
	inner, err := json.Marshal(top)
	if err != nil {
		return nil, nil, err
	}
	out, err := json.Marshal(map[string]any{"input": map[string]any{"invokeModel": map[string]string{
		"body": base64.StdEncoding.EncodeToString(inner),
	}}})
	return out, dropped, err
}
