package config

import "testing"

// TestBaseURLRepeatsTheAPIPath (DESIGN.md §14): a base_url that repeats
// the path hopgate appends is a config error at its line naming the fix
// (an anthropic base_url ending in /v1 sent every request to
// /v1/v1/messages); a path prefix in front of the API's own path is fine.
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
	}
	for _, b := range bad {
		t.Run(b.channel, func(t *testing.T) { wantOneError(t, doc(b.channel), env, 3, b.sub) })
	}
	good := []string{
		`{id: c, provider: anthropic, api_key_env: K, base_url: "https://gw.example/claude"}`,
		`{id: c, provider: azure, api_key_env: K, base_url: "https://r.openai.azure.com"}`,
		`{id: c, provider: openai, api_key_env: K, base_url: "https://api.openai.com/v1"}`,
	}
	for _, g := range good {
		if _, err := Parse([]byte(doc(g)), env); err != nil {
			t.Errorf("%s: %v", g, err)
		}
	}
}
