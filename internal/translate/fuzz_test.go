package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/internal/gate"
)

// ops turns fuzz bytes into a sequence of small choices.
type ops struct{ b []byte }

func (o *ops) next(n int) int {
	if len(o.b) == 0 {
		return 0
	}
	v := int(o.b[0]) % n
	o.b = o.b[1:]
	return v
}

// piece takes a string of up to 8 bytes from the fuzz input: any bytes,
// invalid UTF-8 and JSON-special ones included.
func (o *ops) piece(text string, at *int) string {
	n := o.next(9)
	if *at+n > len(text) {
		n = len(text) - *at
	}
	s := text[*at : *at+n]
	*at += n
	return s
}

// validUTF8 is what a JSON encoder makes of s (each invalid byte →
// U+FFFD): the upstream's events are JSON, so pieces are compared as the
// upstream's encoder wrote them.
func validUTF8(s string) string {
	b, _ := json.Marshal(s)
	var r string
	_ = json.Unmarshal(b, &r)
	return r
}

// Any sequence of well-formed Anthropic events: no panic, every frame is
// valid JSON, and the text, reasoning and arguments out are exactly those
// in — nothing lost, nothing duplicated.
func FuzzMessagesToChatStream(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 1, 0, 4, 2, 2}, "Hello, world! {\"city\": \"Paris\"} \"quoted\"\n", true)
	f.Add([]byte{1, 1, 1, 1, 1, 1}, "{\"a\":[1,2,{\"b\":\"\\u00e9\"}]}", false)
	f.Add([]byte{2, 0, 3, 2, 5}, "\xff\xfe<&>\u2028", true)
	f.Fuzz(func(t *testing.T, choices []byte, text string, usage bool) {
		o := &ops{choices}
		at := 0
		s := NewMessagesToChatStream(ChatStreamOptions{IncludeUsage: usage, Created: 1})
		var out []byte
		var inText, inThinking strings.Builder
		var inArgs []string
		ev := func(name string, v any) {
			data, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			out, _ = s.Event(out, name, data)
		}
		ev("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_1", "model": "claude", "usage": map[string]any{"input_tokens": 3, "output_tokens": 1}}})
		index := 0
		for blocks := o.next(6); blocks > 0; blocks-- {
			switch o.next(4) {
			case 0, 1: // text
				ev("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": map[string]any{"type": "text", "text": ""}})
				for n := o.next(5); n > 0; n-- {
					p := o.piece(text, &at)
					inText.WriteString(validUTF8(p))
					ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "text_delta", "text": p}})
					if o.next(3) == 0 {
						ev("ping", map[string]any{"type": "ping"})
					}
				}
			case 2: // tool_use
				ev("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": map[string]any{"type": "tool_use", "id": "toolu_" + strconv.Itoa(index), "name": "f", "input": map[string]any{}}})
				var args strings.Builder
				for n := o.next(5); n > 0; n-- {
					p := o.piece(text, &at)
					args.WriteString(validUTF8(p))
					ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "input_json_delta", "partial_json": p}})
				}
				a := args.String()
				if a == "" {
					a = "{}"
				}
				inArgs = append(inArgs, a)
			case 3: // thinking
				ev("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": map[string]any{"type": "thinking", "thinking": ""}})
				p := o.piece(text, &at)
				inThinking.WriteString(validUTF8(p))
				ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "thinking_delta", "thinking": p}})
				ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "signature_delta", "signature": "sig"}})
			}
			ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
			index++
		}
		stops := []string{"end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"}
		ev("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stops[o.next(len(stops))]}, "usage": map[string]any{"output_tokens": 9}})
		ev("message_stop", map[string]any{"type": "message_stop"})

		var outText, outThinking strings.Builder
		var outArgs []string
		finishes, usages := 0, 0
		frames := sseEvents(t, out)
		for i, fr := range frames {
			if string(fr.Data) == "[DONE]" {
				if i != len(frames)-1 {
					t.Fatal("[DONE] is not last")
				}
				continue
			}
			var c struct {
				Choices []struct {
					Delta struct {
						Content          *string
						ReasoningContent *string `json:"reasoning_content"`
						ToolCalls        []struct {
							Index    int
							Function struct{ Arguments string }
						} `json:"tool_calls"`
					}
					FinishReason *string `json:"finish_reason"`
				}
				Usage *json.RawMessage
			}
			if !json.Valid(fr.Data) || json.Unmarshal(fr.Data, &c) != nil {
				t.Fatalf("frame %d is not a JSON chunk: %q", i, fr.Data)
			}
			if c.Usage != nil {
				usages++
			}
			for _, ch := range c.Choices {
				if ch.Delta.Content != nil {
					outText.WriteString(*ch.Delta.Content)
				}
				if ch.Delta.ReasoningContent != nil {
					outThinking.WriteString(*ch.Delta.ReasoningContent)
				}
				for _, tc := range ch.Delta.ToolCalls {
					for len(outArgs) <= tc.Index {
						outArgs = append(outArgs, "")
					}
					outArgs[tc.Index] += tc.Function.Arguments
				}
				if ch.FinishReason != nil {
					finishes++
				}
			}
		}
		if outText.String() != inText.String() {
			t.Fatalf("text out %q, in %q", outText.String(), inText.String())
		}
		if outThinking.String() != inThinking.String() {
			t.Fatalf("reasoning out %q, in %q", outThinking.String(), inThinking.String())
		}
		if strings.Join(outArgs, "\x00") != strings.Join(inArgs, "\x00") {
			t.Fatalf("arguments out %q, in %q", outArgs, inArgs)
		}
		if finishes != 1 || usage != (usages == 1) || usages > 1 {
			t.Fatalf("%d finish chunks, %d usage chunks (asked: %v)", finishes, usages, usage)
		}
		if _, complete := s.End(nil); !complete {
			t.Fatal("a stream that reached message_stop is not complete")
		}
	})
}

// seedFrames adds each fixture's frames in small groups: whole transcripts
// make the fuzzer's minimization of every new input crawl.
func seedFrames(f *testing.F, dir string, names ...string) {
	for _, name := range names {
		raw, err := os.ReadFile(filepath.Join("testdata", dir, name+".sse"))
		if err != nil {
			f.Fatal(err)
		}
		frames := bytes.SplitAfter(raw, []byte("\n\n"))
		for i := 0; i < len(frames); i += 3 {
			f.Add(bytes.Join(frames[i:min(i+3, len(frames))], nil))
		}
	}
}

// Any bytes as events: no panic, and every frame written is valid JSON.
func FuzzMessagesToChatStreamRaw(f *testing.F) {
	seedFrames(f, "stream_tochat", "tool_use", "thinking_cache", "bedrock_no_tool_args", "overloaded_mid_stream")
	f.Fuzz(func(t *testing.T, raw []byte) {
		s := NewMessagesToChatStream(ChatStreamOptions{IncludeUsage: true})
		var out []byte
		for _, fr := range sseEvents(t, raw) {
			var info gate.Info
			out, info = s.Event(out, fr.Event, fr.Data)
			_ = info.Kind.String()
		}
		out, _ = s.End(out)
		for _, fr := range sseEvents(t, out) {
			if string(fr.Data) != "[DONE]" && !json.Valid(fr.Data) {
				t.Fatalf("invalid frame %q", fr.Data)
			}
		}
	})
}

// Any sequence of OpenAI chunks (text, refusal, tool calls interleaved in
// any order, finish, usage): no panic, every event valid JSON named by its
// type, and text and each tool's arguments out exactly those in.
func FuzzChatToMessagesStream(f *testing.F) {
	f.Add([]byte{0, 1, 2, 2, 1, 3, 0, 2}, "Hello {\"location\": \"Paris\"} done", true)
	f.Add([]byte{1, 1, 2, 1, 2, 2, 2}, "\xff\"\\\n<&>", false)
	f.Fuzz(func(t *testing.T, choices []byte, text string, done bool) {
		o := &ops{choices}
		at := 0
		s := NewChatToMessagesStream()
		var out []byte
		var inText strings.Builder
		var inArgs []string
		chunk := func(choice map[string]any, usage map[string]any) {
			c := map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt"}
			if choice != nil {
				c["choices"] = []any{choice}
			} else {
				c["choices"] = []any{}
			}
			if usage != nil {
				c["usage"] = usage
			}
			data, _ := json.Marshal(c)
			out, _ = s.Event(out, "", data)
		}
		chunk(map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": ""}}, nil)
		for n := o.next(12); n > 0; n-- {
			switch o.next(4) {
			case 0:
				p := o.piece(text, &at)
				inText.WriteString(validUTF8(p))
				chunk(map[string]any{"index": 0, "delta": map[string]any{"content": p}}, nil)
			case 1:
				p := o.piece(text, &at)
				inText.WriteString(validUTF8(p))
				chunk(map[string]any{"index": 0, "delta": map[string]any{"refusal": p}}, nil)
			case 2: // a new tool call
				i := len(inArgs)
				p := o.piece(text, &at)
				inArgs = append(inArgs, validUTF8(p))
				chunk(map[string]any{"index": 0, "delta": map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": "call_" + strconv.Itoa(i), "type": "function", "function": map[string]any{"name": "f", "arguments": p}}}}}, nil)
			case 3: // arguments for any earlier tool call, interleaving included
				if len(inArgs) == 0 {
					continue
				}
				i := o.next(len(inArgs))
				p := o.piece(text, &at)
				inArgs[i] += validUTF8(p)
				chunk(map[string]any{"index": 0, "delta": map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": p}}}}}, nil)
			}
		}
		chunk(map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}, nil)
		chunk(nil, map[string]any{"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12})
		if done {
			out, _ = s.Event(out, "", []byte("[DONE]"))
		}
		var complete bool
		out, complete = s.End(out)
		if !complete {
			t.Fatal("a finished stream is not complete")
		}

		types := map[int]string{}
		var outText strings.Builder
		args := map[int]string{}
		var names []string
		for i, fr := range sseEvents(t, out) {
			var ev struct {
				Type         string
				Index        int
				ContentBlock struct{ Type string } `json:"content_block"`
				Delta        struct {
					Type        string
					Text        string
					PartialJSON string `json:"partial_json"`
				}
			}
			if !json.Valid(fr.Data) || json.Unmarshal(fr.Data, &ev) != nil || ev.Type != fr.Event {
				t.Fatalf("event %d: %s %q", i, fr.Event, fr.Data)
			}
			names = append(names, ev.Type)
			switch ev.Type {
			case "content_block_start":
				if _, dup := types[ev.Index]; dup {
					t.Fatalf("block %d started twice", ev.Index)
				}
				types[ev.Index] = ev.ContentBlock.Type
			case "content_block_delta":
				switch types[ev.Index] {
				case "text":
					outText.WriteString(ev.Delta.Text)
				case "tool_use":
					args[ev.Index] += ev.Delta.PartialJSON
				default:
					t.Fatalf("delta for block %d that never started", ev.Index)
				}
			}
		}
		if names[0] != "message_start" || names[len(names)-1] != "message_stop" || names[len(names)-2] != "message_delta" {
			t.Fatalf("event order %v", names)
		}
		if outText.String() != inText.String() {
			t.Fatalf("text out %q, in %q", outText.String(), inText.String())
		}
		var outArgs []string
		for i := 0; i < len(types); i++ {
			if types[i] == "tool_use" {
				outArgs = append(outArgs, args[i])
			}
		}
		if strings.Join(outArgs, "\x00") != strings.Join(inArgs, "\x00") {
			t.Fatalf("arguments out %q, in %q", outArgs, inArgs)
		}
	})
}

// Any bytes as chunks: no panic, every event valid JSON.
func FuzzChatToMessagesStreamRaw(f *testing.F) {
	seedFrames(f, "stream_tomessages", "text_usage", "tool_calls", "error_mid_stream", "refusal")
	f.Fuzz(func(t *testing.T, raw []byte) {
		s := NewChatToMessagesStream()
		var out []byte
		for _, fr := range sseEvents(t, raw) {
			out, _ = s.Event(out, fr.Event, fr.Data)
		}
		out, _ = s.End(out)
		for _, fr := range sseEvents(t, out) {
			if !json.Valid(fr.Data) {
				t.Fatalf("invalid event %q", fr.Data)
			}
		}
	})
}

func addRequestSeeds(f *testing.F, dir string) {
	files, _ := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// Any request body: no panic; a translation is valid JSON the Anthropic
// SDK's request type decodes, an error is a typed *Error.
func FuzzChatToMessages(f *testing.F) {
	addRequestSeeds(f, "request_tomessages")
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ChatToMessages(body, ToMessagesOptions{MaxTokensDefault: 1024, Base64ImagesOnly: len(body)%2 == 0})
		checkTranslated(t, r, err)
	})
}

func FuzzMessagesToChat(f *testing.F) {
	addRequestSeeds(f, "request_tochat")
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := MessagesToChat(body, ToChatOptions{Model: "gpt"})
		checkTranslated(t, r, err)
	})
}

func checkTranslated(t *testing.T, r Request, err error) {
	t.Helper()
	if err != nil {
		if _, ok := err.(*Error); !ok {
			t.Fatalf("untyped error %v", err)
		}
		return
	}
	if !json.Valid(r.Body) || !bytes.HasPrefix(r.Body, []byte("{")) {
		t.Fatalf("invalid body %q", r.Body)
	}
}

// Any upstream answer body (untrusted bytes): no panic; a translated
// answer is one JSON object; a body that is not a JSON object is Malformed
// with ErrMalformed, never an answer.
func FuzzResponses(f *testing.F) {
	addRequestSeeds(f, "response_tochat")
	addRequestSeeds(f, "response_tomessages")
	f.Add([]byte(` {"content":[{"type":"tool_use","input":[1,}]} `))
	f.Fuzz(func(t *testing.T, body []byte) {
		for name, translate := range map[string]func([]byte) ([]byte, gate.Info, error){
			"MessageToChatCompletion": func(b []byte) ([]byte, gate.Info, error) { return MessageToChatCompletion(b, 1) },
			"ChatCompletionToMessage": ChatCompletionToMessage,
			"MessageToResponse":       func(b []byte) ([]byte, gate.Info, error) { return MessageToResponse(b, 1, "k") },
		} {
			out, info, err := translate(body)
			switch {
			case err != nil:
				if !errors.Is(err, ErrMalformed) || info.Kind != gate.Malformed || out != nil {
					t.Fatalf("%s(%q) = %q, %v, %v", name, body, out, info.Kind, err)
				}
			case info.Kind == gate.Error:
				if out != nil {
					t.Fatalf("%s(%q): an error answer translated to %q", name, body, out)
				}
			case !json.Valid(out) || !bytes.HasPrefix(out, []byte("{")):
				t.Fatalf("%s(%q) = invalid %q", name, body, out)
			}
		}
	})
}

// Any upstream error body (untrusted bytes, HTML from a proxy included):
// no panic; the error in the other family's shape is valid JSON.
func FuzzErrorBodies(f *testing.F) {
	f.Add([]byte(`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`))
	f.Add([]byte(`{"error":{"message":"m","type":"invalid_request_error","code":"context_length_exceeded","param":"messages"}}`))
	f.Add([]byte(`{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED"}}`))
	f.Add([]byte(`{"Message":"Input is too long for requested model."}`))
	f.Add([]byte(`<html><body>502 Bad Gateway</body></html>`))
	f.Add([]byte(`{"error":"text"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		_ = ContextLengthExceeded(body)
		for _, status := range []int{400, 429, 529} {
			if out := AnthropicErrorToOpenAI(status, body); !json.Valid(out) {
				t.Fatalf("AnthropicErrorToOpenAI(%d, %q) = invalid %q", status, body, out)
			}
			if out := OpenAIErrorToAnthropic(status, body); !json.Valid(out) {
				t.Fatalf("OpenAIErrorToAnthropic(%d, %q) = invalid %q", status, body, out)
			}
			if out := CloudErrorToAnthropic(status, body); !json.Valid(out) {
				t.Fatalf("CloudErrorToAnthropic(%d, %q) = invalid %q", status, body, out)
			}
		}
	})
}
