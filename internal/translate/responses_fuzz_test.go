package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/internal/gate"
)

// Any Responses request body: no panic; a translation is valid JSON the
// Anthropic SDK's request type decodes, an error a typed *Error; and the
// walk's per-hop decision (ResponsesNativeOnly) agrees with the
// translation: a request it would skip never translates, and one the
// translation refuses as OpenAI-only is one it skips (else a chain that
// could fail over to OpenAI would answer a final 400).
func FuzzResponsesToMessages(f *testing.F) {
	addRequestSeeds(f, "request_toresponses")
	f.Add([]byte(`{"input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}],"Background":true}`))
	f.Add([]byte(`{"input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","file_id":"f"}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		opt := ResponsesOptions{ToMessagesOptions: ToMessagesOptions{MaxTokensDefault: 1024, Base64ImagesOnly: len(body)%2 == 0}, Thinking: len(body)%3 == 0}
		if len(body)%5 != 0 { // the seeds' replayed blocks (reasoning_replayed.json) decode at this key
			opt.Replay = ReplayKey("an", "claude-sonnet-4-5-20250929")
		}
		r, err := ResponsesToMessages(body, opt)
		checkTranslated(t, r, err)
		native := ResponsesNativeOnly(body)
		var te *Error
		switch {
		case err == nil && native != "":
			t.Fatalf("%q translates, but the walk would skip it for %s", body, native)
		case errors.As(err, &te) && te.native && native == "":
			t.Fatalf("%q is refused as OpenAI-only (%s), but the walk would not skip it", body, te.Param)
		}
		if err == nil {
			checkAnthropicParams(t, r.Body)
		}
	})
}

// Any sequence of Anthropic events (text, tool_use with streamed input,
// thinking, in any order, any stop reason): no panic; every event is valid
// JSON named by its type with sequence numbers 0, 1, 2, …; the text, the
// reasoning and each call's arguments out are exactly those in, both in
// the deltas and in the terminal response.output; one terminal event.
func FuzzMessagesToResponsesStream(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 1, 0, 4, 2, 2}, "Hello, world! {\"city\": \"Paris\"} \"quoted\"\n", false)
	f.Add([]byte{1, 1, 1, 1, 1, 1}, "{\"a\":[1,2,{\"b\":\"\\u00e9\"}]}", true)
	f.Add([]byte{2, 0, 3, 2, 5}, "\xff\xfe<&>\u2028", false)
	f.Fuzz(func(t *testing.T, choices []byte, text string, cut bool) {
		o := &ops{choices}
		at := 0
		s := NewMessagesToResponsesStream(1)
		var out []byte
		var inText, inThinking strings.Builder
		var inArgs []string
		decisive := false
		ev := func(name string, v any) {
			data, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			var info gate.Info
			out, info = s.Event(out, name, data)
			decisive = decisive || info.Kind == gate.Content
		}
		ev("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_1", "model": "claude", "usage": map[string]any{"input_tokens": 3, "cache_read_input_tokens": 5, "output_tokens": 1}}})
		index := 0
		for blocks := o.next(6); blocks > 0; blocks-- {
			switch o.next(4) {
			case 0, 1:
				ev("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": map[string]any{"type": "text", "text": ""}})
				for n := o.next(5); n > 0; n-- {
					p := o.piece(text, &at)
					inText.WriteString(validUTF8(p))
					ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "text_delta", "text": p}})
					if o.next(3) == 0 {
						ev("ping", map[string]any{"type": "ping"})
					}
				}
			case 2:
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
			case 3:
				ev("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": map[string]any{"type": "thinking", "thinking": ""}})
				p := o.piece(text, &at)
				inThinking.WriteString(validUTF8(p))
				ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "thinking_delta", "thinking": p}})
				ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "signature_delta", "signature": "sig"}})
			}
			ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
			index++
		}
		terminal := "response.failed"
		if cut {
			out = s.Interrupt(out, "cut")
		} else {
			stops := []string{"end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"}
			stop := stops[o.next(len(stops))]
			ev("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop}, "usage": map[string]any{"output_tokens": 9}})
			ev("message_stop", map[string]any{"type": "message_stop"})
			st, _ := respStatus(stop)
			terminal = "response." + st
			if _, complete := s.End(nil); !complete {
				t.Fatal("a stream that reached message_stop is not complete")
			}
		}

		var outText, outThinking strings.Builder
		outArgs := map[int]string{}
		var final struct {
			Output []struct {
				Type      string
				Arguments string
				Content   []struct{ Text string }
				Summary   []struct{ Text string }
			}
		}
		terminals := 0
		for i, fr := range sseEvents(t, out) {
			var e struct {
				Type           string
				SequenceNumber *int `json:"sequence_number"`
				OutputIndex    int  `json:"output_index"`
				Delta          string
				Response       json.RawMessage
			}
			if !json.Valid(fr.Data) || json.Unmarshal(fr.Data, &e) != nil {
				t.Fatalf("event %d is not JSON: %q", i, fr.Data)
			}
			if e.Type != fr.Event || e.SequenceNumber == nil || *e.SequenceNumber != i {
				t.Fatalf("event %d: %q named %q, sequence_number %v", i, e.Type, fr.Event, e.SequenceNumber)
			}
			if terminals > 0 {
				t.Fatalf("%s after the terminal event", e.Type)
			}
			switch e.Type {
			case "response.output_text.delta":
				outText.WriteString(e.Delta)
			case "response.reasoning_summary_text.delta":
				outThinking.WriteString(e.Delta)
			case "response.function_call_arguments.delta":
				outArgs[e.OutputIndex] += e.Delta
			case terminal:
				terminals++
				if err := json.Unmarshal(e.Response, &final); err != nil {
					t.Fatal(err)
				}
			case "response.completed", "response.incomplete", "response.failed":
				t.Fatalf("terminal %s, want %s", e.Type, terminal)
			}
		}
		if terminals != 1 {
			t.Fatalf("%d %s events", terminals, terminal)
		}
		var gotArgs []string
		for i := 0; len(gotArgs) < len(outArgs); i++ { // output indexes, in order
			if a, ok := outArgs[i]; ok {
				gotArgs = append(gotArgs, a)
			}
		}
		var finText, finThinking strings.Builder
		var finArgs []string
		for _, it := range final.Output {
			switch it.Type {
			case "message":
				for _, c := range it.Content {
					finText.WriteString(c.Text)
				}
			case "reasoning":
				for _, c := range it.Summary {
					finThinking.WriteString(c.Text)
				}
			case "function_call":
				finArgs = append(finArgs, it.Arguments)
			}
		}
		for _, c := range [][3]string{
			{"text", inText.String(), outText.String()},
			{"text in response.output", inText.String(), finText.String()},
			{"reasoning", inThinking.String(), outThinking.String()},
			{"reasoning in response.output", inThinking.String(), finThinking.String()},
			{"arguments", strings.Join(inArgs, "\x00"), strings.Join(gotArgs, "\x00")},
			{"arguments in response.output", strings.Join(inArgs, "\x00"), strings.Join(finArgs, "\x00")},
		} {
			if c[1] != c[2] {
				t.Fatalf("%s out %q, in %q", c[0], c[2], c[1])
			}
		}
		if !decisive && (inText.Len() > 0 || inThinking.Len() > 0 || len(inArgs) > 0) {
			t.Fatal("content streamed but nothing was decisive for the gate")
		}
	})
}

// Any bytes as events: no panic, every event written is valid JSON, and
// an interrupted stream still ends in valid JSON.
func FuzzMessagesToResponsesStreamRaw(f *testing.F) {
	seedFrames(f, "stream_tochat", "tool_use", "thinking_cache", "bedrock_no_tool_args", "overloaded_mid_stream")
	seedFrames(f, "stream_toresponses", "max_tokens")
	f.Fuzz(func(t *testing.T, raw []byte) {
		s := NewMessagesToResponsesStream(1)
		var out []byte
		for _, fr := range sseEvents(t, raw) {
			var info gate.Info
			out, info = s.Event(out, fr.Event, fr.Data)
			_ = info.Kind.String()
		}
		var complete bool
		if out, complete = s.End(out); !complete {
			out = s.Interrupt(out, "cut")
		}
		for _, fr := range sseEvents(t, out) {
			if !json.Valid(fr.Data) || !bytes.HasPrefix(fr.Data, []byte(`{"type":`)) {
				t.Fatalf("invalid event %q", fr.Data)
			}
		}
	})
}
