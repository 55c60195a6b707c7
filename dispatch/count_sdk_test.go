package dispatch_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anoption "github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/internal/tokens"
)

// TestAnthropicSDKCountTokensAcrossFamilies (DESIGN.md §14): Claude Code's
// count, through anthropic-sdk-go's Messages.CountTokens, on one model per
// family: Anthropic, Bedrock and Vertex count upstream (the fakes' count,
// one per word and message, at each family's own count endpoint), OpenAI
// and Azure count locally with o200k_base and say X-Hopgate-Estimated: 1;
// and on a chain crossing families whose Anthropic entry answers 529, the
// count moves on to the OpenAI entry like a request.
func TestAnthropicSDKCountTokensAcrossFamilies(t *testing.T) {
	h := newFamilies(t, map[string]string{"CROSS_AN": "x|529"})
	c := anthropicSDK(h)
	const system, note, prompt = "Answer briefly.", "plan mode is on", "count the words of this prompt please"
	params := func(model string) anthropic.MessageCountTokensParams {
		return anthropic.MessageCountTokensParams{
			Model:  anthropic.Model(model),
			System: anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: []anthropic.TextBlockParam{{Text: system}}},
			Messages: []anthropic.MessageParam{
				anthropic.NewUserMessage(anthropic.NewTextBlock(prompt)),
				{OfSystem: &anthropic.SystemMessageParam{Content: []anthropic.TextBlockParam{{Text: note}}}},
			},
		}
	}
	body, err := json.Marshal(params("m-oai"))
	if err != nil {
		t.Fatal(err)
	}
	local, err := tokens.Messages(body)
	if err != nil {
		t.Fatal(err)
	}
	// The fakes' count (upstream.CountOf): a token per word and per message.
	const fake = 2 + (1 + 7) + (1 + 4)
	if local == fake {
		t.Fatalf("the local count equals the fakes' (%d): the test cannot tell them apart", fake)
	}
	for _, tc := range []struct {
		model, channel string
		want           int64
		estimated      bool
	}{
		{"m-an", "an", fake, false},
		{"m-br", "br", fake, false},
		{"m-vx", "vx", fake, false},
		{"m-oai", "oai", local, true},
		{"m-az", "az", local, true},
		{"cross-a", "oai", local, true}, // an:529 -> oai, counted locally
	} {
		t.Run(tc.model, func(t *testing.T) {
			sent := func() (n int) {
				for _, r := range h.Ups[tc.channel].Log() {
					if r.Dialect != upstream.DialectOAuth { // Vertex's token fetches
						n++
					}
				}
				return n
			}
			before := sent()
			var resp *http.Response
			got, err := c.Messages.CountTokens(t.Context(), params(tc.model), anoption.WithResponseInto(&resp))
			if err != nil {
				t.Fatal(err)
			}
			if got.InputTokens != tc.want {
				t.Errorf("input_tokens %d, want %d", got.InputTokens, tc.want)
			}
			if est := resp.Header.Get("X-Hopgate-Estimated") == "1"; est != tc.estimated {
				t.Errorf("X-Hopgate-Estimated %q, want estimated=%v", resp.Header.Get("X-Hopgate-Estimated"), tc.estimated)
			}
			if n := sent() - before; tc.estimated && n != 0 || !tc.estimated && n != 1 {
				t.Errorf("%d requests reached %s", n, tc.channel)
			}
		})
	}
}
