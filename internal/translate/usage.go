package translate

import "github.com/hopgate/hopgate/internal/gate"

// anUsage is Anthropic's usage object (message, message_start,
// message_delta). Anthropic's input_tokens excludes cached tokens.
type anUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	OutputTokensDetails      *struct {
		ThinkingTokens int64 `json:"thinking_tokens"`
	} `json:"output_tokens_details,omitempty"`
}

// chatUsage is OpenAI's usage object. prompt_tokens includes cached tokens.
type chatUsage struct {
	PromptTokens            int64              `json:"prompt_tokens"`
	CompletionTokens        int64              `json:"completion_tokens"`
	TotalTokens             int64              `json:"total_tokens"`
	PromptTokensDetails     *promptDetails     `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails *completionDetails `json:"completion_tokens_details,omitempty"`
}

type promptDetails struct {
	CachedTokens     int64 `json:"cached_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
}

type completionDetails struct {
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

// toChat: Anthropic counts cache reads and writes beside input_tokens,
// OpenAI inside prompt_tokens (with cached_tokens and cache_write_tokens as
// the breakdown).
func (u anUsage) toChat() chatUsage {
	prompt := u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
	c := chatUsage{
		PromptTokens:        prompt,
		CompletionTokens:    u.OutputTokens,
		TotalTokens:         prompt + u.OutputTokens,
		PromptTokensDetails: &promptDetails{CachedTokens: u.CacheReadInputTokens, CacheWriteTokens: u.CacheCreationInputTokens},
	}
	if u.OutputTokensDetails != nil {
		c.CompletionTokensDetails = &completionDetails{ReasoningTokens: u.OutputTokensDetails.ThinkingTokens}
	}
	return c
}

func (u anUsage) info() gate.Usage {
	return gate.Usage{InputTokens: u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens, OutputTokens: u.OutputTokens, Present: true}
}

// toMessages is the inverse of anUsage.toChat.
func (c chatUsage) toMessages() anUsage {
	var cached, written int64
	if d := c.PromptTokensDetails; d != nil {
		cached, written = d.CachedTokens, d.CacheWriteTokens
	}
	in := c.PromptTokens - cached - written
	if in < 0 {
		in = 0
	}
	u := anUsage{InputTokens: in, OutputTokens: c.CompletionTokens, CacheReadInputTokens: cached, CacheCreationInputTokens: written}
	return u
}

// appendAnUsage writes Anthropic's usage object with every count present:
// message_start.message.usage must always be there (DESIGN §8), and
// clients read missing counts as errors or zeros inconsistently.
func appendAnUsage(dst []byte, u anUsage) []byte {
	dst = append(dst, `{"input_tokens":`...)
	dst = appendInt(dst, u.InputTokens)
	dst = append(dst, `,"cache_creation_input_tokens":`...)
	dst = appendInt(dst, u.CacheCreationInputTokens)
	dst = append(dst, `,"cache_read_input_tokens":`...)
	dst = appendInt(dst, u.CacheReadInputTokens)
	dst = append(dst, `,"output_tokens":`...)
	dst = appendInt(dst, u.OutputTokens)
	return append(dst, '}')
}

func appendChatUsage(dst []byte, u anUsage) []byte {
	c := u.toChat()
	dst = append(dst, `{"prompt_tokens":`...)
	dst = appendInt(dst, c.PromptTokens)
	dst = append(dst, `,"completion_tokens":`...)
	dst = appendInt(dst, c.CompletionTokens)
	dst = append(dst, `,"total_tokens":`...)
	dst = appendInt(dst, c.TotalTokens)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = appendInt(dst, c.PromptTokensDetails.CachedTokens)
	dst = append(dst, `,"cache_write_tokens":`...)
	dst = appendInt(dst, c.PromptTokensDetails.CacheWriteTokens)
	dst = append(dst, '}')
	if c.CompletionTokensDetails != nil {
		dst = append(dst, `,"completion_tokens_details":{"reasoning_tokens":`...)
		dst = appendInt(dst, c.CompletionTokensDetails.ReasoningTokens)
		dst = append(dst, '}')
	}
	return append(dst, '}')
}
