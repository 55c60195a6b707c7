package translate

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
)

var bedrock = ToMessagesOptions{AnthropicVersion: "bedrock-2023-05-31", MaxTokensDefault: 4096, Base64ImagesOnly: true}

// Each case is a real-shaped OpenAI request (the API reference's examples)
// and what an Anthropic-family channel receives.
var toMessagesCases = []struct {
	name string
	opt  ToMessagesOptions
	kind error // ErrInvalid or ErrUnsupported when refused
}{
	// System and developer become system blocks; penalties and seed are dropped and named.
	{"basic", ToMessagesOptions{Model: "claude-sonnet-4-5-20250929"}, nil},
	// Tool calls → tool_use, consecutive tool results and the next user text → one user turn.
	{"tools_roundtrip", ToMessagesOptions{Model: "claude-sonnet-4-5-20250929"}, nil},
	// A named function → {"type":"tool"}; the model's max_tokens_default fills the gap.
	{"tool_choice_named", ToMessagesOptions{Model: "claude-sonnet-4-5-20250929", MaxTokensDefault: 4096}, nil},
	// none keeps the tools but forbids them; disable_parallel_tool_use is meaningless with none.
	{"tool_choice_none", ToMessagesOptions{Model: "claude-sonnet-4-5-20250929"}, nil},
	// URL → url source, data URL → base64 source, a PDF file → document.
	{"images", ToMessagesOptions{Model: "claude-sonnet-4-5-20250929"}, nil},
	// Bedrock: no model in the body, anthropic_version instead, base64 accepted.
	{"images_base64_only", bedrock, nil},
	// Bedrock and Vertex take no image URL: a clear 400, never a silent drop.
	{"image_url_base64_only", bedrock, ErrInvalid},
	// No max_tokens and no configured default: refused, never a small constant.
	{"max_tokens_missing", ToMessagesOptions{Model: "claude-sonnet-4-5-20250929"}, ErrInvalid},
	// Reasoning of another family never crosses; the prefill loses its trailing space.
	{"thinking_dropped", ToMessagesOptions{Model: "claude-sonnet-4-5-20250929", AnthropicVersion: "vertex-2023-10-16"}, nil},
	// json_schema → output_config.format.
	{"response_format_schema", ToMessagesOptions{Model: "claude-sonnet-4-5-20250929"}, nil},
	// json_object has no Anthropic form: refusing beats returning prose to a JSON parser.
	{"response_format_json_object", ToMessagesOptions{Model: "claude-sonnet-4-5-20250929"}, ErrUnsupported},
	{"n_two", ToMessagesOptions{Model: "claude-sonnet-4-5-20250929"}, ErrUnsupported},
	// Arguments that are not an object cannot become a tool_use input.
	{"bad_tool_arguments", ToMessagesOptions{Model: "claude-sonnet-4-5-20250929"}, ErrInvalid},
}

func TestChatToMessagesGolden(t *testing.T) {
	for _, tc := range toMessagesCases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ChatToMessages(readFile(t, "request_tomessages/"+tc.name+".json"), tc.opt)
			if tc.kind != nil && !errors.Is(err, tc.kind) || tc.kind == nil && err != nil {
				t.Fatalf("err = %v, want %v", err, tc.kind)
			}
			golden(t, "request_tomessages/"+tc.name+".golden", requestGolden(t, r, err))
			if err == nil {
				checkAnthropicParams(t, r.Body)
			}
		})
	}
}

// Each case is a real-shaped Anthropic request (the SDK's recorded
// cassettes and the API reference) and what an OpenAI channel receives.
var toChatCases = []struct {
	name string
	opt  ToChatOptions
	kind error
}{
	// The second request of the SDK's tool-runner cassette: tool_use → tool_calls, tool_result → a tool message.
	{"tools_roundtrip", ToChatOptions{Model: "gpt-4o"}, nil},
	// System blocks → one system message; top_k, cache_control and service_tier dropped and named.
	{"basic", ToChatOptions{Model: "gpt-4o"}, nil},
	// base64 → data URL, url → image_url, PDF → file; a tool result's image follows in a user message.
	{"images", ToChatOptions{Model: "gpt-4o"}, nil},
	// thinking and redacted_thinking never cross; any + disable_parallel_tool_use → required + parallel_tool_calls false.
	{"thinking_dropped", ToChatOptions{Model: "gpt-4o", LegacyMaxTokens: true}, nil},
	{"tool_choice_tool", ToChatOptions{}, nil},
	// A server tool runs at Anthropic: an OpenAI model cannot serve it.
	{"server_tool", ToChatOptions{Model: "gpt-4o"}, ErrUnsupported},
	// A Bedrock-shaped body: anthropic_version is transport, not a feature.
	{"bedrock_body", ToChatOptions{Model: "gpt-4o-mini"}, nil},
	// Claude Code's system-role messages inside messages: a chat system message each, in place (an empty one dropped).
	{"system_messages", ToChatOptions{Model: "gpt-4o"}, nil},
	// A system-role message carries text only: an image in it is the client's error, named by index.
	{"system_message_image", ToChatOptions{Model: "gpt-4o"}, ErrInvalid},
}

func TestMessagesToChatGolden(t *testing.T) {
	for _, tc := range toChatCases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := MessagesToChat(readFile(t, "request_tochat/"+tc.name+".json"), tc.opt)
			if tc.kind != nil && !errors.Is(err, tc.kind) || tc.kind == nil && err != nil {
				t.Fatalf("err = %v, want %v", err, tc.kind)
			}
			golden(t, "request_tochat/"+tc.name+".golden", requestGolden(t, r, err))
			if err == nil {
				checkOpenAIParams(t, r.Body)
			}
		})
	}
}

// checkAnthropicParams decodes the body with the SDK's request type and
// encodes it again: every field the SDK knows must survive unchanged, so
// the shapes are the ones the API documents. The SDK no longer models
// temperature and top_p, and anthropic_version is Bedrock/Vertex transport.
func checkAnthropicParams(t *testing.T, body []byte) {
	t.Helper()
	var p anthropic.MessageNewParams
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("anthropic SDK cannot decode the request: %v", err)
	}
	again, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, body, again, "anthropic_version", "temperature", "top_p", "stream")
}

func checkOpenAIParams(t *testing.T, body []byte) {
	t.Helper()
	var p openai.ChatCompletionNewParams
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("openai SDK cannot decode the request: %v", err)
	}
	again, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	// The SDK decodes a named tool_choice union without its function (a
	// lossy param decoder): check that variant on its own type.
	var top struct {
		ToolChoice json.RawMessage `json:"tool_choice"`
	}
	_ = json.Unmarshal(body, &top)
	if len(top.ToolChoice) > 0 && top.ToolChoice[0] == '{' {
		var named openai.ChatCompletionNamedToolChoiceParam
		if err := json.Unmarshal(top.ToolChoice, &named); err != nil || named.Function.Name == "" {
			t.Errorf("tool_choice %s is not a named tool choice: %v", top.ToolChoice, err)
		}
		sameJSON(t, body, again, "stream", "tool_choice")
		return
	}
	sameJSON(t, body, again, "stream")
}

func sameJSON(t *testing.T, want, got []byte, ignore ...string) {
	t.Helper()
	var w, g map[string]any
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	for _, k := range ignore {
		delete(w, k)
		delete(g, k)
	}
	dropNulls(w)
	dropNulls(g)
	if !reflect.DeepEqual(w, g) {
		t.Errorf("the SDK reads the request differently:\n ours %s\n  sdk %s", want, got)
	}
}

// Duplicate and case-variant keys must not let the translated request say
// something else than what was validated: the last value wins, as in
// encoding/json everywhere in this package.
func TestChatToMessagesRejectsNonObjects(t *testing.T) {
	for _, body := range []string{``, `null`, `[]`, `"x"`, `{"messages":`, `{"messages":[]}`, `{"messages":{}}`} {
		if _, err := ChatToMessages([]byte(body), ToMessagesOptions{MaxTokensDefault: 10}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: err = %v, want ErrInvalid", body, err)
		}
		if _, err := MessagesToChat([]byte(body), ToChatOptions{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: MessagesToChat err = %v, want ErrInvalid", body, err)
		}
	}
}

// dropNulls removes null members: "content": null and an absent content
// mean the same to both APIs.
func dropNulls(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if e == nil {
				delete(v, k)
				continue
			}
			dropNulls(e)
		}
	case []any:
		for _, e := range v {
			dropNulls(e)
		}
	}
}
