package upstream

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"
)

// anthropicSDK is the official client pointed at the fake, as a gateway's
// Anthropic channel would be: no retries, so every fault is seen once.
func (fx *fixture) anthropicSDK(opts ...option.RequestOption) *anthropic.Client {
	c := anthropic.NewClient(append([]option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(fx.ts.URL),
		option.WithAPIKey(DefaultAnthropicAPIKey),
		option.WithHTTPClient(fx.client),
		option.WithMaxRetries(0),
	}, opts...)...)
	return &c
}

func userText(model, text string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     anthropic.Model(model),
		MaxTokens: 1024,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))},
	}
}

var lookupTool = anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
	Name:        "lookup",
	Description: anthropic.String("Looks a word up."),
	InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"q": map[string]any{"type": "string"}}},
}}

// accumulate reads a stream to its end through the SDK, returning the
// message it accumulated, the event types in order and the stream error.
func accumulate(s *ssestream.Stream[anthropic.MessageStreamEventUnion]) (anthropic.Message, []string, error) {
	defer s.Close()
	var msg anthropic.Message
	var types []string
	for s.Next() {
		ev := s.Current()
		types = append(types, ev.Type)
		if err := msg.Accumulate(ev); err != nil {
			return msg, types, err
		}
	}
	return msg, types, s.Err()
}

// The non-streaming answer decodes in the SDK with text, stop reason and
// usage, and carries Anthropic's request-id header.
func TestAnthropicMessage(t *testing.T) {
	fx := newFixture(t, Options{Name: "a"})
	var resp *http.Response
	msg, err := fx.anthropicSDK().Messages.New(t.Context(), userText("claude|tokens=3", "say something"), option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text != Answer(3) || msg.StopReason != anthropic.StopReasonEndTurn ||
		msg.Model != "claude|tokens=3" || msg.Usage.InputTokens != 2 || msg.Usage.OutputTokens != 3 || msg.ID != "msg_a_1" {
		t.Fatalf("message %+v", msg)
	}
	if resp.Header.Get("Request-Id") != "req_a_1" {
		t.Fatalf("request-id %q", resp.Header.Get("Request-Id"))
	}
	if r := fx.fake.Log()[0]; r.Dialect != DialectAnthropic || r.Model != "claude|tokens=3" || r.Anthropic == nil || r.Anthropic.MaxTokens != 1024 {
		t.Fatalf("log %+v", r)
	}
}

// The stream is the API's exact event sequence; the SDK accumulates it to
// the same message as the non-streaming answer.
func TestAnthropicStream(t *testing.T) {
	fx := newFixture(t, Options{})
	msg, types, err := accumulate(fx.anthropicSDK().Messages.NewStreaming(t.Context(), userText("claude|tokens=3", "say something")))
	if err != nil {
		t.Fatal(err)
	}
	want := "message_start content_block_start content_block_delta content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if strings.Join(types, " ") != want { // ping is swallowed by the SDK
		t.Fatalf("events %v", types)
	}
	if msg.Content[0].Text != Answer(3) || msg.StopReason != "end_turn" || msg.Usage.OutputTokens != 3 || msg.Usage.InputTokens != 2 {
		t.Fatalf("accumulated %+v", msg)
	}
}

// The raw wire: event names, ping after the first block start, usage in
// message_start (a gateway must find it there), cache counts in
// message_delta.
func TestAnthropicStreamWire(t *testing.T) {
	fx := newFixture(t, Options{Name: "a"})
	resp := fx.messages(t, map[string]any{"model": "claude|tokens=2", "max_tokens": 10, "stream": true,
		"messages": []any{map[string]any{"role": "user", "content": "hi there"}}})
	got, err := frames(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`event: message_start` + "\n" + `data: {"message":{"id":"msg_a_1","type":"message","role":"assistant","model":"claude|tokens=2","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":2,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1,"service_tier":"standard"}},"type":"message_start"}`,
		`event: content_block_start` + "\n" + `data: {"content_block":{"type":"text","text":""},"index":0,"type":"content_block_start"}`,
		`event: ping` + "\n" + `data: {"type":"ping"}`,
		`event: content_block_delta` + "\n" + `data: {"delta":{"text":"tok1 ","type":"text_delta"},"index":0,"type":"content_block_delta"}`,
		`event: content_block_delta` + "\n" + `data: {"delta":{"text":"tok2 ","type":"text_delta"},"index":0,"type":"content_block_delta"}`,
		`event: content_block_stop` + "\n" + `data: {"index":0,"type":"content_block_stop"}`,
		`event: message_delta` + "\n" + `data: {"delta":{"stop_reason":"end_turn","stop_sequence":null},"type":"message_delta","usage":{"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"input_tokens":2,"output_tokens":2}}`,
		`event: message_stop` + "\n" + `data: {"type":"message_stop"}`,
	}
	if strings.Join(got, "\n\n") != strings.Join(want, "\n\n") {
		t.Fatalf("stream\n got %q\nwant %q", got, want)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
}

// messages posts a raw Messages request with the right headers.
func (fx *fixture) messages(t *testing.T, body map[string]any) *http.Response {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, fx.ts.URL+"/v1/messages", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", DefaultAnthropicAPIKey)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := fx.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// A tool-calls answer is a tool_use block whose input arrives in several
// input_json_delta pieces; the SDK reassembles valid JSON input.
func TestAnthropicToolUse(t *testing.T) {
	fx := newFixture(t, Options{})
	params := userText("claude|tokens=3|tool-calls", "look it up")
	params.Tools = []anthropic.ToolUnionParam{lookupTool}
	msg, types, err := accumulate(fx.anthropicSDK().Messages.NewStreaming(t.Context(), params))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(strings.Join(types, " "), "content_block_delta"); n != 3 {
		t.Fatalf("%d input_json_delta pieces, want 3: %v", n, types)
	}
	tu := msg.Content[0].AsToolUse()
	if msg.StopReason != "tool_use" || tu.Name != "lookup" || string(tu.Input) != `{"q":"tok1 tok2 tok3 "}` || !strings.HasPrefix(tu.ID, "toolu_") {
		t.Fatalf("tool use %+v, stop %q", tu, msg.StopReason)
	}
	// Non-streaming: the same block, input as JSON.
	got, err := fx.anthropicSDK().Messages.New(t.Context(), params)
	if err != nil || got.Content[0].Type != "tool_use" || string(got.Content[0].Input) != `{"q":"tok1 tok2 tok3 "}` {
		t.Fatalf("non-stream %+v, %v", got, err)
	}
	// Without tools in the request a real model cannot call one.
	_, err = fx.anthropicSDK().Messages.New(t.Context(), userText("claude|tool-calls", "x"))
	if apiErr := asAnthropic(t, err); apiErr.StatusCode != 400 {
		t.Fatalf("tool-calls without tools: %v", err)
	}
}

func asAnthropic(t *testing.T, err error) *anthropic.Error {
	t.Helper()
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("error %v (%T), want *anthropic.Error", err, err)
	}
	return apiErr
}

// Each fault surfaces through the SDK as the error a gateway classifies:
// status, error type, message, headers.
func TestAnthropicStatusFaults(t *testing.T) {
	fx := newFixture(t, Options{})
	tests := []struct {
		model  string
		status int
		typ    string
		msg    string
		header [2]string
	}{
		{"claude|529", 529, "overloaded_error", "Overloaded", [2]string{"X-Should-Retry", "true"}},
		{"claude|429:ra=7", 429, "rate_limit_error", "", [2]string{"Retry-After", "7"}},
		{"claude|context-length", 400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum", [2]string{}},
		{"claude|500", 500, "api_error", "Internal server error", [2]string{}},
		{"claude|401", 401, "authentication_error", "", [2]string{}},
		{"claude|reject-prefill", 0, "", "", [2]string{}}, // no prefill: healthy
		{"claude|content-filter", 400, "invalid_request_error", "fakeupstream: content-filter is an OpenAI/Azure fault; Claude refuses with stop=refusal", [2]string{}},
		{"claude|stop=length", 400, "invalid_request_error", "", [2]string{}}, // an OpenAI finish_reason
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			for _, stream := range []bool{false, true} {
				var err error
				var resp *http.Response
				if stream {
					_, _, err = accumulate(fx.anthropicSDK().Messages.NewStreaming(t.Context(), userText(tt.model, "x"), option.WithResponseInto(&resp)))
				} else {
					_, err = fx.anthropicSDK().Messages.New(t.Context(), userText(tt.model, "x"), option.WithResponseInto(&resp))
				}
				if tt.status == 0 {
					if err != nil {
						t.Fatal(err)
					}
					continue
				}
				e := asAnthropic(t, err)
				if e.StatusCode != tt.status || string(e.Type()) != tt.typ || tt.msg != "" && e.Message != tt.msg || !strings.HasPrefix(e.RequestID, "req_") {
					t.Fatalf("stream=%v: %d %q %q (request id %q)", stream, e.StatusCode, e.Type(), e.Message, e.RequestID)
				}
				if tt.header[0] != "" && e.Response.Header.Get(tt.header[0]) != tt.header[1] {
					t.Fatalf("%s: %q", tt.header[0], e.Response.Header.Get(tt.header[0]))
				}
			}
		})
	}
}

// After a 200, errors arrive as the API sends them: an "event: error"
// after message_start and before content, or mid-answer; cuts leave the
// SDK with a read error and no message_stop.
func TestAnthropicStreamFaults(t *testing.T) {
	fx := newFixture(t, Options{})
	params := func(model string) anthropic.MessageNewParams {
		p := userText(model, "x")
		p.Tools = []anthropic.ToolUnionParam{lookupTool}
		return p
	}
	// event: error before any content: the SDK reports the API error.
	msg, types, err := accumulate(fx.anthropicSDK().Messages.NewStreaming(t.Context(), params("claude|stream-error-event")))
	if e := asAnthropic(t, err); e.Type() != "overloaded_error" || e.Message != "Overloaded" || len(types) != 2 || types[0] != "message_start" || len(msg.Content) != 1 || msg.Content[0].Text != "" {
		t.Fatalf("error event: %v, %v, %+v", err, types, msg)
	}
	// error=api_error after two deltas.
	msg, _, err = accumulate(fx.anthropicSDK().Messages.NewStreaming(t.Context(), params("claude|stream-error-after=2|error=api_error")))
	if e := asAnthropic(t, err); e.Type() != "api_error" || msg.Content[0].Text != Answer(2) {
		t.Fatalf("error after content: %v, %q", err, msg.Content[0].Text)
	}
	// A cut right after the tool_use block: input complete, no message_delta.
	msg, types, err = accumulate(fx.anthropicSDK().Messages.NewStreaming(t.Context(), params("claude|tool-calls|cut-before-finish")))
	if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "EOF") || types[len(types)-1] != "content_block_stop" || msg.StopReason != "" {
		t.Fatalf("cut after tool: %v, %v, %+v", err, types, msg)
	}
	if in := string(msg.Content[0].AsToolUse().Input); in != `{"q":"tok1 tok2 tok3 tok4 tok5 tok6 tok7 tok8 "}` {
		t.Fatalf("tool input before the cut: %q", in)
	}
	// cut=2 inside a tool_use block: unfinished partial JSON.
	_, types, err = accumulate(fx.anthropicSDK().Messages.NewStreaming(t.Context(), params("claude|tool-calls|cut=2")))
	if err == nil || types[len(types)-1] != "content_block_delta" {
		t.Fatalf("cut in tool: %v, %v", err, types)
	}
	// no-done: the message_delta arrives, message_stop does not.
	_, types, err = accumulate(fx.anthropicSDK().Messages.NewStreaming(t.Context(), params("claude|no-done")))
	if err != nil || types[len(types)-1] != "message_delta" {
		t.Fatalf("no-done: %v, %v", err, types)
	}
	// malformed: a frame that is not JSON stops the SDK's decoder.
	_, _, err = accumulate(fx.anthropicSDK().Messages.NewStreaming(t.Context(), params("claude|malformed")))
	var syntax *json.SyntaxError
	if !errors.As(err, &syntax) {
		t.Fatalf("malformed: %v (%T)", err, err)
	}
}

// Every stop_reason is selectable, and the natural ones happen naturally:
// max_tokens truncates, a stop sequence in the text ends it.
func TestAnthropicStopReasons(t *testing.T) {
	fx := newFixture(t, Options{})
	for _, r := range anthropicStops {
		p := userText("claude|stop="+r, "x")
		p.StopSequences = []string{"never"}
		msg, err := fx.anthropicSDK().Messages.New(t.Context(), p)
		if err != nil || string(msg.StopReason) != r {
			t.Fatalf("stop=%s: %q, %v", r, msg.StopReason, err)
		}
		if r == "stop_sequence" && msg.StopSequence != "never" {
			t.Fatalf("stop_sequence %q", msg.StopSequence)
		}
	}
	p := userText("claude|tokens=10", "x")
	p.MaxTokens = 3
	msg, err := fx.anthropicSDK().Messages.New(t.Context(), p)
	if err != nil || msg.StopReason != "max_tokens" || msg.Content[0].Text != Answer(3) || msg.Usage.OutputTokens != 3 {
		t.Fatalf("max_tokens: %+v, %v", msg, err)
	}
	p = userText("claude", "x")
	p.StopSequences = []string{"zzz", "k3"}
	streamed, _, err := accumulate(fx.anthropicSDK().Messages.NewStreaming(t.Context(), p))
	if err != nil || streamed.StopReason != "stop_sequence" || streamed.StopSequence != "k3" || streamed.Content[0].Text != "tok1 tok2 to" {
		t.Fatalf("stop sequence: %+v, %v", streamed, err)
	}
}

// Extended thinking: a thinking block with its signature before the text,
// when (and only when) the request enables it.
func TestAnthropicThinking(t *testing.T) {
	fx := newFixture(t, Options{})
	p := userText("claude|tokens=2", "think")
	p.MaxTokens = 2048
	p.Thinking = anthropic.ThinkingConfigParamOfEnabled(1024)
	msg, types, err := accumulate(fx.anthropicSDK().Messages.NewStreaming(t.Context(), p))
	if err != nil {
		t.Fatal(err)
	}
	th := msg.Content[0].AsThinking()
	if len(msg.Content) != 2 || th.Thinking != ThinkingText || th.Signature == "" || msg.Content[1].Text != Answer(2) {
		t.Fatalf("content %+v (events %v)", msg.Content, types)
	}
	nonStream, err := fx.anthropicSDK().Messages.New(t.Context(), p)
	if err != nil || nonStream.Content[0].Thinking != ThinkingText || nonStream.Content[0].Signature != th.Signature {
		t.Fatalf("non-stream %+v, %v", nonStream.Content, err)
	}
	p.Thinking = anthropic.ThinkingConfigParamOfEnabled(500)
	if _, err := fx.anthropicSDK().Messages.New(t.Context(), p); asAnthropic(t, err).StatusCode != 400 {
		t.Fatalf("budget under 1024: %v", err)
	}
}

// Prefill: the answer continues the assistant turn; trailing whitespace
// in it is refused as the API refuses it (a resume must trim).
func TestAnthropicPrefill(t *testing.T) {
	fx := newFixture(t, Options{})
	p := userText("claude|tokens=4", "say something")
	p.Messages = append(p.Messages, anthropic.NewAssistantMessage(anthropic.NewTextBlock("tok1 tok2")))
	msg, err := fx.anthropicSDK().Messages.New(t.Context(), p)
	if err != nil || msg.Content[0].Text != " tok3 tok4 " {
		t.Fatalf("continuation %+v, %v", msg.Content, err)
	}
	p.Messages[1] = anthropic.NewAssistantMessage(anthropic.NewTextBlock("tok1 tok2 "))
	_, err = fx.anthropicSDK().Messages.New(t.Context(), p)
	if e := asAnthropic(t, err); e.StatusCode != 400 || e.Message != "messages: final assistant content cannot end with trailing whitespace" {
		t.Fatalf("trailing whitespace: %v", err)
	}
}

// The log keeps the decoded request, so a gateway test can check that a
// translated request arrived intact.
func TestAnthropicRequestEcho(t *testing.T) {
	fx := newFixture(t, Options{})
	png := base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\nfake"))
	p := userText("claude|cache-write", "x")
	p.System = []anthropic.TextBlockParam{{Text: "You are terse.", CacheControl: anthropic.NewCacheControlEphemeralParam()}}
	p.StopSequences = []string{"END"}
	p.Tools = []anthropic.ToolUnionParam{lookupTool}
	p.Messages = []anthropic.MessageParam{
		anthropic.NewUserMessage(anthropic.NewTextBlock("what is this?"), anthropic.NewImageBlockBase64("image/png", png)),
		anthropic.NewAssistantMessage(anthropic.NewToolUseBlock("toolu_1", map[string]string{"q": "png"}, "lookup")),
		anthropic.NewUserMessage(anthropic.NewToolResultBlock("toolu_1", "a picture", false)),
	}
	msg, err := fx.anthropicSDK().Messages.New(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Usage.CacheCreationInputTokens != 3 || msg.Usage.CacheReadInputTokens != 0 {
		t.Fatalf("usage %+v", msg.Usage)
	}
	m := fx.fake.Log()[0].Anthropic
	img, results := m.Blocks("image"), m.Blocks("tool_result")
	if m.SystemText() != "You are terse." || m.MaxTokens != 1024 || len(m.StopSequences) != 1 || len(m.Tools) != 1 ||
		len(img) != 1 || img[0].Source.Data != png || len(results) != 1 || results[0].Content[0].Text != "a picture" {
		t.Fatalf("decoded request %+v", m)
	}
	// A tool_result whose tool_use went missing is refused as upstream.
	p.Messages = p.Messages[2:]
	_, err = fx.anthropicSDK().Messages.New(t.Context(), p)
	if e := asAnthropic(t, err); e.StatusCode != 400 || !strings.Contains(e.Message, "unexpected `tool_use_id`") {
		t.Fatalf("orphan tool_result: %v", err)
	}
}

// Requests the API refuses, refused with its messages.
func TestAnthropicBadRequests(t *testing.T) {
	fx := newFixture(t, Options{})
	user := []any{map[string]any{"role": "user", "content": "hi"}}
	tests := []struct {
		name string
		body map[string]any
		msg  string
	}{
		{"no max_tokens", map[string]any{"model": "c", "messages": user}, "max_tokens: Field required"},
		{"no model", map[string]any{"max_tokens": 5, "messages": user}, "model: Field required"},
		{"developer role", map[string]any{"model": "c", "max_tokens": 5, "messages": []any{map[string]any{"role": "developer", "content": "x"}}},
			"messages: Unexpected role \"developer\". The Messages API accepts a top-level `system` parameter, not \"developer\" as an input message role."},
		{"empty text", map[string]any{"model": "c", "max_tokens": 5, "messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": ""}}}}},
			"messages: text content blocks must be non-empty"},
		{"bad image", map[string]any{"model": "c", "max_tokens": 5, "messages": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/bmp", "data": "AAAA"}}}}}},
			"messages.0.content.0.image.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif', 'image/webp'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := fx.messages(t, tt.body)
			var e struct {
				Type  string `json:"type"`
				Error struct{ Type, Message string }
			}
			decode(t, resp.Body, &e)
			if resp.StatusCode != 400 || e.Type != "error" || e.Error.Type != "invalid_request_error" || e.Error.Message != tt.msg {
				t.Fatalf("%d %+v", resp.StatusCode, e)
			}
		})
	}
}

// Auth and version headers are required, as on the real API.
func TestAnthropicAuth(t *testing.T) {
	fx := newFixture(t, Options{AnthropicAPIKey: "sk-ant-right"})
	_, err := fx.anthropicSDK().Messages.New(t.Context(), userText("claude", "x"))
	if e := asAnthropic(t, err); e.StatusCode != 401 || e.Type() != "authentication_error" || e.Message != "invalid x-api-key" {
		t.Fatalf("wrong key: %v", err)
	}
	if _, err := fx.anthropicSDK(option.WithAPIKey("sk-ant-right")).Messages.New(t.Context(), userText("claude", "x")); err != nil {
		t.Fatalf("right key: %v", err)
	}
	b := `{"model":"c","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, fx.ts.URL+"/v1/messages", strings.NewReader(b))
	req.Header.Set("X-Api-Key", "sk-ant-right")
	resp, err := fx.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(body), `"anthropic-version: header is required"`) {
		t.Fatalf("no version: %d %s", resp.StatusCode, body)
	}
}

// A thinking block replays only to the fake that signed it: after a
// failover to another channel (another Options.Name) it is a 400, as on
// the real API, so a gateway test can prove it strips thinking first.
func TestAnthropicThinkingReplay(t *testing.T) {
	a, b := newFixture(t, Options{Name: "a"}), newFixture(t, Options{Name: "b"})
	p := userText("claude", "think")
	p.MaxTokens = 2048
	p.Thinking = anthropic.ThinkingConfigParamOfEnabled(1024)
	first, err := a.anthropicSDK().Messages.New(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	p.Messages = append(p.Messages, first.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock("go on")))
	if _, err := a.anthropicSDK().Messages.New(t.Context(), p); err != nil {
		t.Fatalf("same channel: %v", err)
	}
	_, err = b.anthropicSDK().Messages.New(t.Context(), p)
	if e := asAnthropic(t, err); e.StatusCode != 400 || e.Message != "messages.1.content.0: Invalid `signature` in `thinking` block" {
		t.Fatalf("other channel: %v", err)
	}
}

// Bedrock and Vertex refuse betas they do not serve; Anthropic takes any.
func TestCloudBetas(t *testing.T) {
	fx := newFixture(t, Options{})
	known, unknown := option.WithHeader("anthropic-beta", "interleaved-thinking-2025-05-14"), option.WithHeader("anthropic-beta", "made-up-2099-01-01")
	sa := fx.serviceAccount(t)
	for _, tt := range []struct {
		name   string
		client *anthropic.Client
		model  string
	}{
		{"bedrock", fx.bedrockSDK(DefaultAWSSecretAccessKey), claudeBedrock},
		{"vertex", fx.vertexSDK(t, sa, DefaultGoogleProject), claudeVertex},
	} {
		if _, err := tt.client.Messages.New(t.Context(), userText(tt.model, "x"), known); err != nil {
			t.Fatalf("%s known beta: %v", tt.name, err)
		}
		_, err := tt.client.Messages.New(t.Context(), userText(tt.model, "x"), unknown)
		if e := asAnthropic(t, err); e.StatusCode != 400 || !strings.Contains(e.RawJSON(), "made-up-2099-01-01") {
			t.Fatalf("%s unknown beta: %v", tt.name, err)
		}
	}
	if _, err := fx.anthropicSDK().Messages.New(t.Context(), userText("claude", "x"), unknown); err != nil {
		t.Fatalf("anthropic: %v", err)
	}
}
