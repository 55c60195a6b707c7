package wallet

import "github.com/hopgate/hopgate/dispatch/config"

// BytesPerToken is the estimate of one token's size in bytes: English text
// averages about four bytes per token in OpenAI's tokenizers. Used only
// where no usage was reported: the input of a reservation (the request
// body, JSON and all, which overestimates the prompt) and the output of a
// stream cut before its usage report.
const BytesPerToken = 4

// Tokens is a token usage, reported or estimated.
type Tokens struct {
	Input, Output int64
	// Estimated: no usage was reported; these are the estimates.
	Estimated bool
}

// Sizing is what a reservation is sized from.
type Sizing struct {
	// BodyBytes is the size of the request body as received.
	BodyBytes int
	// MaxTokens is the request's token limit (the largest of max_tokens,
	// max_completion_tokens, max_output_tokens), when present.
	MaxTokens        int64
	MaxTokensPresent bool
}

// EstimateInput estimates input tokens from a body size: ceil(bytes/4).
func EstimateInput(bodyBytes int) int64 {
	return (int64(max(bodyBytes, 0)) + BytesPerToken - 1) / BytesPerToken
}

// Reserved is the usage a hold assumes: the estimated input, and the
// request's token limit as output or, without one, the model's
// reserve_output_tokens.
func Reserved(m *config.Model, s Sizing) Tokens {
	out := m.ReserveOutputTokens
	if s.MaxTokensPresent {
		out = s.MaxTokens
	}
	return Tokens{Input: EstimateInput(s.BodyBytes), Output: out, Estimated: true}
}

// Outcome is what the engine reports about an answered request.
type Outcome struct {
	// Answered: an upstream answer reached the client (in full or cut).
	// Unanswered requests are released, never charged.
	Answered bool
	// Usage as the serving upstream reported it; UsagePresent false when
	// none came (a stream cut after commit, an upstream that reports none).
	InputTokens, OutputTokens int64
	UsagePresent              bool
	// What a stream delivered: text bytes and tool-call frames.
	TextBytes, ToolCallFrames int64
}

// Charged is the usage a request is charged for: the reported usage, or
// the estimate of what was delivered — input from the body size, output
// ceil(text bytes/4) plus one token per tool-call frame (providers stream
// about one token per delta).
func Charged(o Outcome, bodyBytes int) Tokens {
	if o.UsagePresent {
		return Tokens{Input: o.InputTokens, Output: o.OutputTokens}
	}
	out := (max(o.TextBytes, 0)+BytesPerToken-1)/BytesPerToken + max(o.ToolCallFrames, 0)
	return Tokens{Input: EstimateInput(bodyBytes), Output: out, Estimated: true}
}

// Cost is the charge of t at the model's list price, in micro-units
// (rounded up once, see money.Price.Cost).
func Cost(m *config.Model, t Tokens) int64 { return m.ListPrice.Cost(t.Input, t.Output) }
