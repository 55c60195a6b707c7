package config

import "testing"

// TestBaseURLRepeatsTheAPIPath (DESIGN.md §14): a base_url that repeats
// the path hopgate appends is a config error at its line naming the fix
// (an anthropic base_url ending in /v1 sent every request to
// /v1/v1/messages); a path prefix in front of the API's own path is fine,
// even one holding the same segment (Cloudflare AI Gateway's /v1/…).
func TestBaseURLRepeatsTheAPIPath(t *testing.T) {
	env := func(string) (string, bool) { return "k", true }
	doc := func(channel string) string {
		return "auth: {mode: none}\nchannels:\n" +
			"  - " + channel + "\n" +
			"models:\n" +
			"  - {name: m, max_tokens_default: 16, chain: [{channel: c, upstream_model: u}]}\n"
	}
	bad := []struct{ channel, sub string }{
		{`{id: c, provider: anthropic, api_key_env: K, base_url: "https://api.anthropic.com/v1"}`, "use base_url: https://api.anthropic.com"},
		{`{id: c, provider: anthropic, api_key_env: K, base_url: "https://gw.example/claude/v1/messages"}`, "use base_url: https://gw.example/claude"},
		{`{id: c, provider: azure, api_key_env: K, base_url: "https://r.openai.azure.com/openai"}`, "use base_url: https://r.openai.azure.com"},
		{`{id: c, provider: bedrock, region: us-east-1, base_url: "https://bedrock-runtime.us-east-1.amazonaws.com/model/x/invoke"}`, "use base_url: https://bedrock-runtime.us-east-1.amazonaws.com"},
		{`{id: c, provider: vertex, region: us-east5, project: p, base_url: "https://us-east5-aiplatform.googleapis.com/v1/projects/p/locations/us-east5"}`, "use base_url: https://us-east5-aiplatform.googleapis.com"},
		{`{id: c, provider: anthropic, api_key_env: K, base_url: "https://gateway.ai.cloudflare.com/v1/acct/gw/anthropic/v1/"}`, "use base_url: https://gateway.ai.cloudflare.com/v1/acct/gw/anthropic"},
		{`{id: c, provider: azure, api_key_env: K, base_url: "https://r.openai.azure.com/openai/v1"}`, "use base_url: https://r.openai.azure.com"},
		{`{id: c, provider: azure, api_key_env: K, base_url: "https://r.openai.azure.com/openai/responses"}`, "use base_url: https://r.openai.azure.com"},
	}
	for _, b := range bad {
		t.Run(b.channel, func(t *testing.T) { wantOneError(t, doc(b.channel), env, 3, b.sub) })
	}
	voice := func(baseURL string) string {
		return speechDoc(`{id: el, provider: elevenlabs, api_key_env: K, base_url: "`+baseURL+`"}`,
			`{channel: el, upstream_model: eleven_flash_v2_5, voices: {alloy: 21m00Tcm4TlvDq8ikWAM}}`, "[audio_speech]")
	}
	wantOneError(t, voice("https://api.elevenlabs.io/v1"), env, 4, "use base_url: https://api.elevenlabs.io")
	wantOneError(t, voice("https://eu.residency.elevenlabs.io/v1/text-to-speech"), env, 4, "use base_url: https://eu.residency.elevenlabs.io")
	if _, err := Parse([]byte(voice("https://gateway.ai.cloudflare.com/v1/acct/gw/elevenlabs")), env); err != nil {
		t.Errorf("elevenlabs behind Cloudflare AI Gateway: %v", err)
	}
	good := []string{
		`{id: c, provider: anthropic, api_key_env: K, base_url: "https://gw.example/claude"}`,
		`{id: c, provider: azure, api_key_env: K, base_url: "https://r.openai.azure.com"}`,
		`{id: c, provider: openai, api_key_env: K, base_url: "https://api.openai.com/v1"}`,
		// Cloudflare AI Gateway: its own /v1 comes before the provider's
		// name, and hopgate appends Anthropic's /v1/messages after it.
		`{id: c, provider: anthropic, api_key_env: K, base_url: "https://gateway.ai.cloudflare.com/v1/acct/gw/anthropic"}`,
		`{id: c, provider: azure, api_key_env: K, base_url: "https://gateway.ai.cloudflare.com/v1/acct/gw/azure-openai/r"}`,
		`{id: c, provider: anthropic, api_key_env: K, base_url: "https://gw.example/v10/claude"}`,
	}
	for _, g := range good {
		if _, err := Parse([]byte(doc(g)), env); err != nil {
			t.Errorf("%s: %v", g, err)
		}
	}
}
