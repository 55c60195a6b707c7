package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3/responses"
)

var sonnet = ResponsesOptions{ToMessagesOptions: ToMessagesOptions{Model: "claude-sonnet-4-5-20250929"}, Thinking: true}

// Each case is a Responses request (the API reference's shapes, what Codex
// and the Agents SDK send) and what an Anthropic-family channel receives.
var toResponsesRequestCases = []struct {
	name string
	opt  ResponsesOptions
	kind error // ErrInvalid or ErrUnsupported when refused
}{
	// instructions and a developer item → system; typed and string content; metadata, user, service_tier, store: true dropped and named.
	{"basic", withDefault(sonnet, 4096), nil},
	// function_call → tool_use, two outputs and the next user text → one user turn; the reasoning item never crosses.
	{"tools_roundtrip", sonnet, nil},
	// text.format json_schema → output_config.format; verbosity dropped.
	{"json_schema", sonnet, nil},
	// reasoning.effort high → thinking with its budget; temperature cannot go with thinking.
	{"reasoning", sonnet, nil},
	// A model without extended thinking: reasoning dropped and named, never sent.
	{"reasoning_not_allowed", ResponsesOptions{ToMessagesOptions: ToMessagesOptions{Model: "claude-3-5-haiku-20241022"}, Thinking: false}, nil},
	// A tool loop with thinking: hopgate's own encrypted_content, written at this channel and model, goes back as the signed thinking block first in the assistant turn; include is dropped.
	{"reasoning_replayed", replayAt(sonnet, "an"), nil},
	// The same written at another channel (a failover): dropped, and with no block to replay thinking is off for the loop (Anthropic refuses it), temperature the client's again.
	{"reasoning_replayed_elsewhere", replayAt(sonnet, "an2"), nil},
	// OpenAI's encrypted_content (or none): the same as another channel's.
	{"reasoning_loop_unsigned", replayAt(sonnet, "an"), nil},
	// store: false, background: false and a null previous_response_id are no state to keep.
	{"store_false_stream", sonnet, nil},
	// State kept by OpenAI: refused naming the field (the walk skips such entries).
	{"previous_response", withDefault(sonnet, 4096), ErrUnsupported},
	// A hosted tool: refused naming the tool's index.
	{"hosted_tool", withDefault(sonnet, 4096), ErrUnsupported},
	// json_object has no Anthropic form.
	{"json_object", withDefault(sonnet, 4096), ErrUnsupported},
	// No max_output_tokens and no configured default: refused, never a small constant.
	{"max_tokens_missing", sonnet, ErrInvalid},
	// Bedrock and Vertex take no image URL: a clear 400, never a silent drop.
	{"image_url_base64_only", ResponsesOptions{ToMessagesOptions: bedrock}, ErrInvalid},
}

func replayAt(o ResponsesOptions, channel string) ResponsesOptions {
	o.Replay = ReplayKey(channel, o.Model)
	return o
}

func withDefault(o ResponsesOptions, n int64) ResponsesOptions {
	o.MaxTokensDefault = n
	return o
}

func TestResponsesToMessagesGolden(t *testing.T) {
	for _, tc := range toResponsesRequestCases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ResponsesToMessages(readFile(t, "request_toresponses/"+tc.name+".json"), tc.opt)
			if tc.kind != nil && !errors.Is(err, tc.kind) || tc.kind == nil && err != nil {
				t.Fatalf("err = %v, want %v", err, tc.kind)
			}
			golden(t, "request_toresponses/"+tc.name+".golden", requestGolden(t, r, err))
			if err == nil {
				checkAnthropicParams(t, r.Body)
			}
		})
	}
}

// TestResponsesNativeOnly: the walk's per-hop decision reads the same
// fields the translation refuses, and nothing else.
func TestResponsesNativeOnly(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{`{"input":"hi"}`, ""},
		// Responses stores by default: that alone must not keep a request from Claude.
		{`{"input":"hi","store":true}`, ""},
		{`{"input":"hi","previous_response_id":null,"conversation":null,"background":false}`, ""},
		{`{"input":"hi","previous_response_id":"resp_1"}`, "previous_response_id"},
		{`{"input":"hi","conversation":{"id":"conv_1"}}`, "conversation"},
		{`{"input":"hi","conversation":"conv_1"}`, "conversation"},
		{`{"input":"hi","prompt":{"id":"pmpt_1"}}`, "prompt"},
		{`{"input":"hi","background":true}`, "background"},
		{`{"input":"hi","tools":[{"type":"function","name":"f"},{"type":"file_search"}]}`, "tools[1].type"},
		{`{"input":"hi","tools":[{"type":"code_interpreter"}]}`, "tools[0].type"},
		{`{"input":"hi","tool_choice":{"type":"web_search_preview"}}`, "tool_choice.type"},
		{`{"input":"hi","tool_choice":{"type":"function","name":"f"}}`, ""},
		{`{"input":[{"type":"item_reference","id":"msg_1"}]}`, "input[0].type"},
		{`{"input":[{"role":"user","content":"a"},{"type":"computer_call_output","call_id":"c"}]}`, "input[1].type"},
		{`{"input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}]}`, "input[0].content[0].file_id"},
		// Not an object: the translation answers with its own error.
		{`[1]`, ""},
	} {
		if got := ResponsesNativeOnly([]byte(tc.body)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.body, got, tc.want)
		}
		if tc.want == "" {
			continue
		}
		_, err := ResponsesToMessages([]byte(tc.body), withDefault(sonnet, 100))
		var te *Error
		if !errors.As(err, &te) || !errors.Is(err, ErrUnsupported) || te.Param != tc.want {
			t.Errorf("%s: the translation says %v, want unsupported %s", tc.body, err, tc.want)
		}
	}
}

// TestInterruptAfterTerminal: a stream that failed after its stop reason
// (response.completed already sent) gets no event after the terminal one;
// one cut before it ends with error and response.failed.
func TestInterruptAfterTerminal(t *testing.T) {
	events := sseEvents(t, readFile(t, "stream_toresponses/max_tokens.sse"))
	s := NewMessagesToResponsesStream(created)
	var out []byte
	for _, f := range events[:len(events)-1] { // up to message_delta
		out, _ = s.Event(out, f.Event, f.Data)
	}
	if tail := s.Interrupt(nil, "cut"); len(tail) != 0 {
		t.Fatalf("after response.incomplete: %s", tail)
	}
	s = NewMessagesToResponsesStream(created)
	for _, f := range events[:4] { // text started, no stop reason
		out, _ = s.Event(out[:0], f.Event, f.Data)
	}
	tail := s.Interrupt(nil, "cut")
	if evs := sseEvents(t, tail); len(evs) != 2 || evs[0].Event != "error" || evs[1].Event != "response.failed" {
		t.Fatalf("cut stream ends with %s", tail)
	}
	if again := s.Interrupt(nil, "cut"); len(again) != 0 {
		t.Fatalf("a second interrupt wrote %s", again)
	}
}

func TestThinkingAllowed(t *testing.T) {
	for model, want := range map[string]bool{
		"claude-sonnet-4-5-20250929":                    true,
		"claude-3-7-sonnet-20250219":                    true,
		"us.anthropic.claude-opus-4-1-20250805-v1:0":    true,
		"claude-haiku-4-5@20251001":                     true,
		"claude-3-5-haiku-20241022":                     false,
		"anthropic.claude-3-5-sonnet-20240620-v1:0":     false,
		"claude-3-haiku@20240307":                       false,
		"anthropic.claude-instant-v1":                   false,
		"us.anthropic.claude-3-opus-20240229-v1:0":      false,
		"anthropic.claude-v2:1":                         false,
		"claude-3-sonnet-20240229":                      false,
		"some-future-model-without-a-claude-3-in-there": true,
	} {
		if got := ThinkingAllowed(model); got != want {
			t.Errorf("ThinkingAllowed(%q) = %v", model, got)
		}
	}
}

// Anthropic answers as a Responses client receives them.
var toResponsesAnswers = []struct{ dir, name string }{
	{"response_tochat", "end_turn"},
	// Text then a tool call → a message item and a function_call item.
	{"response_tochat", "tool_use"},
	// Thinking → a reasoning item; cache reads and writes in input_tokens, reads as cached_tokens.
	{"response_tochat", "thinking_cache"},
	// max_tokens → status incomplete, reason max_output_tokens.
	{"response_toresponses", "max_tokens"},
	// An error object in a 200: no answer, the gate's Error.
	{"response_tochat", "error_in_200"},
}

func TestMessageToResponseGolden(t *testing.T) {
	for _, tc := range toResponsesAnswers {
		t.Run(tc.name, func(t *testing.T) {
			body, info, err := MessageToResponse(readFile(t, tc.dir+"/"+tc.name+".json"), created, "")
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			fmt.Fprintf(&b, "gate %s finish=%v tool_calls=%v usage=%d/%d model=%s error=%q\n", info.Kind, info.FinishReason, info.ToolCalls,
				info.Usage.InputTokens, info.Usage.OutputTokens, info.Model, info.ErrorMessage)
			if body != nil {
				b.Write(indent(t, body))
				b.WriteByte('\n')
				var r responses.Response
				if err := json.Unmarshal(body, &r); err != nil {
					t.Fatalf("the SDK cannot decode the response: %v", err)
				}
			}
			golden(t, "response_toresponses/"+tc.name+".golden", b.Bytes())
		})
	}
}

// Anthropic streams as a Responses client receives them.
var toResponsesStreams = []struct {
	dir, name string
	complete  bool
}{
	// Text, then a tool_use whose JSON arguments arrive in nine pieces (the Anthropic SDK's cassette).
	{"stream_tochat", "tool_use", true},
	// Thinking → a reasoning item, signatures dropped; cache reads as cached_tokens.
	{"stream_tochat", "thinking_cache", true},
	// Bedrock: no event names; a tool without input gets "{}".
	{"stream_tochat", "bedrock_no_tool_args", true},
	// max_tokens → response.incomplete with reason max_output_tokens.
	{"stream_toresponses", "max_tokens", true},
	// overloaded_error after content: the error event and response.failed, never response.completed.
	{"stream_tochat", "overloaded_mid_stream", false},
	// overloaded_error before anything decisive: the gate sees Error first (discard).
	{"stream_tochat", "error_before_content", false},
	// A finished answer whose message_stop was lost: complete at End.
	{"stream_tochat", "finished_without_stop", true},
}

func TestMessagesToResponsesStreamGolden(t *testing.T) {
	for _, tc := range toResponsesStreams {
		t.Run(tc.name, func(t *testing.T) {
			events := sseEvents(t, readFile(t, tc.dir+"/"+tc.name+".sse"))
			s := NewMessagesToResponsesStream(created)
			transcript, out := transcribe(t, s, events)
			if !tc.complete {
				start := len(out)
				out = s.Interrupt(out, "channel claude: upstream sent an error after the answer started; the answer above is incomplete")
				transcript = append(transcript, "interrupt\n"...)
				for _, line := range strings.SplitAfter(string(out[start:]), "\n") {
					if line != "" {
						transcript = append(transcript, "   out "+line...)
					}
				}
			}
			golden(t, "stream_toresponses/"+tc.name+".golden", transcript)

			got := responsesEvents(t, out)
			last := got[len(got)-1].Type
			if !tc.complete {
				if last != "response.failed" || got[len(got)-2].Type != "error" {
					t.Fatalf("an interrupted stream ends with %s", last)
				}
				return
			}
			if last != "response.completed" && last != "response.incomplete" {
				t.Fatalf("a complete stream ends with %s", last)
			}
			// The client's accumulated answer is the non-streaming
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
				var ev anthropic.MessageStreamEventUnion
				_ = ev.UnmarshalJSON([]byte(`{"type":"message_stop"}`))
				_ = in.Accumulate(ev)
			}
			want, _, err := MessageToResponse(messageJSON(t, in), created, "")
			if err != nil {
				t.Fatal(err)
			}
			var acc responses.ResponseAccumulator
			for _, ev := range got {
				var se responses.ResponsesServerEventUnion
				if err := json.Unmarshal([]byte(ev.RawJSON()), &se); err != nil {
					t.Fatal(err)
				}
				if err := acc.AddEvent(se); err != nil {
					t.Fatalf("the SDK's accumulator refused %s: %v", ev.RawJSON(), err)
				}
			}
			final, err := acc.ReconstructedResponse()
			if err != nil {
				t.Fatal(err)
			}
			var body responses.Response
			if err := json.Unmarshal(want, &body); err != nil {
				t.Fatal(err)
			}
			if g, w := respAnswer(final), respAnswer(&body); !reflect.DeepEqual(g, w) {
				t.Errorf("stream and body translations differ:\nstream %+v\n  body %+v", g, w)
			}
			// Text deltas accumulated by the SDK's snapshot say the same.
			if g, w := acc.Snapshot().OutputText(), final.OutputText(); g != w {
				t.Errorf("snapshot text %q, final %q", g, w)
			}
		})
	}
}

// respView is what a client makes of a Responses answer.
type respView struct {
	Status, Reason string
	Text           string
	Reasoning      string
	Calls          []string // call_id name arguments
	Usage          [4]int64 // input, cached, output, reasoning
}

func respAnswer(r *responses.Response) respView {
	a := respView{Status: string(r.Status), Reason: string(r.IncompleteDetails.Reason), Text: r.OutputText(),
		Usage: [4]int64{r.Usage.InputTokens, r.Usage.InputTokensDetails.CachedTokens, r.Usage.OutputTokens, r.Usage.OutputTokensDetails.ReasoningTokens}}
	for _, it := range r.Output {
		switch it.Type {
		case "function_call":
			a.Calls = append(a.Calls, it.CallID+" "+it.Name+" "+compactArgs(json.RawMessage(it.Arguments.OfString))) // streamed as sent, compacted whole
		case "reasoning":
			for _, s := range it.Summary {
				a.Reasoning += s.Text
			}
		}
	}
	return a
}

// responsesEvents checks every frame is a named Responses event whose data
// the SDK decodes, with the same type, sequence numbers 0, 1, 2, … and
// nothing after the terminal event.
func responsesEvents(t *testing.T, out []byte) []responses.ResponseStreamEventUnion {
	t.Helper()
	var evs []responses.ResponseStreamEventUnion
	for i, f := range sseEvents(t, out) {
		var ev responses.ResponseStreamEventUnion
		if err := json.Unmarshal(f.Data, &ev); err != nil {
			t.Fatalf("event %d: %v\n%s", i, err, f.Data)
		}
		if ev.Type != f.Event {
			t.Fatalf("event %d is named %q but is a %q", i, f.Event, ev.Type)
		}
		if ev.SequenceNumber != int64(i) {
			t.Fatalf("event %d has sequence_number %d", i, ev.SequenceNumber)
		}
		if n := len(evs); n > 0 {
			switch evs[n-1].Type {
			case "response.completed", "response.incomplete", "response.failed":
				t.Fatalf("%s follows the terminal %s", ev.Type, evs[n-1].Type)
			}
		}
		evs = append(evs, ev)
	}
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	return evs
}

// Both translations to Messages share one turn rule (addTurn, endTurns):
// an empty turn is dropped, and nothing left to send is a 400 naming the
// field, never an empty request to the upstream.
func TestNoTurnLeftIsInvalid(t *testing.T) {
	for _, tc := range []struct {
		name, body, param string
		translate         func([]byte) error
	}{
		{"chat", `{"model":"m","messages":[{"role":"user","content":""}]}`, "messages",
			func(b []byte) error { _, err := ChatToMessages(b, ToMessagesOptions{MaxTokensDefault: 10}); return err }},
		{"responses", `{"model":"m","input":[{"role":"user","content":""}]}`, "input",
			func(b []byte) error { _, err := ResponsesToMessages(b, withDefault(sonnet, 100)); return err }},
	} {
		err := tc.translate([]byte(tc.body))
		var te *Error
		if !errors.As(err, &te) || !errors.Is(err, ErrInvalid) || te.Param != tc.param ||
			!strings.Contains(te.Message, "at least one user or assistant") {
			t.Errorf("%s: the translation says %v, want invalid %s", tc.name, err, tc.param)
		}
	}
}
