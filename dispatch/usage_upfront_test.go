package dispatch_test

import (
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
)

// TestUsageUpFrontOnTranslatedStream: an Anthropic client streaming from
// an OpenAI-family channel reads the prompt's size in message_start (it
// said input_tokens 0: OpenAI reports usage only at the end, and Claude
// Code decides when to compact from it), the local count CountTokens
// gives on the same channel; message_delta still carries the upstream's
// own figures, which the SDK's accumulator keeps as the final usage. An
// Anthropic-family channel's own message_start is passed through.
func TestUsageUpFrontOnTranslatedStream(t *testing.T) {
	for _, tc := range []struct {
		model      string
		translated bool
	}{
		{"m-oai", true}, // OpenAI's API: counted up front
		{"m-az", true},  // Azure: the same translation
		{"m-an", false}, // Anthropic's API: its message_start as it is
	} {
		t.Run(tc.model, func(t *testing.T) {
			h := newFamilies(t, nil)
			c := anthropicSDK(h)
			ctx := t.Context()
			const prompt, system = "Summarise the plot of a long novel about a lighthouse keeper and the sea, chapter by chapter.",
				"You are a careful literary critic."
			msgs := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))}
			sys := []anthropic.TextBlockParam{{Text: system}}
			count, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
				Model: anthropic.Model(tc.model), Messages: msgs,
				System: anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: sys}})
			if err != nil || count.InputTokens <= 0 {
				t.Fatalf("CountTokens: %+v, %v", count, err)
			}
			s := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: anthropic.Model(tc.model),
				MaxTokens: 64, Messages: msgs, System: sys})
			defer s.Close()
			var acc anthropic.Message
			var upfront int64 = -1
			for s.Next() {
				ev := s.Current()
				if err := acc.Accumulate(ev); err != nil {
					t.Fatal(err)
				}
				if ev.Type == "message_start" {
					upfront = acc.Usage.InputTokens
				}
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			// The fake provider counts words.
			upstreamInput := int64(len(strings.Fields(prompt)) + len(strings.Fields(system)))
			if tc.translated && upfront != count.InputTokens {
				t.Errorf("message_start input_tokens = %d, want the local count %d", upfront, count.InputTokens)
			}
			if upstreamInput == count.InputTokens {
				t.Fatalf("the local count equals the upstream's (%d): the test cannot tell them apart", upstreamInput)
			}
			if acc.Usage.OutputTokens != 8 || acc.Usage.InputTokens != upstreamInput {
				t.Errorf("final usage %+v, want the upstream's figures", acc.Usage)
			}
		})
	}
}
