package translate

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/hopgate/hopgate/internal/gate"
	"github.com/hopgate/hopgate/internal/sse"
)

// Anthropic streams (the SDK's recorded cassettes, the API reference's
// shapes, Bedrock's unframed events) as an OpenAI client receives them.
var toChatStreams = []struct {
	name     string
	usage    bool // the client asked for include_usage
	complete bool // the answer is whole (no error, a stop reason)
}{
	// Text, then a tool_use whose JSON arguments arrive in nine pieces (the SDK's cassette).
	{"tool_use", true, true},
	// The turn after the tool result, from the same cassette.
	{"after_tool_result", false, true},
	// Thinking → reasoning_content, signatures dropped, cache reads in prompt_tokens_details.
	{"thinking_cache", true, true},
	// Bedrock: no event names; a tool without input gets "{}", cache writes carried.
	{"bedrock_no_tool_args", true, true},
	// overloaded_error after content: an in-band OpenAI error frame, no [DONE].
	{"overloaded_mid_stream", false, false},
	// overloaded_error before anything decisive: the gate sees Error first (discard).
	{"error_before_content", false, false},
	// A finished answer whose message_stop was lost: End completes it with [DONE].
	{"finished_without_stop", true, true},
}

func TestMessagesToChatStreamGolden(t *testing.T) {
	for _, tc := range toChatStreams {
		t.Run(tc.name, func(t *testing.T) {
			events := sseEvents(t, readFile(t, "stream_tochat/"+tc.name+".sse"))
			s := NewMessagesToChatStream(ChatStreamOptions{IncludeUsage: tc.usage, Created: created})
			transcript, out := transcribe(t, s, events)
			golden(t, "stream_tochat/"+tc.name+".golden", transcript)

			chunks := openAIFrames(t, out)
			if !tc.complete {
				return
			}
			// The client's accumulated answer equals the non-streaming
			// translation of the upstream's accumulated message.
			var in anthropic.Message
			for _, f := range events {
				var ev anthropic.MessageStreamEventUnion
				if err := ev.UnmarshalJSON(f.Data); err != nil {
					t.Fatal(err)
				}
				if err := in.Accumulate(ev); err != nil {
					t.Fatal(err)
				}
			}
			if !sawStop(events) {
				// The SDK fills content in at message_stop only.
				var ev anthropic.MessageStreamEventUnion
				_ = ev.UnmarshalJSON([]byte(`{"type":"message_stop"}`))
				_ = in.Accumulate(ev)
			}
			var acc openai.ChatCompletionAccumulator
			for _, c := range chunks {
				if !acc.AddChunk(c) {
					t.Fatalf("the accumulator refused chunk %s", c.RawJSON())
				}
				keepCacheWrite(&acc, c)
			}
			body, _, err := MessageToChatCompletion(messageJSON(t, in), created)
			if err != nil {
				t.Fatal(err)
			}
			var want openai.ChatCompletion
			if err := json.Unmarshal(body, &want); err != nil {
				t.Fatal(err)
			}
			got := chatAnswer(acc.ChatCompletion)
			if !tc.usage {
				got.Usage = chatAnswer(want).Usage // no usage chunk was asked for
			}
			if w := chatAnswer(want); !reflect.DeepEqual(got, w) {
				t.Errorf("stream and body translations differ:\nstream %+v\n  body %+v", got, w)
			}
			if g, w := got.Text, messageAnswer(in).Text; g != w {
				t.Errorf("text out %q, in %q", g, w)
			}
		})
	}
}

// OpenAI streams as an Anthropic client receives them.
var toMessagesStreams = []struct {
	name     string
	complete bool
}{
	// Role chunk, text, finish, the usage chunk with cached tokens, [DONE].
	{"text_usage", true},
	// Two tool calls, the first one's arguments in three pieces.
	{"tool_calls", true},
	// A server_error frame after content: an Anthropic error event, no message_stop.
	{"error_mid_stream", false},
	// length with usage on the finish chunk and no [DONE]: End completes it; reasoning never crosses.
	{"length_no_done", true},
	// A refusal is text with stop_reason refusal.
	{"refusal", true},
}

// goldenPromptTokens is the request's local count the goldens' message_start
// carries (dispatch counts it with package tokens).
const goldenPromptTokens = 17

func TestChatToMessagesStreamGolden(t *testing.T) {
	for _, tc := range toMessagesStreams {
		t.Run(tc.name, func(t *testing.T) {
			events := sseEvents(t, readFile(t, "stream_tomessages/"+tc.name+".sse"))
			s := NewChatToMessagesStream()
			s.SetPromptTokens(goldenPromptTokens)
			transcript, out := transcribe(t, s, events)
			golden(t, "stream_tomessages/"+tc.name+".golden", transcript)

			got := anthropicEvents(t, out)
			if !tc.complete {
				return
			}
			var in openai.ChatCompletionAccumulator
			for _, f := range events {
				if string(f.Data) == "[DONE]" {
					continue
				}
				var c openai.ChatCompletionChunk
				if err := json.Unmarshal(f.Data, &c); err != nil {
					t.Fatal(err)
				}
				in.AddChunk(c)
				keepCacheWrite(&in, c)
			}
			var acc anthropic.Message
			for _, ev := range got {
				if err := acc.Accumulate(ev); err != nil {
					t.Fatal(err)
				}
			}
			chatBody, err := json.Marshal(in.ChatCompletion)
			if err != nil {
				t.Fatal(err)
			}
			body, _, err := ChatCompletionToMessage(chatBody)
			if err != nil {
				t.Fatal(err)
			}
			var want anthropic.Message
			if err := json.Unmarshal(body, &want); err != nil {
				t.Fatal(err)
			}
			if g, w := messageAnswer(acc), messageAnswer(want); !reflect.DeepEqual(g, w) {
				t.Errorf("stream and body translations differ:\nstream %+v\n  body %+v", g, w)
			}
			if g, w := messageAnswer(acc).Text, chatAnswer(in.ChatCompletion).Text+refusalOf(in.ChatCompletion); g != w {
				t.Errorf("text out %q, in %q", g, w)
			}
		})
	}
}

// keepCacheWrite: openai-go's accumulator sums every usage count but
// prompt_tokens_details.cache_write_tokens; carry it as a client reading
// the usage chunk would.
func keepCacheWrite(acc *openai.ChatCompletionAccumulator, c openai.ChatCompletionChunk) {
	if c.Usage.PromptTokensDetails.JSON.CacheWriteTokens.Valid() {
		acc.Usage.PromptTokensDetails.CacheWriteTokens += c.Usage.PromptTokensDetails.CacheWriteTokens
	}
}

func sawStop(events []sse.Frame) bool {
	for _, f := range events {
		if bytes.Contains(f.Data, []byte(`"message_stop"`)) {
			return true
		}
	}
	return false
}

func refusalOf(c openai.ChatCompletion) string {
	if len(c.Choices) == 0 {
		return ""
	}
	return c.Choices[0].Message.Refusal
}

// openAIFrames checks every frame is `data: …` and decodes as the SDK
// decodes chunks; an error frame is {"error":{…}} and ends the stream.
func openAIFrames(t *testing.T, out []byte) []openai.ChatCompletionChunk {
	t.Helper()
	var chunks []openai.ChatCompletionChunk
	frames := sseEvents(t, out)
	for i, f := range frames {
		if f.Event != "" {
			t.Fatalf("frame %d has an event name %q", i, f.Event)
		}
		if string(f.Data) == "[DONE]" {
			if i != len(frames)-1 {
				t.Fatalf("[DONE] is not last")
			}
			continue
		}
		if !json.Valid(f.Data) {
			t.Fatalf("frame %d is not JSON: %s", i, f.Data)
		}
		if bytes.HasPrefix(f.Data, []byte(`{"error":`)) {
			if i != len(frames)-1 {
				t.Fatalf("frames follow the error frame")
			}
			continue
		}
		var c openai.ChatCompletionChunk
		if err := json.Unmarshal(f.Data, &c); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if c.Object != "chat.completion.chunk" || c.ID == "" && i > 0 {
			t.Fatalf("frame %d is not a chunk: %s", i, f.Data)
		}
		chunks = append(chunks, c)
	}
	return chunks
}

// anthropicEvents checks every frame is a named event whose name is its
// type, decodes as the SDK decodes events, and that message_start carries
// usage.
func anthropicEvents(t *testing.T, out []byte) []anthropic.MessageStreamEventUnion {
	t.Helper()
	var evs []anthropic.MessageStreamEventUnion
	for i, f := range sseEvents(t, out) {
		if !json.Valid(f.Data) {
			t.Fatalf("event %d is not JSON: %s", i, f.Data)
		}
		var typ struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(f.Data, &typ)
		if typ.Type != f.Event {
			t.Fatalf("event %d: name %q, type %q", i, f.Event, typ.Type)
		}
		if f.Event == "error" {
			continue
		}
		var ev anthropic.MessageStreamEventUnion
		if err := ev.UnmarshalJSON(f.Data); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if ev.Type == "message_start" && !ev.Message.JSON.Usage.Valid() {
			t.Fatalf("message_start without message.usage: %s", f.Data)
		}
		if i == 0 && ev.Type != "message_start" {
			t.Fatalf("first event is %s", ev.Type)
		}
		evs = append(evs, ev)
	}
	return evs
}

func messageJSON(t *testing.T, m anthropic.Message) []byte {
	t.Helper()
	if raw := m.RawJSON(); raw != "" {
		return []byte(raw)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// answer is what a client makes of an answer, in either family.
type answer struct {
	Text   string
	Tools  []answerTool
	Finish string
	Usage  [4]int64 // uncached input, output, cache read, cache write (Anthropic's terms)
}

type answerTool struct{ ID, Name, Args string }

func normJSON(s string) string {
	var v any
	if json.Unmarshal([]byte(s), &v) != nil {
		return "invalid:" + s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func chatAnswer(c openai.ChatCompletion) answer {
	var a answer
	if len(c.Choices) > 0 {
		ch := c.Choices[0]
		a.Text, a.Finish = ch.Message.Content, StopReason(ch.FinishReason)
		for _, tc := range ch.Message.ToolCalls {
			a.Tools = append(a.Tools, answerTool{tc.ID, tc.Function.Name, normJSON(tc.Function.Arguments)})
		}
	}
	u := c.Usage
	a.Usage = [4]int64{u.PromptTokens - u.PromptTokensDetails.CachedTokens - u.PromptTokensDetails.CacheWriteTokens,
		u.CompletionTokens, u.PromptTokensDetails.CachedTokens, u.PromptTokensDetails.CacheWriteTokens}
	return a
}

func messageAnswer(m anthropic.Message) answer {
	var a answer
	var text strings.Builder
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			a.Tools = append(a.Tools, answerTool{b.ID, b.Name, normJSON(string(b.Input))})
		}
	}
	a.Text, a.Finish = text.String(), string(m.StopReason)
	u := m.Usage
	a.Usage = [4]int64{u.InputTokens, u.OutputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens}
	return a
}

// The gate sees an Anthropic stream like an OpenAI one: message_start,
// ping and an empty text block hold; the first text or tool_use commits.
func TestMessagesToChatStreamGate(t *testing.T) {
	cases := []struct {
		name, event, data string
		want              gate.Kind
	}{
		{"message_start holds", "message_start", `{"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":1,"output_tokens":0}}}`, gate.Hold},
		{"ping holds", "ping", `{"type":"ping"}`, gate.Hold},
		{"empty text block holds", "content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`, gate.Hold},
		{"text commits", "content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`, gate.Content},
		{"empty text holds", "content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""}}`, gate.Hold},
		{"tool_use commits", "content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}`, gate.Content},
		{"stop holds", "content_block_stop", `{"type":"content_block_stop","index":0}`, gate.Hold},
		{"unknown event holds", "", `{"type":"future_event"}`, gate.Hold},
		{"garbage is malformed", "", `{"type":`, gate.Malformed},
		{"finish", "message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}`, gate.Finish},
		{"error event", "error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, gate.Error},
		{"error event that is not JSON", "error", `Overloaded`, gate.Error},
		{"Bedrock exception passed as an error event", "error", `{"message":"Too many requests, please wait before trying again."}`, gate.Error},
		{"message_stop is done", "message_stop", `{"type":"message_stop"}`, gate.Done},
	}
	s := NewMessagesToChatStream(ChatStreamOptions{})
	for _, c := range cases {
		out, info := s.Event(nil, c.event, []byte(c.data))
		if info.Kind != c.want {
			t.Errorf("%s: kind %v, want %v", c.name, info.Kind, c.want)
		}
		if c.want == gate.Error && (!bytes.HasPrefix(out, []byte(`data: {"error":{`)) || strings.Contains(c.data, "Too many") && info.ErrorMessage == "") {
			t.Errorf("%s: error frame %q, message %q", c.name, out, info.ErrorMessage)
		}
	}
}

// After [DONE] or message_stop nothing more is written.
func TestStreamsWriteNothingAfterTheEnd(t *testing.T) {
	a := NewMessagesToChatStream(ChatStreamOptions{})
	a.Event(nil, "", []byte(`{"type":"message_stop"}`))
	if out, _ := a.Event(nil, "", []byte(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"late"}}`)); len(out) != 0 {
		t.Errorf("wrote after [DONE]: %s", out)
	}
	o := NewChatToMessagesStream()
	o.Event(nil, "", []byte(`[DONE]`))
	if out, _ := o.Event(nil, "", []byte(`{"id":"x","choices":[{"index":0,"delta":{"content":"late"}}]}`)); len(out) != 0 {
		t.Errorf("wrote after message_stop: %s", out)
	}
}
