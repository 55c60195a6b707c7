package gate

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/internal/sse"
)

func data(s string) sse.Frame {
	return sse.Frame{Raw: []byte("data: " + s + "\n\n"), Data: []byte(s), HasData: true}
}

func event(name, s string) sse.Frame {
	f := data(s)
	f.Event = name
	return f
}

const chunkHead = `{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_fc9f1d7035","choices":`

var chatCases = []struct {
	name  string
	frame sse.Frame
	want  Info
}{
	// OpenAI's first chunk carries only the role: not decisive (DESIGN §2 L3).
	{"role only", data(chunkHead + `[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}`),
		Info{Kind: Hold, Model: "gpt-4o-2024-08-06"}},
	// Plain content commits; Text is what resume needs.
	{"content", data(chunkHead + `[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}]}`),
		Info{Kind: Content, Text: []byte("Hello"), Model: "gpt-4o-2024-08-06"}},
	// Escaped content is decoded for resume.
	{"escaped content", data(chunkHead + `[{"index":0,"delta":{"content":"a\n\"b\" \u00e9\ud83d\ude00"},"finish_reason":null}]}`),
		Info{Kind: Content, Text: []byte("a\n\"b\" é😀"), Model: "gpt-4o-2024-08-06"}},
	// An empty delta is not decisive.
	{"empty delta", data(chunkHead + `[{"index":0,"delta":{},"finish_reason":null}]}`),
		Info{Kind: Hold, Model: "gpt-4o-2024-08-06"}},
	// Tool calls commit and forbid resume.
	{"tool calls", data(chunkHead + `[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_DdmO9pD3xa9XTPNJ32zg2hcA","type":"function","function":{"name":"get_weather","arguments":""}}],"refusal":null},"logprobs":null,"finish_reason":null}]}`),
		Info{Kind: Content, ToolCalls: true, Model: "gpt-4o-2024-08-06"}},
	// tool_calls: [] is nothing.
	{"empty tool calls", data(chunkHead + `[{"index":0,"delta":{"tool_calls":[ ]},"finish_reason":null}]}`),
		Info{Kind: Hold, Model: "gpt-4o-2024-08-06"}},
	// A refusal is an answer.
	{"refusal", data(chunkHead + `[{"index":0,"delta":{"refusal":"I can't help with that."},"finish_reason":null}]}`),
		Info{Kind: Content, Model: "gpt-4o-2024-08-06"}},
	// DeepSeek-style reasoning_content is output too.
	{"reasoning_content", data(`{"id":"x","model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"Let me think"},"finish_reason":null}]}`),
		Info{Kind: Content, Model: "deepseek-reasoner"}},
	// OpenRouter-style reasoning.
	{"reasoning", data(`{"choices":[{"index":0,"delta":{"content":"","reasoning":"Hmm"}}]}`),
		Info{Kind: Content}},
	// A finish chunk without content is decisive.
	{"finish", data(chunkHead + `[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`),
		Info{Kind: Finish, FinishReason: true, Model: "gpt-4o-2024-08-06"}},
	// Some providers put the last text and the finish in one chunk.
	{"content and finish", data(`{"choices":[{"index":0,"delta":{"content":"."},"finish_reason":"length"}]}`),
		Info{Kind: Content, FinishReason: true, Text: []byte(".")}},
	// The include_usage chunk: choices [] and usage.
	{"usage chunk", data(chunkHead + `[],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`),
		Info{Kind: Hold, UsageOnly: true, Usage: Usage{19, 10, true}, Model: "gpt-4o-2024-08-06"}},
	// usage: null on ordinary chunks is not a usage chunk.
	{"usage null", data(`{"choices":[{"index":0,"delta":{"content":"x"}}],"usage":null}`),
		Info{Kind: Content, Text: []byte("x")}},
	// Azure's prompt-filter first chunk: choices [] and NO usage — hold, not usage-only.
	{"azure prompt filter", data(`{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}]}`),
		Info{Kind: Hold}},
	// An error object inside a 200 stream: the reason the gate exists.
	{"error data", data(`{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`),
		Info{Kind: Error, ErrorMessage: "The server had an error while processing your request. Sorry about that!"}},
	// A string error.
	{"error string", data(`{"error":"overloaded"}`), Info{Kind: Error, ErrorMessage: "overloaded"}},
	// "error": null next to normal content is not an error.
	{"error null", data(`{"error":null,"choices":[{"index":0,"delta":{"content":"ok"}}]}`),
		Info{Kind: Content, Text: []byte("ok")}},
	// event: error style (vLLM, Anthropic-compatible proxies).
	{"event error", event("error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`),
		Info{Kind: Error, ErrorMessage: "Overloaded"}},
	// event: error with garbage data is still an error.
	{"event error garbage", event("error", `oops`), Info{Kind: Error}},
	// Keep-alive comments hold.
	{"keep-alive", sse.Frame{Raw: []byte(": keep-alive\n\n")}, Info{Kind: Hold}},
	{"done", data(`[DONE]`), Info{Kind: Done}},
	// Malformed frames: truncated JSON, trailing garbage, non-object.
	{"malformed", data(`{"choices":[{"delta":{"content":"Hel`), Info{Kind: Malformed}},
	{"trailing garbage", data(`{"choices":[]} x`), Info{Kind: Malformed}},
	{"not object", data(`"hello"`), Info{Kind: Malformed}},
	// /v1/completions text chunks.
	{"completions text", data(`{"id":"cmpl-1","object":"text_completion","choices":[{"text":" world","index":0,"logprobs":null,"finish_reason":null}],"model":"gpt-3.5-turbo-instruct"}`),
		Info{Kind: Content, Text: []byte(" world"), Model: "gpt-3.5-turbo-instruct"}},
	// n>1: Text is choice 0's even when choice 1 comes first.
	{"choice order", data(`{"choices":[{"index":1,"delta":{"content":"B"}},{"delta":{"content":"A"},"index":0}]}`),
		Info{Kind: Content, Text: []byte("A")}},
}

func TestInspectChat(t *testing.T) {
	for _, tc := range chatCases {
		t.Run(tc.name, func(t *testing.T) {
			got := InspectChat(tc.frame)
			if !equal(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func equal(a, b Info) bool {
	return a.Kind == b.Kind && a.FinishReason == b.FinishReason && a.ToolCalls == b.ToolCalls &&
		string(a.Text) == string(b.Text) && (a.Text == nil) == (b.Text == nil) &&
		a.UsageOnly == b.UsageOnly && a.Usage == b.Usage && a.Model == b.Model && a.ErrorMessage == b.ErrorMessage
}

// A huge error message is truncated for logs without splitting a rune.
func TestErrorMessageTruncated(t *testing.T) {
	msg := strings.Repeat("é", 200)
	got := InspectChat(data(`{"error":{"message":"` + msg + `"}}`))
	if len(got.ErrorMessage) > maxErrorMessage || !strings.HasPrefix(msg, got.ErrorMessage) || len(got.ErrorMessage) < 250 {
		t.Fatalf("len %d", len(got.ErrorMessage))
	}
}

var responsesCases = []struct {
	name  string
	frame sse.Frame
	want  Info
}{
	// Lifecycle events hold.
	{"created", event("response.created", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","model":"gpt-4.1-2025-04-14","error":null,"usage":null}}`),
		Info{Kind: Hold, Model: "gpt-4.1-2025-04-14"}},
	{"output item added", event("response.output_item.added", `{"type":"response.output_item.added","output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}}`),
		Info{Kind: Hold}},
	// Text deltas commit.
	{"text delta", event("response.output_text.delta", `{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi\n","sequence_number":4}`),
		Info{Kind: Content, Text: []byte("Hi\n")}},
	// An empty delta does not.
	{"empty text delta", event("response.output_text.delta", `{"type":"response.output_text.delta","delta":""}`), Info{Kind: Hold}},
	{"refusal delta", event("response.refusal.delta", `{"type":"response.refusal.delta","delta":"No"}`), Info{Kind: Content}},
	{"function args delta", event("response.function_call_arguments.delta", `{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":0,"delta":"{\""}`),
		Info{Kind: Content, ToolCalls: true}},
	{"reasoning delta", event("response.reasoning_text.delta", `{"type":"response.reasoning_text.delta","delta":"step"}`), Info{Kind: Content}},
	// Without event lines the payload type is used.
	{"type only", data(`{"type":"response.output_text.delta","delta":"x"}`), Info{Kind: Content, Text: []byte("x")}},
	// completed carries usage in the Responses naming.
	{"completed", event("response.completed", `{"type":"response.completed","response":{"id":"resp_1","status":"completed","model":"gpt-4.1","error":null,"usage":{"input_tokens":37,"output_tokens":11,"total_tokens":48}}}`),
		Info{Kind: Finish, FinishReason: true, Model: "gpt-4.1", Usage: Usage{37, 11, true}}},
	{"incomplete", event("response.incomplete", `{"type":"response.incomplete","response":{"status":"incomplete"}}`), Info{Kind: Finish, FinishReason: true}},
	{"failed", event("response.failed", `{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"boom"}}}`),
		Info{Kind: Error, ErrorMessage: "boom"}},
	{"error event", event("error", `{"type":"error","code":"ERR_SOMETHING","message":"Something went wrong","param":null,"sequence_number":1}`),
		Info{Kind: Error, ErrorMessage: "Something went wrong"}},
	{"error event no data", sse.Frame{Raw: []byte("event: error\n\n"), Event: "error"}, Info{Kind: Error}},
	{"proxy error object", data(`{"error":{"message":"upstream down"}}`), Info{Kind: Error, ErrorMessage: "upstream down"}},
	{"malformed", event("response.output_text.delta", `{"delta":`), Info{Kind: Malformed}},
	{"keep-alive", sse.Frame{Raw: []byte(":\n\n")}, Info{Kind: Hold}},
}

func TestInspectResponses(t *testing.T) {
	for _, tc := range responsesCases {
		t.Run(tc.name, func(t *testing.T) {
			got := InspectResponses(tc.frame)
			if !equal(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestInspectBody(t *testing.T) {
	cases := []struct {
		name string
		body string
		want Info
	}{
		// A normal chat completion with usage.
		{"chat", `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`,
			Info{Kind: Content, Model: "gpt-4o-mini", Usage: Usage{9, 2, true}}},
		// A Responses body uses input/output_tokens.
		{"responses", `{"id":"resp_1","object":"response","model":"gpt-4.1","usage":{"input_tokens":5,"output_tokens":7}}`,
			Info{Kind: Content, Model: "gpt-4.1", Usage: Usage{5, 7, true}}},
		// 200 with an error object is a failed hop (DESIGN §2 L3 non-streaming).
		{"error", `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`,
			Info{Kind: Error, ErrorMessage: "Rate limit reached"}},
		{"error null", `{"error":null,"model":"m"}`, Info{Kind: Content, Model: "m"}},
		// Truncated body (shorter than Content-Length) is malformed.
		{"truncated", `{"id":"chatcmpl-1","choices":[{"message":{"content":"Hi`, Info{Kind: Malformed}},
		{"array", `[1]`, Info{Kind: Malformed}},
		{"empty", ``, Info{Kind: Malformed}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := InspectBody([]byte(tc.body)); !equal(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestErrorCode(t *testing.T) {
	cases := []struct{ name, body, want string }{
		// The final-vs-context_fallback decision depends on this code (DESIGN §3).
		{"context length", `{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, "context_length_exceeded"},
		{"content filter", `{"error":{"message":"The response was filtered","type":null,"param":"prompt","code":"content_filter","status":400}}`, "content_filter"},
		// Falls back to type when code is null.
		{"type fallback", `{"error":{"message":"x","type":"invalid_request_error","code":null}}`, "invalid_request_error"},
		{"numeric code", `{"error":{"code":429,"message":"x"}}`, "429"},
		{"no error", `{"message":"x"}`, ""},
		{"string error", `{"error":"x"}`, ""},
		{"garbage", `<html>502</html>`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ErrorCode([]byte(tc.body)); got != tc.want {
				t.Fatalf("got %q want %q", got, tc.want)
			}
		})
	}
}

// FuzzInspect checks the classification against encoding/json as the oracle:
// Malformed exactly when the data is not a JSON object, and Text equal to the
// decoded choices[0].delta.content.
func FuzzInspect(f *testing.F) {
	for _, tc := range chatCases {
		f.Add(string(tc.frame.Data), tc.frame.Event)
	}
	for _, tc := range responsesCases {
		f.Add(string(tc.frame.Data), tc.frame.Event)
	}
	f.Fuzz(func(t *testing.T, d, ev string) {
		fr := sse.Frame{Data: []byte(d), HasData: true, Event: ev}
		got := InspectChat(fr)
		_ = InspectResponses(fr)
		_ = InspectBody([]byte(d))
		_ = ErrorCode([]byte(d))
		if ev == "error" || strings.TrimSpace(d) == "[DONE]" {
			return
		}
		var m map[string]json.RawMessage
		isObj := json.Unmarshal([]byte(d), &m) == nil && m != nil
		if (got.Kind == Malformed) == isObj {
			t.Fatalf("kind %v for %q, object=%v", got.Kind, d, isObj)
		}
		if got.Kind != Content || got.Text == nil {
			return
		}
		var chunk struct {
			Choices []struct {
				Index *int `json:"index"`
				Delta struct {
					Content *string `json:"content"`
				} `json:"delta"`
				Text *string `json:"text"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(d), &chunk) != nil {
			return // shapes encoding/json rejects (e.g. duplicate keys of other types)
		}
		if caseFoldedKeys(d) {
			// encoding/json matches keys case-insensitively ("deltA" fills
			// Delta); the gate matches JSON keys exactly, as JSON defines
			// them. The reference cannot judge such inputs.
			return
		}
		for _, c := range chunk.Choices {
			if c.Index != nil && *c.Index == 0 && c.Delta.Content != nil && c.Text == nil {
				if *c.Delta.Content != string(got.Text) {
					t.Fatalf("Text %q, encoding/json says %q", got.Text, *c.Delta.Content)
				}
			}
		}
	})
}

func BenchmarkInspectChat(b *testing.B) {
	fr := data(chunkHead + `[{"index":0,"delta":{"content":" world"},"logprobs":null,"finish_reason":null}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if InspectChat(fr).Kind != Content {
			b.Fatal("kind")
		}
	}
}

func BenchmarkInspectChatEscaped(b *testing.B) {
	fr := data(chunkHead + `[{"index":0,"delta":{"content":"line\nnext \"quoted\""},"logprobs":null,"finish_reason":null}]}`)
	b.ReportAllocs()
	for b.Loop() {
		InspectChat(fr)
	}
}

func BenchmarkInspectResponses(b *testing.B) {
	fr := event("response.output_text.delta", `{"type":"response.output_text.delta","item_id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","output_index":0,"content_index":0,"delta":" world","sequence_number":12}`)
	b.ReportAllocs()
	for b.Loop() {
		InspectResponses(fr)
	}
}

// caseFoldedKeys reports whether d spells a key the reference decodes in a
// case other than its canonical lower case.
func caseFoldedKeys(d string) bool {
	lower := strings.ToLower(d)
	for _, k := range []string{`"choices"`, `"index"`, `"delta"`, `"content"`, `"text"`} {
		if strings.Count(lower, k) != strings.Count(d, k) {
			return true
		}
	}
	return false
}

// chunk is an OpenAI-style chunk whose members before "choices" repeat.
func chunk(head, choices string) string { return head + choices + `}` }

var inspectorSeqs = [][]string{
	{
		chunk(chunkHead, `[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`),
		chunk(chunkHead, `[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]`),
		chunk(chunkHead, `[{"index":0,"delta":{"content":"lo \"x\""},"finish_reason":null}]`),
		chunk(chunkHead, `[{"index":0,"delta":{},"finish_reason":"stop"}]`),
		chunk(chunkHead, `[],"usage":{"prompt_tokens":3,"completion_tokens":2}`),
	},
	{ // usage and an error member before "choices" are in the remembered head
		`{"id":"x","model":"m","usage":{"prompt_tokens":3,"completion_tokens":2},"choices":[{"index":0,"delta":{"content":"a"}}]}`,
		`{"id":"x","model":"m","usage":{"prompt_tokens":3,"completion_tokens":2},"choices":[{"index":0,"delta":{"content":"b"}}]}`,
		`{"id":"x","model":"m","usage":{"prompt_tokens":3,"completion_tokens":2},"choices":[{"index":0,"delta":{"content":"cd"}}]}`,
		`{"id":"x","model":"m","error":{"message":"boom"},"choices":[{"index":0,"delta":{"content":"a"}}]}`,
		`{"id":"x","model":"m","error":{"message":"boom"},"choices":[{"index":0,"delta":{"content":"b"}}]}`,
	},
	{ // the number before the ',' grows: the prefix must not match
		`{"id":"chatcmpl-0123456789abcdef","created":1,"choices":[{"index":0,"delta":{"content":"a"}}]}`,
		`{"id":"chatcmpl-0123456789abcdef","created":12,"choices":[{"index":0,"delta":{"content":"b"}}]}`,
		`{"id":"chatcmpl-0123456789abcdef","created":1,"choices":[{"index":0,"delta":{"content":"c"}}]}`,
	},
	{ // error and model before choices come from the prefix
		`{"model":"m-1","error":{"message":"boom"},"id":"same-prefix-long-enough","choices":[]}`,
		`{"model":"m-1","error":{"message":"boom"},"id":"same-prefix-long-enough","choices":[{"index":0,"delta":{"content":"x"}}]}`,
		`{"model":"m-1","error":{"message":"boom"},"id":"same-prefix-long-enough","choices":[],"model":"m-2","error":null}`,
	},
	{ // same shape, another text: the remembered chunk answers, unless
		// the text is empty, not one literal, or not a valid literal
		chunk(chunkHead, `[{"index":0,"delta":{"content":"Hel"},"logprobs":null,"finish_reason":null}]`),
		chunk(chunkHead, `[{"index":0,"delta":{"content":"lo \"x\" \u00e9"},"logprobs":null,"finish_reason":null}]`),
		chunk(chunkHead, `[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":null}]`),
		chunk(chunkHead, `[{"index":0,"delta":{"content":"a","content":"b"},"logprobs":null,"finish_reason":null}]`),
		chunk(chunkHead, `[{"index":0,"delta":{"content":"a"b"},"logprobs":null,"finish_reason":null}]`),
		chunk(chunkHead, "[{\"index\":0,\"delta\":{\"content\":\"ctl\x01\"},\"logprobs\":null,\"finish_reason\":null}]"),
		chunk(chunkHead, `[{"index":0,"delta":{"content":"\\"},"logprobs":null,"finish_reason":null}]`),
		chunk(chunkHead, `[{"index":0,"delta":{"content":"x"},"logprobs":null,"finish_reason":"stop"}]`),
	},
	{ // then broken after the same prefix
		chunk(chunkHead, `[{"index":0,"delta":{"content":"a"}}]`),
		chunk(chunkHead, `[{"index":0,"delta":{"content":"a"}}`),
		chunk(chunkHead, `[{"index":0,"delta":{"content":"a"}}],,`),
		chunk(chunkHead, `[{"index":0,"delta":{"content":"b"}}]`),
	},
}

// A ChatInspector gives InspectChat's answer for every frame of a stream.
func checkInspector(t testing.TB, frames []string) {
	fs := make([]sse.Frame, len(frames))
	for i, d := range frames {
		fs[i] = sse.Frame{Data: []byte(d), HasData: true}
	}
	checkInspectorFrames(t, fs)
}

func checkInspectorFrames(t testing.TB, frames []sse.Frame) {
	var ci ChatInspector
	for i, fr := range frames {
		d := fr.Data
		want := InspectChat(fr)
		got := ci.Inspect(fr)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("frame %d %q (event %q, data %v):\nChatInspector %+v\nInspectChat   %+v", i, d, fr.Event, fr.HasData, got, want)
		}
	}
}

func TestChatInspector(t *testing.T) {
	for _, seq := range inspectorSeqs {
		checkInspector(t, seq)
	}
	// The memo is used: the second frame of a stream starts past the prefix.
	var ci ChatInspector
	ci.Inspect(sse.Frame{Data: []byte(inspectorSeqs[0][0]), HasData: true})
	if want := len(chunkHead) - len(`"choices":`); len(ci.prefix) != want {
		t.Fatalf("remembered prefix of %d bytes, want %d", len(ci.prefix), want)
	}
	// A content chunk is remembered around its text, and the next one of the
	// same shape is answered from it.
	ci.Inspect(sse.Frame{Data: []byte(inspectorSeqs[0][1]), HasData: true})
	if !bytes.HasSuffix(ci.head, []byte(`"content":`)) || !bytes.HasPrefix(ci.tail, []byte(`},"finish_reason":null}]}`)) {
		t.Fatalf("remembered chunk head %q, tail %q", ci.head, ci.tail)
	}
	next := sse.Frame{Data: []byte(chunk(chunkHead, `[{"index":0,"delta":{"content":"p"},"finish_reason":null}]`)), HasData: true}
	if info, ok := ci.sameShape(next); !ok || string(info.Text) != "p" || info.Kind != Content {
		t.Fatalf("same-shape chunk not answered from the remembered one: %+v %v", info, ok)
	}
}

func FuzzChatInspector(f *testing.F) {
	for _, seq := range inspectorSeqs {
		for i := 1; i < len(seq); i++ {
			f.Add(seq[i-1], seq[i], "", false)
		}
	}
	// Heads just over the memo's bound, where the inspector stops
	// remembering and parses in full.
	long := `{"id":"` + strings.Repeat("x", maxMemo) + `","model":"m","choices":`
	f.Add(chunk(long, `[{"index":0,"delta":{"content":"ab"}}]`), chunk(long, `[{"index":0,"delta":{"content":"cd"}}]`), "", false)
	// The second frame also varies in its event name and in having data.
	f.Fuzz(func(t *testing.T, a, b, event string, noData bool) {
		fa := sse.Frame{Data: []byte(a), HasData: true}
		fb := sse.Frame{Data: []byte(b), HasData: !noData, Event: event}
		checkInspectorFrames(t, []sse.Frame{fa, fb, fa, fb})
	})
}

// BenchmarkChatInspector: a stream's content chunks, each with its own text.
func BenchmarkChatInspector(b *testing.B) {
	var frames []sse.Frame
	for _, w := range []string{" world", " and", " every", " token", `\n`, ` \"quoted\"`, " here", "."} {
		frames = append(frames, data(chunkHead+`[{"index":0,"delta":{"content":"`+w+`"},"logprobs":null,"finish_reason":null}]}`))
	}
	var ci ChatInspector
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if ci.Inspect(frames[i%len(frames)]).Kind != Content {
			b.Fatal("kind")
		}
		i++
	}
}

// An inspector copies at most maxMemo bytes of a frame: chunks with a huge
// head (an "id" of 64 KiB) are classified as InspectChat does, and the
// stream holds no copy of them.
func TestChatInspectorMemoBounded(t *testing.T) {
	head := `{"id":"` + strings.Repeat("x", 64<<10) + `","model":"m","choices":`
	seq := []string{
		chunk(head, `[{"index":0,"delta":{"content":"ab"}}]`),
		chunk(head, `[{"index":0,"delta":{"content":"cd"}}]`),
	}
	checkInspector(t, seq)
	var ci ChatInspector
	for _, d := range seq {
		ci.Inspect(sse.Frame{Data: []byte(d), HasData: true})
	}
	if n := cap(ci.prefix) + cap(ci.head) + cap(ci.tail); n > 2*maxMemo {
		t.Fatalf("inspector holds %d bytes after 64 KiB frames, want at most %d", n, 2*maxMemo)
	}
}
