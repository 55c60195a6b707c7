package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/hopgate/hopgate/internal/gate"
)

func infoLine(info gate.Info) string {
	return fmt.Sprintf("gate: kind=%s finish=%v tool_calls=%v model=%q usage=%d/%d present=%v error=%q\n",
		info.Kind, info.FinishReason, info.ToolCalls, info.Model, info.Usage.InputTokens, info.Usage.OutputTokens, info.Usage.Present, info.ErrorMessage)
}

// Anthropic messages (the SDK's cassettes and the API reference) as an
// OpenAI client receives them, decoded by openai-go.
func TestMessageToChatCompletionGolden(t *testing.T) {
	for _, name := range []string{
		"tool_use",       // text + tool_use → content + tool_calls, finish tool_calls
		"end_turn",       // plain text, finish stop
		"thinking_cache", // thinking → reasoning_content, no signature; cache read/write → prompt details
		"error_in_200",   // an error object in a 200 is a failed hop: no output
	} {
		t.Run(name, func(t *testing.T) {
			out, info, err := MessageToChatCompletion(readFile(t, "response_tochat/"+name+".json"), created)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if out != nil {
				b.Write(indent(t, out))
				b.WriteString("\n")
				var c openai.ChatCompletion
				if err := json.Unmarshal(out, &c); err != nil {
					t.Fatalf("openai-go cannot decode it: %v", err)
				}
				if c.Object != "chat.completion" || len(c.Choices) != 1 || c.Choices[0].FinishReason == "" {
					t.Errorf("not a complete chat.completion: %+v", c)
				}
			}
			b.WriteString(infoLine(info))
			golden(t, "response_tochat/"+name+".golden", b.Bytes())
		})
	}
}

// Chat completions (the API reference's examples) as an Anthropic client
// receives them, decoded by anthropic-sdk-go.
func TestChatCompletionToMessageGolden(t *testing.T) {
	for _, name := range []string{
		"tool_calls",   // tool_calls → tool_use with parsed input ("" → {}), cached and written tokens
		"text",         // stop → end_turn
		"refusal",      // a refusal is text with stop_reason refusal
		"error_in_200", // an error object in a 200 is a failed hop
	} {
		t.Run(name, func(t *testing.T) {
			out, info, err := ChatCompletionToMessage(readFile(t, "response_tomessages/"+name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if out != nil {
				b.Write(indent(t, out))
				b.WriteString("\n")
				var m anthropic.Message
				if err := json.Unmarshal(out, &m); err != nil {
					t.Fatalf("anthropic-sdk-go cannot decode it: %v", err)
				}
				if m.Type != "message" || m.StopReason == "" || !m.JSON.Usage.Valid() {
					t.Errorf("not a complete message: %s", out)
				}
			}
			b.WriteString(infoLine(info))
			golden(t, "response_tomessages/"+name+".golden", b.Bytes())
		})
	}
}

// Every stop reason Anthropic documents maps to a finish_reason, and back.
func TestStopReasonsGolden(t *testing.T) {
	var b bytes.Buffer
	for _, r := range []anthropic.StopReason{
		anthropic.StopReasonEndTurn, anthropic.StopReasonMaxTokens, anthropic.StopReasonStopSequence,
		anthropic.StopReasonToolUse, anthropic.StopReasonPauseTurn, anthropic.StopReasonRefusal,
		anthropic.StopReasonModelContextWindowExceeded,
	} {
		body := `{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[{"type":"text","text":"x"}],"stop_reason":"` + string(r) + `","usage":{"input_tokens":1,"output_tokens":1}}`
		out, _, err := MessageToChatCompletion([]byte(body), created)
		if err != nil {
			t.Fatal(err)
		}
		var c openai.ChatCompletion
		if err := json.Unmarshal(out, &c); err != nil {
			t.Fatal(err)
		}
		// The same stop reason through the stream transcoder.
		s := NewMessagesToChatStream(ChatStreamOptions{})
		s.Event(nil, "message_start", []byte(`{"type":"message_start","message":{"id":"msg_1","model":"claude","usage":{"input_tokens":1,"output_tokens":0}}}`))
		frame, _ := s.Event(nil, "message_delta", []byte(`{"type":"message_delta","delta":{"stop_reason":"`+string(r)+`"},"usage":{"output_tokens":1}}`))
		if !bytes.Contains(frame, []byte(`"finish_reason":"`+c.Choices[0].FinishReason+`"`)) {
			t.Errorf("%s: stream says %s, body says %s", r, frame, c.Choices[0].FinishReason)
		}
		fmt.Fprintf(&b, "anthropic %-30s -> openai %s\n", r, c.Choices[0].FinishReason)
	}
	for _, f := range []string{"stop", "length", "tool_calls", "content_filter", "function_call"} {
		body := `{"id":"c","object":"chat.completion","model":"gpt","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"` + f + `"}]}`
		out, _, err := ChatCompletionToMessage([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		var m anthropic.Message
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "openai %-14s -> anthropic %s\n", f, m.StopReason)
	}
	golden(t, "stop_reasons.golden", b.Bytes())
}

// Cache read and write counts survive a trip through both families.
func TestUsageRoundTrip(t *testing.T) {
	u := anUsage{InputTokens: 50, OutputTokens: 420, CacheReadInputTokens: 8000, CacheCreationInputTokens: 1500}
	c := u.toChat()
	if c.PromptTokens != 9550 || c.PromptTokensDetails.CachedTokens != 8000 || c.PromptTokensDetails.CacheWriteTokens != 1500 || c.TotalTokens != 9970 {
		t.Fatalf("toChat = %+v", c)
	}
	if back := c.toMessages(); back != u {
		t.Fatalf("round trip = %+v, want %+v", back, u)
	}
	if i := u.info(); i.InputTokens != 9550 || i.OutputTokens != 420 {
		t.Fatalf("gate usage %+v counts the whole prompt", i)
	}
}

func TestMalformedAnswers(t *testing.T) {
	for _, body := range []string{``, `null`, `[]`, `{"id":`, `"text"`} {
		if _, info, err := MessageToChatCompletion([]byte(body), 0); !errors.Is(err, ErrMalformed) || info.Kind != gate.Malformed {
			t.Errorf("MessageToChatCompletion(%q) = %v, %v", body, info.Kind, err)
		}
		if _, info, err := ChatCompletionToMessage([]byte(body)); !errors.Is(err, ErrMalformed) || info.Kind != gate.Malformed {
			t.Errorf("ChatCompletionToMessage(%q) = %v, %v", body, info.Kind, err)
		}
	}
}
