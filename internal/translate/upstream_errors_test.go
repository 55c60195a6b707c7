package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
)

// Upstream error bodies in every family's own wording, as the client's
// family receives them. The statuses are the ones each API documents.
var anthropicErrors = []struct {
	name   string
	status int
	body   string
	ctx    bool // context_length_exceeded
}{
	{"overloaded", 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`, false},
	{"rate_limit", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`, false},
	{"prompt_too_long", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}`, true},
	{"max_tokens_exceed_context", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"input length and ` + "`max_tokens`" + ` exceed context limit: 188240 + 21333 > 200000, decrease input length or ` + "`max_tokens`" + ` and try again"}}`, true},
	{"auth", 401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, false},
	{"bedrock_validation_too_long", 400, `{"message":"Input is too long for requested model."}`, true},
	{"bedrock_validation_wrapped", 400, `{"Message":"The model returned the following errors: prompt is too long: 201010 tokens > 200000 maximum"}`, true},
	{"bedrock_throttling", 429, `{"message":"Too many requests, please wait before trying again."}`, false},
	{"vertex_google_shape", 429, `{"error":{"code":429,"message":"Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model","status":"RESOURCE_EXHAUSTED"}}`, false},
	{"html_from_proxy", 502, `<html><body>Bad Gateway</body></html>`, false},
}

func TestAnthropicErrorToOpenAIGolden(t *testing.T) {
	var b bytes.Buffer
	for _, c := range anthropicErrors {
		out := AnthropicErrorToOpenAI(c.status, []byte(c.body))

		var shape struct {
			Error openai.Error `json:"error"`
		}
		if err := json.Unmarshal(out, &shape); err != nil || shape.Error.Message == "" || shape.Error.Type == "" {
			t.Errorf("%s: not an OpenAI error body: %s", c.name, out)
		}

		if got := ContextLengthExceeded([]byte(c.body)); got != c.ctx {
			t.Errorf("%s: ContextLengthExceeded = %v", c.name, got)
		}
		if (shape.Error.Code == "context_length_exceeded") != c.ctx {
			t.Errorf("%s: code %q", c.name, shape.Error.Code)
		}
		fmt.Fprintf(&b, "%s %d\n  in  %s\n  out %s\n", c.name, c.status, c.body, out)
	}
	golden(t, "errors_tochat.golden", b.Bytes())
}

var openAIErrors = []struct {
	name   string
	status int
	body   string
}{
	{"context_length", 400, `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`},
	{"rate_limit", 429, `{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 30000, Requested 1000.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`},
	{"quota", 429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`},
	{"invalid_key", 401, `{"error":{"message":"Incorrect API key provided: sk-abc. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`},
	{"azure_content_filter", 400, `{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.","type":null,"param":"prompt","code":"content_filter","status":400}}`},
	{"server_error", 500, `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`},
	{"overloaded_503", 503, `{"error":{"message":"The engine is currently overloaded, please try again later","type":"server_error","param":null,"code":null}}`},
	{"model_not_found", 404, `{"error":{"message":"The model 'gpt-5-turbo' does not exist","type":"invalid_request_error","param":"model","code":"model_not_found"}}`},
}

func TestOpenAIErrorToAnthropicGolden(t *testing.T) {
	var b bytes.Buffer
	for _, c := range openAIErrors {
		out := OpenAIErrorToAnthropic(c.status, []byte(c.body))
		var e anthropic.ErrorResponse
		if err := json.Unmarshal(out, &e); err != nil || e.Type != "error" || e.Error.Message == "" || e.Error.Type == "" {
			t.Errorf("%s: not an Anthropic error body (%v): %s", c.name, err, out)
		}
		fmt.Fprintf(&b, "%s %d\n  in  %s\n  out %s\n", c.name, c.status, c.body, out)
	}
	golden(t, "errors_tomessages.golden", b.Bytes())
}

// TestCloudErrorToAnthropicGolden: Bedrock's and Vertex's own error bodies
// reach a Messages client in Anthropic's shape with their message, and an
// Anthropic body passes through byte for byte.
func TestCloudErrorToAnthropicGolden(t *testing.T) {
	var b bytes.Buffer
	for _, c := range anthropicErrors {
		out := CloudErrorToAnthropic(c.status, []byte(c.body))
		var e anthropic.ErrorResponse
		if err := json.Unmarshal(out, &e); err != nil || e.Type != "error" || e.Error.Message == "" || e.Error.Type == "" {
			t.Errorf("%s: not an Anthropic error body (%v): %s", c.name, err, out)
		}
		if c.ctx && e.Error.Type != "invalid_request_error" {
			t.Errorf("%s: a prompt too long is %q", c.name, e.Error.Type)
		}
		if bytes.HasPrefix([]byte(c.body), []byte(`{"type":"error"`)) && string(out) != c.body {
			t.Errorf("%s: an Anthropic body was rewritten: %s", c.name, out)
		}
		fmt.Fprintf(&b, "%s %d\n  in  %s\n  out %s\n", c.name, c.status, c.body, out)
	}
	golden(t, "errors_cloud_tomessages.golden", b.Bytes())
}

// The interruption frames are what DESIGN §2 "After commit" names, in each
// dialect, and parse as each SDK parses stream errors.
func TestInterruptFrames(t *testing.T) {
	o := OpenAIInterruptFrame(`upstream closed the stream: "EOF"`)
	want := `data: {"error":{"message":"upstream closed the stream: \"EOF\"","type":"server_error","code":"upstream_stream_interrupted","param":null}}` + "\n\n"
	if string(o) != want {
		t.Errorf("OpenAI frame\n got %s\nwant %s", o, want)
	}
	a := AnthropicInterruptFrame("upstream stalled")
	want = `event: error` + "\n" + `data: {"type":"error","error":{"type":"api_error","message":"upstream_stream_interrupted: upstream stalled"}}` + "\n\n"
	if string(a) != want {
		t.Errorf("Anthropic frame\n got %s\nwant %s", a, want)
	}
	f := sseEvents(t, a)
	var e anthropic.ErrorResponse
	if len(f) != 1 || f[0].Event != "error" || json.Unmarshal(f[0].Data, &e) != nil || e.Error.Type != "api_error" {
		t.Errorf("Anthropic frame does not parse: %s", a)
	}
}
