package dispatch_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"
	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// The official client libraries people use, against hopgate: an OpenAI
// SDK cannot tell that an Anthropic-family channel answered (except by
// model and the X-Hopgate-* headers), and the Anthropic SDK works on
// POST /v1/messages whichever family serves.

func openaiSDK(h *gwtest.Gateway) openai.Client {
	return openai.NewClient(oaoption.WithBaseURL(h.URL+"/v1/"), oaoption.WithAPIKey("unused"),
		oaoption.WithHTTPClient(h.Client), oaoption.WithMaxRetries(0))
}

func anthropicSDK(h *gwtest.Gateway) anthropic.Client {
	return anthropic.NewClient(anoption.WithoutEnvironmentDefaults(), anoption.WithBaseURL(h.URL),
		anoption.WithAPIKey("unused"), anoption.WithHTTPClient(h.Client), anoption.WithMaxRetries(0))
}

var lookupFunction = openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
	Name:        "lookup",
	Description: openai.String("Looks a word up."),
	Parameters:  openai.FunctionParameters{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}},
})

// TestOpenAISDKWithAnthropicChannel: completion, stream with usage, and a
// tool call round trip through openai-go, served by Anthropic's API.
func TestOpenAISDKWithAnthropicChannel(t *testing.T) {
	want := upstream.Answer(upstream.DefaultTokens)
	for _, ch := range []string{"an", "br", "vx"} {
		t.Run(ch, func(t *testing.T) {
			h := newFamilies(t, map[string]string{"MODEL": "m|tokens=4"})
			want = upstream.Answer(4)
			c := openaiSDK(h)
			ctx := t.Context()
			params := openai.ChatCompletionNewParams{Model: "m-" + ch, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
			got, err := c.Chat.Completions.New(ctx, params)
			if err != nil || got.Choices[0].Message.Content != want || got.Usage.CompletionTokens != 4 || got.Choices[0].FinishReason != "stop" {
				t.Fatalf("completion %+v, %v", got, err)
			}
			params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			s := c.Chat.Completions.NewStreaming(ctx, params)
			var acc openai.ChatCompletionAccumulator
			for s.Next() {
				acc.AddChunk(s.Current())
			}
			if err := s.Err(); err != nil || acc.Choices[0].Message.Content != want || acc.Usage.CompletionTokens != 4 {
				t.Fatalf("stream %+v usage %+v, %v", acc.Choices, acc.Usage, err)
			}

			// The tool call, streamed: the model asks for lookup.
			h.Ups[ch].SetFault("m|tokens=4", "tool-calls")
			tparams := openai.ChatCompletionNewParams{Model: "m-" + ch, Tools: []openai.ChatCompletionToolUnionParam{lookupFunction},
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("look it up")}}
			s = c.Chat.Completions.NewStreaming(ctx, tparams)
			acc = openai.ChatCompletionAccumulator{}
			for s.Next() {
				acc.AddChunk(s.Current())
			}
			if err := s.Err(); err != nil || len(acc.Choices) != 1 || len(acc.Choices[0].Message.ToolCalls) != 1 {
				t.Fatalf("tool stream %+v, %v", acc.Choices, err)
			}
			call := acc.Choices[0].Message.ToolCalls[0]
			var args map[string]string
			if acc.Choices[0].FinishReason != "tool_calls" || call.Function.Name != "lookup" ||
				json.Unmarshal([]byte(call.Function.Arguments), &args) != nil || args["q"] != want || call.ID == "" {
				t.Fatalf("tool call %+v finish %q", call, acc.Choices[0].FinishReason)
			}
			// The tool's result goes back: the provider sees the tool_use
			// and a tool_result for it.
			h.Ups[ch].SetFault("m|tokens=4", "")
			tparams.Messages = append(tparams.Messages, acc.Choices[0].Message.ToParam(), openai.ToolMessage("found it", call.ID))
			got, err = c.Chat.Completions.New(ctx, tparams)
			if err != nil || got.Choices[0].Message.Content != want {
				t.Fatalf("after the tool result: %+v, %v", got, err)
			}
			log := h.Ups[ch].Log()
			sent := log[len(log)-1].Anthropic
			if sent == nil || len(sent.Messages) != 3 {
				t.Fatalf("the provider did not get the tool round trip: %+v", sent)
			}
			use, result := sent.Messages[1].Content, sent.Messages[2].Content
			if len(use) != 1 || use[0].Type != "tool_use" || use[0].ID != call.ID ||
				len(result) != 1 || result[0].Type != "tool_result" || result[0].ToolUseID != call.ID {
				t.Fatalf("tool_use %+v, tool_result %+v", use, result)
			}
		})
	}
}

// accumulateMessage reads an Anthropic stream through the SDK.
func accumulateMessage(s *ssestream.Stream[anthropic.MessageStreamEventUnion]) (anthropic.Message, error) {
	defer s.Close()
	var msg anthropic.Message
	for s.Next() {
		if err := msg.Accumulate(s.Current()); err != nil {
			return msg, err
		}
	}
	return msg, s.Err()
}

// TestAnthropicSDKOnMessages: message, stream and tool use through the
// official Anthropic SDK on /v1/messages, served by an Anthropic-family
// channel (passed through) and by OpenAI-family ones (translated).
func TestAnthropicSDKOnMessages(t *testing.T) {
	want := upstream.Answer(upstream.DefaultTokens)
	tool := anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
		Name:        "lookup",
		InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"q": map[string]any{"type": "string"}}},
	}}
	for _, ch := range []string{"an", "br", "oai", "az"} {
		t.Run(ch, func(t *testing.T) {
			h := newFamilies(t, nil)
			c := anthropicSDK(h)
			ctx := t.Context()
			params := anthropic.MessageNewParams{Model: anthropic.Model("m-" + ch), MaxTokens: 256,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
			first, err := c.Messages.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			msg := *first
			if len(msg.Content) != 1 || msg.Content[0].Text != want || msg.StopReason != "end_turn" || msg.Usage.OutputTokens != 8 {
				t.Fatalf("message %+v, %v", msg, err)
			}
			msg, err = accumulateMessage(c.Messages.NewStreaming(ctx, params))
			if err != nil || len(msg.Content) != 1 || msg.Content[0].Text != want || msg.Usage.OutputTokens != 8 {
				t.Fatalf("stream %+v, %v", msg, err)
			}
			h.Ups[ch].SetFault("m", "tool-calls")
			params.Tools = []anthropic.ToolUnionParam{tool}
			msg, err = accumulateMessage(c.Messages.NewStreaming(ctx, params))
			if err != nil || msg.StopReason != "tool_use" || len(msg.Content) == 0 {
				t.Fatalf("tool stream %+v, %v", msg, err)
			}
			use := msg.Content[len(msg.Content)-1].AsToolUse()
			var in map[string]string
			if use.Name != "lookup" || json.Unmarshal(use.Input, &in) != nil || !strings.HasPrefix(in["q"], "tok1") {
				t.Fatalf("tool use %+v", use)
			}
		})
	}
}

// TestImagesAcrossFamilies: an OpenAI client's base64 image reaches an
// Anthropic-family channel as an image block; an image URL reaches
// Anthropic's API as a URL source, and is a clear 400 for Bedrock and
// Vertex (which take only base64), never a silent drop.
func TestImagesAcrossFamilies(t *testing.T) {
	const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
	body := func(model, url string) string {
		return `{"model":"` + model + `","messages":[{"role":"user","content":[{"type":"text","text":"what is it?"},` +
			`{"type":"image_url","image_url":{"url":"` + url + `"}}]}]}`
	}
	h := newFamilies(t, nil)
	for _, ch := range []string{"an", "br", "vx"} {
		r := send(t, h, "/v1/chat/completions", body("m-"+ch, "data:image/png;base64,"+png), nil)
		if r.Status != 200 {
			t.Fatalf("%s base64 image: %d %s", ch, r.Status, r.Body)
		}
		log := h.Ups[ch].Log()
		img := log[len(log)-1].Anthropic.Messages[0].Content
		if len(img) != 2 || img[1].Type != "image" || img[1].Source == nil || img[1].Source.Type != "base64" || img[1].Source.Data != png {
			t.Fatalf("%s: the image did not arrive as a base64 block: %+v", ch, img)
		}
	}
	r := send(t, h, "/v1/chat/completions", body("m-an", "https://example.com/cat.png"), nil)
	if r.Status != 200 {
		t.Fatalf("anthropic URL image: %d %s", r.Status, r.Body)
	}
	if log := h.Ups["an"].Log(); log[len(log)-1].Anthropic.Messages[0].Content[1].Source.Type != "url" {
		t.Fatalf("the URL image was not sent as a URL source")
	}
	for _, ch := range []string{"br", "vx"} {
		n := len(h.Ups[ch].Log())
		r := send(t, h, "/v1/chat/completions", body("m-"+ch, "https://example.com/cat.png"), nil)
		if r.Status != 400 || !strings.Contains(r.Body, "image_url_not_supported") || len(h.Ups[ch].Log()) != n {
			t.Fatalf("%s URL image: %d %s (upstream requests %d -> %d)", ch, r.Status, r.Body, n, len(h.Ups[ch].Log()))
		}
	}
}

// TestDegradedMessageInClientDialect: with degraded_reply: {mode: message}
// an Anthropic client on /v1/messages whose chain is exhausted gets an
// Anthropic message it can read (text, end_turn), streamed or not, marked
// X-Hopgate-Degraded: 1; it used to get an OpenAI chat.completion, which
// the SDK read as an empty message.
func TestDegradedMessageInClientDialect(t *testing.T) {
	h := gwtest.New(t, twoChannels("m|503", "m|503", "    policy: {degraded_reply: {mode: message}}\n"), "a", "b")
	c := anthropicSDK(h)
	params := anthropic.MessageNewParams{Model: "m", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
	var resp *http.Response
	msg, err := c.Messages.New(t.Context(), params, anoption.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("X-Hopgate-Degraded") != "1" || msg.Type != "message" || msg.Role != "assistant" ||
		len(msg.Content) != 1 || msg.Content[0].Text != config.DefaultDegradedMessage || msg.StopReason != "end_turn" {
		t.Fatalf("degraded=%q message %+v", resp.Header.Get("X-Hopgate-Degraded"), msg)
	}
	s := c.Messages.NewStreaming(t.Context(), params, anoption.WithResponseInto(&resp))
	got, err := accumulateMessage(s)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("X-Hopgate-Degraded") != "1" || len(got.Content) != 1 ||
		got.Content[0].Text != config.DefaultDegradedMessage || got.StopReason != "end_turn" {
		t.Fatalf("degraded=%q stream %+v", resp.Header.Get("X-Hopgate-Degraded"), got)
	}
}
