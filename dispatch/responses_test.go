package dispatch_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// responsesConfig: Responses models whose chains fail over from an
// OpenAI-family channel to each Anthropic-family one (oai's upstream model
// names its fault), a Claude-only one, and one walking Anthropic first.
const responsesConfig = `
region: test-1
auth: {mode: none}
channels:
  - {id: oai, provider: openai, base_url: "{{url:oai}}", api_key_env: CHANNEL_KEY, region: r-1}
  - {id: an, provider: anthropic, base_url: "{{base:an}}", api_key_env: CHANNEL_KEY, region: r-3}
  - {id: br, provider: bedrock, base_url: "{{base:br}}", region: us-east-1}
  - {id: vx, provider: vertex, base_url: "{{base:vx}}", project: fake-project, region: us-east5}
models:
  - name: r-an
    operations: [chat, responses]
    max_tokens_default: 1024
    chain:
      - {channel: oai, upstream_model: "g|503", price: {input: 1, output: 1}}
      - {channel: an, upstream_model: "m|tokens=4", price: {input: 2, output: 2}}
  - name: r-br
    operations: [responses]
    max_tokens_default: 1024
    chain:
      - {channel: oai, upstream_model: "g|503", price: {input: 1, output: 1}}
      - {channel: br, upstream_model: "m|tokens=4", price: {input: 2, output: 2}}
  - name: r-vx
    operations: [responses]
    max_tokens_default: 1024
    chain:
      - {channel: oai, upstream_model: "g|503", price: {input: 1, output: 1}}
      - {channel: vx, upstream_model: "m|tokens=4", price: {input: 2, output: 2}}
  - name: claude-only
    operations: [responses]
    max_tokens_default: 1024
    chain: [{channel: an, upstream_model: "c|tokens=4"}]
  - name: gpt-cut
    operations: [responses]
    chain: [{channel: oai, upstream_model: "g|tokens=6|cut=3"}]
  - name: claude-first
    operations: [responses]
    max_tokens_default: 1024
    chain:
      - {channel: an, upstream_model: "c|tokens=4", price: {input: 1, output: 1}}
      - {channel: oai, upstream_model: "g|tokens=4", price: {input: 2, output: 2}}
`

func newResponsesGateway(t *testing.T) *gwtest.Gateway {
	t.Helper()
	return gwtest.NewWith(t, familiesOptions(upstream.DefaultAWSSecretAccessKey), responsesConfig, "oai", "an", "br", "vx")
}

// streamResponse reads a Responses stream through the SDK and its
// accumulator: the events, and the response the accumulator rebuilt.
func streamResponse(t *testing.T, s *ssestream.Stream[responses.ResponseStreamEventUnion]) ([]responses.ResponseStreamEventUnion, *responses.Response) {
	t.Helper()
	defer s.Close()
	var evs []responses.ResponseStreamEventUnion
	var acc responses.ResponseAccumulator
	for s.Next() {
		ev := s.Current()
		evs = append(evs, ev)
		var se responses.ResponsesServerEventUnion
		if err := json.Unmarshal([]byte(ev.RawJSON()), &se); err != nil {
			t.Fatal(err)
		}
		if err := acc.AddEvent(se); err != nil && ev.Type != "error" {
			t.Fatalf("the accumulator refused %s: %v", ev.RawJSON(), err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	final, _ := acc.ReconstructedResponse()
	return evs, final
}

var lookupTool = responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
	Name: "lookup", Description: openai.String("Looks a word up."),
	Parameters: map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}},
}}

// TestResponsesSDKFailsOverToClaude: openai-go's Responses client, answer
// and stream (through its accumulator), on a chain whose OpenAI channel
// fails (503) and whose next entry is Anthropic, Bedrock or Vertex; on
// Anthropic also a function call with streamed arguments and its output
// sent back.
func TestResponsesSDKFailsOverToClaude(t *testing.T) {
	h := newResponsesGateway(t)
	c := openaiSDK(h)
	ctx := t.Context()
	want := upstream.Answer(4)
	for _, ch := range []string{"an", "br", "vx"} {
		t.Run(ch, func(t *testing.T) {
			params := responses.ResponseNewParams{Model: "r-" + ch, Instructions: openai.String("Be brief."),
				Input:    responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
				Metadata: map[string]string{"team": "a"}}
			var hr *http.Response
			got, err := c.Responses.New(ctx, params, oaoption.WithResponseInto(&hr))
			if err != nil || got.OutputText() != want || got.Status != "completed" || got.Usage.OutputTokens != 4 || got.Usage.InputTokens == 0 {
				t.Fatalf("response %+v, %v", got, err)
			}
			// oai's breaker opens after three of its 503s: then it is skipped.
			if p := hr.Header.Get("X-Hopgate-Path"); p != "oai:503 -> "+ch+":ok" && p != "oai:open -> "+ch+":ok" {
				t.Fatalf("path %q", p)
			}
			if d := droppedOn(t, h, hr.Header.Get("X-Request-Id"), ch); !strings.Contains(d, "metadata") {
				t.Fatalf("dropped on the hop span: %q", d)
			}
			sent := h.Ups[ch].Log()
			if a := sent[len(sent)-1].Anthropic; a == nil || len(a.Messages) != 1 || a.MaxTokens != 1024 {
				t.Fatalf("the provider got %+v", a)
			}

			evs, final := streamResponse(t, c.Responses.NewStreaming(ctx, params))
			if final == nil || final.OutputText() != want || final.Usage.OutputTokens != 4 || evs[len(evs)-1].Type != "response.completed" {
				t.Fatalf("stream ended with %s: %+v", evs[len(evs)-1].Type, final)
			}
			for i, ev := range evs {
				if ev.SequenceNumber != int64(i) {
					t.Fatalf("event %d (%s) has sequence_number %d", i, ev.Type, ev.SequenceNumber)
				}
			}
		})
	}

	t.Run("function call", func(t *testing.T) {
		if err := h.Ups["an"].SetFault("m|tokens=4", "tool-calls"); err != nil {
			t.Fatal(err)
		}
		params := responses.ResponseNewParams{Model: "r-an", Tools: []responses.ToolUnionParam{lookupTool},
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("look it up")}}
		evs, final := streamResponse(t, c.Responses.NewStreaming(ctx, params))
		var deltas int
		for _, ev := range evs {
			if ev.Type == "response.function_call_arguments.delta" {
				deltas++
			}
		}
		if final == nil || len(final.Output) != 1 || deltas < 2 {
			t.Fatalf("%d argument deltas, output %+v", deltas, final)
		}
		call := final.Output[0]
		var args map[string]string
		if call.Type != "function_call" || call.Name != "lookup" || call.CallID == "" ||
			json.Unmarshal([]byte(call.Arguments.OfString), &args) != nil || args["q"] != want {
			t.Fatalf("function call %+v", call)
		}
		// The call and its output go back as input items: the provider
		// sees a tool_use and the tool_result for it.
		if err := h.Ups["an"].SetFault("m|tokens=4", ""); err != nil {
			t.Fatal(err)
		}
		out := responses.ResponseInputItemParamOfFunctionCallOutput("found it")
		out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
		params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("look it up", responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfFunctionCall(call.Arguments.OfString, call.CallID, call.Name),
			out,
		}}
		got, err := c.Responses.New(ctx, params)
		if err != nil || got.OutputText() != want {
			t.Fatalf("after the function output: %+v, %v", got, err)
		}
		log := h.Ups["an"].Log()
		sent := log[len(log)-1].Anthropic
		if sent == nil || len(sent.Messages) != 3 {
			t.Fatalf("the provider did not get the round trip: %+v", sent)
		}
		use, result := sent.Messages[1].Content, sent.Messages[2].Content
		if len(use) != 1 || use[0].Type != "tool_use" || use[0].ID != call.CallID ||
			len(result) != 1 || result[0].Type != "tool_result" || result[0].ToolUseID != call.CallID {
			t.Fatalf("tool_use %+v, tool_result %+v", use, result)
		}
	})
}

// droppedOn is hopgate.translate.dropped of the trace's hop on channel.
func droppedOn(t *testing.T, h *gwtest.Gateway, traceID, channel string) string {
	t.Helper()
	for _, s := range h.Trace(traceID) {
		var ch, dropped string
		for _, kv := range s.Attributes {
			switch string(kv.Key) {
			case telemetry.AttrChannel:
				ch = kv.Value.AsString()
			case telemetry.AttrTranslationDropped:
				dropped = strings.Join(kv.Value.AsStringSlice(), ",")
			}
		}
		if ch == channel && dropped != "" {
			return dropped
		}
	}
	return ""
}

// TestResponsesIncompleteAndCut: max_output_tokens below the answer is
// response.incomplete (answer and stream); a stream cut after commit ends
// with the error event and response.failed, never response.completed.
func TestResponsesIncompleteAndCut(t *testing.T) {
	h := newResponsesGateway(t)
	c := openaiSDK(h)
	ctx := t.Context()
	params := responses.ResponseNewParams{Model: "claude-only", MaxOutputTokens: openai.Int(2),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
	got, err := c.Responses.New(ctx, params)
	if err != nil || got.Status != "incomplete" || got.IncompleteDetails.Reason != "max_output_tokens" || got.OutputText() != upstream.Answer(2) {
		t.Fatalf("response %+v, %v", got, err)
	}
	evs, final := streamResponse(t, c.Responses.NewStreaming(ctx, params))
	if last := evs[len(evs)-1]; last.Type != "response.incomplete" || final.IncompleteDetails.Reason != "max_output_tokens" {
		t.Fatalf("stream ended with %s: %+v", last.Type, final)
	}

	if err := h.Ups["an"].SetFault("c|tokens=4", "stream-error-after=2"); err != nil {
		t.Fatal(err)
	}
	params.MaxOutputTokens = openai.Int(100)
	evs, _ = streamResponse(t, c.Responses.NewStreaming(ctx, params))
	var types []string
	for _, ev := range evs {
		types = append(types, ev.Type)
		if ev.Type == "response.completed" {
			t.Fatalf("an interrupted stream said response.completed: %v", types)
		}
	}
	errEv, failed := evs[len(evs)-2], evs[len(evs)-1]
	if errEv.Type != "error" || errEv.Code != "upstream_stream_interrupted" ||
		failed.Type != "response.failed" || failed.Response.Error.Code != "upstream_stream_interrupted" || failed.Response.Status != "failed" {
		t.Fatalf("the stream ended with %v", types)
	}
}

// TestResponsesPassthroughCut (DESIGN §2, §14): a Responses stream passed
// through from an OpenAI-family channel and cut after commit ends with
// Responses' own error event, numbered after the upstream's last, which
// openai-go types (it ended with the chat-completions error frame, which
// the SDK raised as an untyped stream error), and no completion.
func TestResponsesPassthroughCut(t *testing.T) {
	h := newResponsesGateway(t)
	c := openaiSDK(h)
	evs, _ := streamResponse(t, c.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{Model: "gpt-cut",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}))
	var types []string
	for _, ev := range evs {
		types = append(types, ev.Type)
		if ev.Type == "response.completed" {
			t.Fatalf("a cut stream said response.completed: %v", types)
		}
	}
	if len(evs) < 2 {
		t.Fatalf("events %v", types)
	}
	last, prev := evs[len(evs)-1], evs[len(evs)-2]
	if last.Type != "error" || last.Code != "upstream_stream_interrupted" || !strings.Contains(last.Message, "channel oai") ||
		last.SequenceNumber != prev.SequenceNumber+1 {
		t.Fatalf("the stream ended with %s (previous #%d): %v", last.RawJSON(), prev.SequenceNumber, types)
	}
}

// TestResponsesStatefulFeatures (DESIGN §14): what only the OpenAI family
// serves skips Anthropic-family entries (no breaker effect) and is a 400
// naming the field, before any upstream call, when no entry can serve;
// Responses' default store: true is no such feature.
func TestResponsesStatefulFeatures(t *testing.T) {
	h := newResponsesGateway(t)
	for _, tc := range []struct {
		name, model, extra string
		status             int
		path, param        string
	}{
		// Claude walked first, the OpenAI entry serves: the skip is on the path.
		{"previous_response_id skips claude", "claude-first", `,"previous_response_id":"resp_1"`, 200, "an:unsupported_request -> oai:ok", ""},
		{"hosted tool skips claude", "claude-first", `,"tools":[{"type":"web_search_preview"}]`, 200, "an:unsupported_request -> oai:ok", ""},
		// No entry can serve: 400 naming the field, nothing sent.
		{"previous_response_id on claude only", "claude-only", `,"previous_response_id":"resp_1"`, 400, "", "previous_response_id"},
		{"background on claude only", "claude-only", `,"background":true`, 400, "", "background"},
		{"file_search on claude only", "claude-only", `,"tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]`, 400, "", "tools[0].type"},
		// store defaults to true: served by Claude, not refused.
		{"store default", "claude-first", ``, 200, "an:ok", ""},
		{"store true", "claude-first", `,"store":true`, 200, "an:ok", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(h.Ups["an"].Log())
			r := send(t, h, "/v1/responses", `{"model":"`+tc.model+`","input":"hi"`+tc.extra+`}`, nil)
			if r.Status != tc.status {
				t.Fatalf("status %d: %s", r.Status, r.Body)
			}
			if tc.path != "" && r.Header.Get("X-Hopgate-Path") != tc.path {
				t.Fatalf("path %q, want %q", r.Header.Get("X-Hopgate-Path"), tc.path)
			}
			if tc.status == 400 {
				var e struct {
					Error struct{ Code, Param, Message string }
				}
				if json.Unmarshal([]byte(r.Body), &e) != nil || e.Error.Code != "unsupported_parameter" || e.Error.Param != tc.param ||
					!strings.Contains(e.Error.Message, tc.param) {
					t.Fatalf("error %s", r.Body)
				}
			}
			if sent := len(h.Ups["an"].Log()) - before; (tc.path == "an:ok") != (sent == 1) || sent > 1 {
				t.Fatalf("%d requests reached the Anthropic channel", sent)
			}
		})
	}
	// The skips told the breaker nothing: the channel still serves.
	for i := 0; i < 4; i++ {
		send(t, h, "/v1/responses", `{"model":"claude-first","input":"hi","previous_response_id":"resp_1"}`, nil)
	}
	if r := send(t, h, "/v1/responses", `{"model":"claude-first","input":"hi"}`, nil); r.Header.Get("X-Hopgate-Path") != "an:ok" {
		t.Fatalf("after the skips: %d %q", r.Status, r.Header.Get("X-Hopgate-Path"))
	}
}

// thinkingConfig: a Responses model on two Anthropic channels whose
// fakes sign thinking each with its own key, and one on the second only.
const thinkingConfig = `
region: test-1
auth: {mode: none}
channels:
  - {id: an, provider: anthropic, base_url: "{{base:an}}", api_key_env: CHANNEL_KEY, region: r-1}
  - {id: an2, provider: anthropic, base_url: "{{base:an2}}", api_key_env: CHANNEL_KEY, region: r-2}
models:
  - name: think
    operations: [responses]
    max_tokens_default: 8192
    chain:
      - {channel: an, upstream_model: "c|tokens=4"}
      - {channel: an2, upstream_model: "c|tokens=4"}
  - name: think-2
    operations: [responses]
    max_tokens_default: 8192
    chain: [{channel: an2, upstream_model: "c|tokens=4"}]
`

// asInput is a response's output as the next request's input items, as
// an agent loop sends them back (store: false).
func asInput(t *testing.T, out []responses.ResponseOutputItemUnion) responses.ResponseInputParam {
	t.Helper()
	var in responses.ResponseInputParam
	for _, it := range out {
		switch it.Type {
		case "reasoning":
			p := it.AsReasoning().ToParam()
			in = append(in, responses.ResponseInputItemUnionParam{OfReasoning: &p})
		case "function_call":
			p := it.AsFunctionCall().ToParam()
			in = append(in, responses.ResponseInputItemUnionParam{OfFunctionCall: &p})
		default:
			t.Fatalf("unexpected output item %s", it.Type)
		}
	}
	return in
}

// TestResponsesThinkingToolLoop (DESIGN.md §14): an agent on the Responses
// API with reasoning on a Claude model, in a tool loop. Anthropic refuses
// thinking on a request whose tool-loop assistant turn does not start with
// the signed thinking block the model wrote (the fake refuses it as the
// API does), and every second turn of such a loop was refused so. With
// include: ["reasoning.encrypted_content"] the reasoning item carries the
// block and goes back as it, answer or stream, on the channel that wrote
// it; a reasoning item without it, or from another channel (a failover),
// is dropped and the loop goes on without thinking, not a 400.
func TestResponsesThinkingToolLoop(t *testing.T) {
	h := gwtest.NewWith(t, familiesOptions(upstream.DefaultAWSSecretAccessKey), thinkingConfig, "an", "an2")
	c := openaiSDK(h)
	ctx := t.Context()
	turn := func(t *testing.T, model string, include, stream bool) (*responses.Response, responses.ResponseNewParams) {
		t.Helper()
		for _, ch := range []string{"an", "an2"} {
			if err := h.Ups[ch].SetFault("c|tokens=4", "tool-calls"); err != nil {
				t.Fatal(err)
			}
		}
		params := responses.ResponseNewParams{Model: responses.ResponsesModel(model), Tools: []responses.ToolUnionParam{lookupTool},
			Reasoning: responses.ReasoningParam{Effort: responses.ReasoningEffortMedium},
			Store:     openai.Bool(false),
			Input:     responses.ResponseNewParamsInputUnion{OfString: openai.String("look it up")}}
		if include {
			params.Include = []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent}
		}
		var got *responses.Response
		if stream {
			_, got = streamResponse(t, c.Responses.NewStreaming(ctx, params))
		} else {
			var err error
			if got, err = c.Responses.New(ctx, params); err != nil {
				t.Fatal(err)
			}
		}
		if got == nil || len(got.Output) != 2 || got.Output[0].Type != "reasoning" || got.Output[1].Type != "function_call" {
			t.Fatalf("first turn %+v", got)
		}
		if enc := got.Output[0].EncryptedContent; (enc != "") != include {
			t.Fatalf("include %v, encrypted_content %q", include, enc)
		}
		for _, ch := range []string{"an", "an2"} {
			if err := h.Ups[ch].SetFault("c|tokens=4", ""); err != nil {
				t.Fatal(err)
			}
		}
		call := got.Output[1].AsFunctionCall()
		in := append(responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("look it up", responses.EasyInputMessageRoleUser)},
			asInput(t, got.Output)...)
		out := responses.ResponseInputItemParamOfFunctionCallOutput("found it")
		out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
		in = append(in, out)
		params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: in}
		return got, params
	}
	// sentLast is the Anthropic request the channel got last.
	sentLast := func(t *testing.T, ch string) *upstream.MessagesRequest {
		t.Helper()
		log := h.Ups[ch].Log()
		a := log[len(log)-1].Anthropic
		if a == nil || len(a.Messages) != 3 {
			t.Fatalf("%s got %+v", ch, a)
		}
		return a
	}
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("replayed/stream=%v", stream), func(t *testing.T) {
			_, params := turn(t, "think", true, stream)
			var hr *http.Response
			got, err := c.Responses.New(ctx, params, oaoption.WithResponseInto(&hr))
			if err != nil || got.OutputText() != upstream.Answer(4) {
				t.Fatalf("second turn: %+v, %v", got, err)
			}
			a := sentLast(t, "an")
			if !a.ThinkingEnabled() {
				t.Fatal("thinking was turned off though its block was replayed")
			}
			if b := a.Messages[1].Content; len(b) != 2 || b[0].Type != "thinking" || b[0].Thinking != upstream.ThinkingText ||
				b[0].Signature == "" || b[1].Type != "tool_use" {
				t.Fatalf("the tool turn went as %+v", b)
			}
			if hr.Header.Get("X-Hopgate-Path") != "an:ok" {
				t.Fatalf("path %q", hr.Header.Get("X-Hopgate-Path"))
			}
		})
	}
	for _, tc := range []struct {
		name, second string
		include      bool
		ch           string
	}{
		{"not kept", "think", false, "an"},
		{"another channel", "think-2", true, "an2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, params := turn(t, "think", tc.include, false)
			params.Model = responses.ResponsesModel(tc.second)
			var hr *http.Response
			got, err := c.Responses.New(ctx, params, oaoption.WithResponseInto(&hr))
			if err != nil || got.OutputText() != upstream.Answer(4) {
				t.Fatalf("second turn: %+v, %v", got, err)
			}
			a := sentLast(t, tc.ch)
			if a.ThinkingEnabled() {
				t.Fatal("thinking stayed on with no block to replay: Anthropic refuses that")
			}
			if b := a.Messages[1].Content; len(b) != 1 || b[0].Type != "tool_use" {
				t.Fatalf("the tool turn went as %+v", b)
			}
			if d := droppedOn(t, h, hr.Header.Get("X-Request-Id"), tc.ch); !strings.Contains(d, "input[].reasoning") || !strings.Contains(d, "reasoning") {
				t.Fatalf("dropped on the hop span: %q", d)
			}
		})
	}
}
