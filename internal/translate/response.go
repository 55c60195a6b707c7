package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/hopgate/hopgate/internal/gate"
)

// ErrMalformed: an upstream answer that is not the JSON its family sends.
// Like a malformed body on the pass-through path, it is a failed hop.
var ErrMalformed = errors.New("translate: malformed upstream answer")

type anMessageIn struct {
	ID         string      `json:"id"`
	Type       string      `json:"type"`
	Model      string      `json:"model"`
	Content    []anRespIn  `json:"content"`
	StopReason string      `json:"stop_reason"`
	Usage      *anUsage    `json:"usage"`
	Error      *anErrorObj `json:"error"`
}

type anRespIn struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	Signature string          `json:"signature"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
}

type anErrorObj struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *chatUsage   `json:"usage,omitempty"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      chatRespMessage `json:"message"`
	Logprobs     *struct{}       `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

type chatRespMessage struct {
	Role    string  `json:"role"`
	Content *string `json:"content"`
	Refusal *string `json:"refusal"`
	// ReasoningContent carries Anthropic thinking text, as DeepSeek, vLLM
	// and other OpenAI-compatible servers do. Signatures never cross.
	ReasoningContent string            `json:"reasoning_content,omitempty"`
	ToolCalls        []chatOutToolCall `json:"tool_calls,omitempty"`
}

// MessageToChatCompletion translates an Anthropic message (a non-streaming
// /v1/messages answer) into a chat.completion whose "model" is what the
// upstream reported; created is the caller's clock (Unix seconds). The
// Info says what the body is for the gate: Content, Error (an error object
// in a 200: the hop failed, no output) or Malformed (with ErrMalformed).
func MessageToChatCompletion(body []byte, created int64) ([]byte, gate.Info, error) {
	var m anMessageIn
	if err := json.Unmarshal(body, &m); err != nil || bytes.TrimSpace(body)[0] != '{' {
		return nil, gate.Info{Kind: gate.Malformed}, ErrMalformed
	}
	if m.Type == "error" || m.Error != nil {
		info := gate.Info{Kind: gate.Error, Model: m.Model}
		if m.Error != nil {
			info.ErrorMessage = truncateMessage(m.Error.Message)
		}
		return nil, info, nil
	}
	msg := chatRespMessage{Role: "assistant"}
	var text, thinking strings.Builder
	hasText := false
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
			hasText = true
		case "thinking":
			thinking.WriteString(b.Thinking)
		case "tool_use":
			msg.ToolCalls = append(msg.ToolCalls, chatOutToolCall{ID: b.ID, Type: "function",
				Function: chatOutFunction{Name: b.Name, Arguments: compactArgs(b.Input)}})
		}
		// redacted_thinking, server tool blocks and their results: an
		// OpenAI client has no field for them.
	}
	if hasText || len(msg.ToolCalls) == 0 {
		s := text.String()
		msg.Content = &s
	}
	msg.ReasoningContent = thinking.String()
	out := chatCompletion{ID: m.ID, Object: "chat.completion", Created: created, Model: m.Model,
		Choices: []chatChoice{{Message: msg, FinishReason: FinishReason(m.StopReason)}}}
	info := gate.Info{Kind: gate.Content, FinishReason: true, ToolCalls: len(msg.ToolCalls) > 0, Model: m.Model}
	if m.Usage != nil {
		u := m.Usage.toChat()
		out.Usage = &u
		info.Usage = m.Usage.info()
	}
	return marshal(out), info, nil
}

// compactArgs renders a tool_use input as OpenAI's JSON-string arguments.
func compactArgs(input json.RawMessage) string {
	var b bytes.Buffer
	if isNull(input) || json.Compact(&b, input) != nil {
		return "{}"
	}
	return b.String()
}

type chatCompletionIn struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Content   *string        `json:"content"`
			Refusal   *string        `json:"refusal"`
			ToolCalls []chatToolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsage      `json:"usage"`
	Error json.RawMessage `json:"error"`
}

type anMessageOut struct {
	ID           string      `json:"id"`
	Type         string      `json:"type"`
	Role         string      `json:"role"`
	Model        string      `json:"model"`
	Content      []anRespOut `json:"content"`
	StopReason   string      `json:"stop_reason"`
	StopSequence *string     `json:"stop_sequence"`
	Usage        anUsageOut  `json:"usage"`
}

type anRespOut struct {
	Type  string          `json:"type"`
	Text  *string         `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

// anUsageOut always writes every count.
type anUsageOut struct {
	InputTokens              int64 `json:"input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
}

// ChatCompletionToMessage translates a chat.completion into an Anthropic
// message (an Anthropic client served by an OpenAI-family channel). Choice
// 0 is the answer (MessagesToChat never asks for more). The Info is
// gate.InspectBody's, so both paths classify bodies alike.
func ChatCompletionToMessage(body []byte) ([]byte, gate.Info, error) {
	info := gate.InspectBody(body)
	switch info.Kind {
	case gate.Malformed:
		return nil, info, ErrMalformed
	case gate.Error:
		return nil, info, nil
	}
	var c chatCompletionIn
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, gate.Info{Kind: gate.Malformed}, ErrMalformed
	}
	out := anMessageOut{ID: c.ID, Type: "message", Role: "assistant", Model: c.Model, Content: []anRespOut{}}
	finish := ""
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		finish = ch.FinishReason
		if t := ch.Message.Content; t != nil && *t != "" {
			out.Content = append(out.Content, anRespOut{Type: "text", Text: t})
		}
		if r := ch.Message.Refusal; r != nil && *r != "" {
			out.Content = append(out.Content, anRespOut{Type: "text", Text: r})
			if finish == "stop" {
				finish = "content_filter"
			}
		}
		for _, tc := range ch.Message.ToolCalls {
			out.Content = append(out.Content, anRespOut{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: argsObject(tc.Function.Arguments)})
			info.ToolCalls = true
		}
		break
	}
	info.FinishReason = finish != ""
	out.StopReason = StopReason(finish)
	if c.Usage != nil {
		u := c.Usage.toMessages()
		out.Usage = anUsageOut{InputTokens: u.InputTokens, CacheCreationInputTokens: u.CacheCreationInputTokens,
			CacheReadInputTokens: u.CacheReadInputTokens, OutputTokens: u.OutputTokens}
	}
	return marshal(out), info, nil
}

// argsObject turns JSON-string arguments into a tool_use input object. An
// upstream that produced arguments that are not a JSON object gets {}: the
// same input Anthropic's own SDK keeps for a tool call whose streamed JSON
// does not parse.
func argsObject(args string) json.RawMessage {
	in, err := toolArguments(args, "")
	if err != nil {
		return json.RawMessage("{}")
	}
	return in
}

const maxErrorMessage = 256

// truncateMessage cuts like gate does: at most 256 bytes, whole runes.
func truncateMessage(m string) string {
	if len(m) <= maxErrorMessage {
		return m
	}
	n := maxErrorMessage
	for n > 0 && m[n]&0xC0 == 0x80 {
		n--
	}
	return m[:n]
}
