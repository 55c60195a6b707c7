package dispatch_test

import (
	"context"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// TestSystemRoleMessageFailsOverAcrossFamilies: Claude Code's system-role
// message inside messages, sent with anthropic-sdk-go, on a chain whose
// Anthropic entry answers 529: the hop moves on to the OpenAI-family entry
// and the answer is a message (it was a final 400 "role must be user or
// assistant", path a:529 -> b:unsupported_request), streamed and
// accumulated by the SDK too; its CountTokens counts on the same chain.
func TestSystemRoleMessageFailsOverAcrossFamilies(t *testing.T) {
	h := newFamilies(t, map[string]string{"CROSS_AN": "x|529"})
	c := anthropic.NewClient(option.WithBaseURL(h.URL), option.WithAPIKey("k"), option.WithMaxRetries(0))
	ctx := context.Background()
	msgs := []anthropic.MessageParam{
		anthropic.NewUserMessage(anthropic.NewTextBlock("hello there")),
		{OfSystem: &anthropic.SystemMessageParam{Content: []anthropic.TextBlockParam{{Text: "plan mode is on"}}}},
		anthropic.NewUserMessage(anthropic.NewTextBlock("go on")),
	}
	m, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "cross-a", MaxTokens: 64, Messages: msgs})
	if err != nil || len(m.Content) == 0 || m.Content[0].Text == "" {
		t.Fatalf("Messages.New: %+v, %v", m, err)
	}
	stream := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "cross-a", MaxTokens: 64, Messages: msgs})
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil || len(acc.Content) == 0 || acc.Content[0].Text == "" || acc.StopReason == "" {
		t.Fatalf("stream: %+v, %v", acc, err)
	}
	n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "cross-a", Messages: msgs})
	if err != nil || n.InputTokens <= 0 {
		t.Fatalf("CountTokens: %+v, %v", n, err)
	}
}
