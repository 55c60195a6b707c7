package dispatch_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/dispatch/breaker"
	"github.com/hopgate/hopgate/internal/tokens"
)

const countPrompt = `{"model":%q,"system":"be brief","messages":[{"role":"user","content":"count these five words"},{"role":"system","content":"a system note"}]}`

// fakeCount is the fakes' count of countPrompt: a word each, a token per
// message (upstream.CountOf).
const fakeCount = 2 + (1 + 4) + (1 + 3)

func countOf(t *testing.T, body string) int64 {
	t.Helper()
	var v struct {
		N *int64 `json:"input_tokens"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.N == nil {
		t.Fatalf("%q is not a count", body)
	}
	return *v.N
}

// TestCountTokensPerFamily (DESIGN.md §14): Anthropic, Bedrock and Vertex
// entries count upstream at their own endpoint (the fake answers only
// there, in its own shape: Bedrock's inputTokens comes back as
// input_tokens); an OpenAI-family entry counts locally with o200k_base and
// says so.
func TestCountTokensPerFamily(t *testing.T) {
	h := newFamilies(t, nil)
	local, err := tokens.Messages([]byte(strings.Replace(countPrompt, "%q", `"m-oai"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		model, channel string
		want           int64
		estimated      bool
	}{
		{"m-an", "an", fakeCount, false},
		{"m-br", "br", fakeCount, false},
		{"m-vx", "vx", fakeCount, false},
		{"m-oai", "oai", local, true},
	}
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			calls := func() (n int) { // Vertex's token fetches aside
				for _, r := range h.Ups[c.channel].Log() {
					if r.Dialect != upstream.DialectOAuth {
						n++
					}
				}
				return n
			}
			before := calls()
			r := send(t, h, "/v1/messages/count_tokens?beta=true", strings.Replace(countPrompt, "%q", `"`+c.model+`"`, 1),
				map[string]string{"anthropic-version": "2023-06-01"})
			if r.Status != 200 {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
			if got := countOf(t, r.Body); got != c.want {
				t.Fatalf("input_tokens %d, want %d", got, c.want)
			}
			if est := r.Header.Get("X-Hopgate-Estimated") == "1"; est != c.estimated {
				t.Fatalf("X-Hopgate-Estimated %q, want estimated=%v", r.Header.Get("X-Hopgate-Estimated"), c.estimated)
			}
			sent := calls() - before
			if c.estimated && sent != 0 || !c.estimated && sent != 1 {
				t.Fatalf("%d requests reached %s", sent, c.channel)
			}
		})
	}
}

// TestCountTokensFailsOverWithoutBreakers: a count walks the chain like a
// request (a 529 moves on to the next entry), but its failures never open
// a breaker: five failed counts leave the channel closed.
func TestCountTokensFailsOverWithoutBreakers(t *testing.T) {
	h := newFamilies(t, map[string]string{"CLAUDE_AN": "claude|529"})
	for i := 0; i < 5; i++ {
		r := send(t, h, "/v1/messages/count_tokens", strings.Replace(countPrompt, "%q", `"claude"`, 1), nil)
		if r.Status != 200 || countOf(t, r.Body) != fakeCount || r.Header.Get("X-Hopgate-Path") != "an:529 -> br:ok" {
			t.Fatalf("count %d: %d %s path %q", i, r.Status, r.Body, r.Header.Get("X-Hopgate-Path"))
		}
	}
	if st := h.Engine.Breakers().Get("an", breaker.Policy{}).State(); st != breaker.Closed {
		t.Fatalf("breaker of an: %v after failed counts, want closed", st)
	}
}

// TestCountTokensBedrockProfile: an entry whose upstream_model is a
// cross-region inference profile ("us.anthropic.…", as most Claude models
// are reached on Bedrock) counts on the profile's foundation model, since
// CountTokens refuses profile ids with a 400; the message itself still
// goes to the profile.
func TestCountTokensBedrockProfile(t *testing.T) {
	const profile = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
	h := newFamilies(t, map[string]string{"MODEL": profile})
	r := send(t, h, "/v1/messages/count_tokens", strings.Replace(countPrompt, "%q", `"m-br"`, 1),
		map[string]string{"anthropic-version": "2023-06-01"})
	if r.Status != 200 || countOf(t, r.Body) != fakeCount || r.Header.Get("X-Hopgate-Estimated") != "" {
		t.Fatalf("count: %d %s estimated=%q", r.Status, r.Body, r.Header.Get("X-Hopgate-Estimated"))
	}
	if r := send(t, h, "/v1/messages", messagesBody("m-br", false, ""), nil); r.Status != 200 {
		t.Fatalf("message: %d %s", r.Status, r.Body)
	}
	var got []string
	for _, l := range h.Ups["br"].Log() {
		got = append(got, l.Path)
	}
	want := []string{"/model/anthropic.claude-sonnet-4-5-20250929-v1:0/count-tokens", "/model/" + profile + "/invoke"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("bedrock saw %q, want %q", got, want)
	}
}

// TestCountTokensBedrockThinking: Claude Code counts a history holding
// thinking blocks with thinking on; Bedrock validates the InvokeModel body
// it wraps, where max_tokens must exceed the budget (the fake refuses as
// Bedrock does), so the wrapped body's max_tokens is one above it.
func TestCountTokensBedrockThinking(t *testing.T) {
	h := newFamilies(t, nil)
	body := strings.Replace(countPrompt, "%q", `"m-br"`, 1)
	body = strings.TrimSuffix(body, "}") + `,"thinking":{"type":"enabled","budget_tokens":1024}}`
	r := send(t, h, "/v1/messages/count_tokens", body, map[string]string{"anthropic-version": "2023-06-01"})
	if r.Status != 200 || r.Header.Get("X-Hopgate-Estimated") != "" {
		t.Fatalf("count: %d %s estimated=%q", r.Status, r.Body, r.Header.Get("X-Hopgate-Estimated"))
	}
}
