package config

import (
	"strings"
	"testing"
)

// speechDoc is a config with one OpenAI tts channel and one ElevenLabs
// channel serving model "tts"; channel and entry are the lines under test.
func speechDoc(channel, entry, ops string) string {
	return "auth: {mode: none}\nchannels:\n" +
		"  - {id: oa, provider: openai, base_url: \"http://127.0.0.1:1/v1\"}\n" +
		"  - " + channel + "\n" +
		"models:\n" +
		"  - name: tts\n" +
		"    operations: " + ops + "\n" +
		"    chain:\n" +
		"      - {channel: oa, upstream_model: tts-1}\n" +
		"      - " + entry + "\n"
}

// TestElevenLabsChannel (DESIGN.md §15): an elevenlabs channel resolves to
// its default base URL and its entries keep the voice map.
func TestElevenLabsChannel(t *testing.T) {
	c := mustParse(t, speechDoc(`{id: el, provider: elevenlabs, api_key_env: XI}`,
		`{channel: el, upstream_model: eleven_flash_v2_5, voices: {alloy: 21m00Tcm4TlvDq8ikWAM, nova: EXAVITQu4vr4xnSDxMaL}}`,
		"[audio_speech]"), env("XI", "xi-test"))
	m := c.Model("tts")
	if m == nil || len(m.Chain) != 2 {
		t.Fatalf("model = %+v", m)
	}
	e := m.Chain[1]
	if e.Channel.BaseURL != ElevenLabsBaseURL || e.Channel.APIKey != "xi-test" || e.UpstreamModel != "eleven_flash_v2_5" {
		t.Errorf("channel = %+v, entry model %q", e.Channel, e.UpstreamModel)
	}
	if e.Voices["alloy"] != "21m00Tcm4TlvDq8ikWAM" || e.Voices["nova"] != "EXAVITQu4vr4xnSDxMaL" || len(e.Voices) != 2 {
		t.Errorf("voices = %v", e.Voices)
	}
	if m.Chain[0].Voices != nil {
		t.Errorf("the openai entry has voices %v", m.Chain[0].Voices)
	}
}

// TestElevenLabsConfigErrors: each mistake is one error at its line,
// saying what to write instead (hopgate check).
func TestElevenLabsConfigErrors(t *testing.T) {
	xi := env("XI", "k")
	const ch = `{id: el, provider: elevenlabs, api_key_env: XI}`
	const entry = `{channel: el, upstream_model: eleven_flash_v2_5, voices: {alloy: abc123}}`
	cases := []struct {
		name, channel, entry, ops string
		line                      int
		sub                       string
	}{
		// ElevenLabs has no chat API: a chat model on it would fail every request.
		{"chat model", ch, entry, "[chat]", 7, `serves "chat", but channel "el" of its chain (provider elevenlabs) serves audio_speech only`},
		// The default operations are chat: a speech model must say so.
		{"no operations", ch, entry, "", 6, "set operations: [audio_speech]"},
		// hopgate appends /v1/text-to-speech/…: a /v1 base_url would double it.
		{"base_url /v1", `{id: el, provider: elevenlabs, api_key_env: XI, base_url: "https://api.elevenlabs.io/v1"}`, entry, "[audio_speech]", 4, "use base_url: https://api.elevenlabs.io"},
		// Without xi-api-key every request is a 401.
		{"no key", `{id: el, provider: elevenlabs}`, entry, "[audio_speech]", 4, "needs api_key_env: the xi-api-key credential"},
		// Without voice ids there is no URL to send to.
		{"no voices", ch, `{channel: el, upstream_model: m}`, "[audio_speech]", 10, "needs voices"},
		// Voices mean nothing to an OpenAI channel: a misplaced map is a mistake.
		{"voices on openai", `{id: el, provider: openai, base_url: "http://127.0.0.1:2/v1"}`, `{channel: el, upstream_model: m, voices: {alloy: abc}}`, "[audio_speech]", 10, "voices in chain entry 2 of model \"tts\" apply to provider elevenlabs channels only"},
		// A voice id goes into the URL path.
		{"bad voice id", ch, `{channel: el, upstream_model: m, voices: {alloy: "a/b"}}`, "[audio_speech]", 10, `voice id of "alloy"`},
		{"empty voices", ch, `{channel: el, upstream_model: m, voices: {}}`, "[audio_speech]", 10, "voices in chain entry 2 of model \"tts\" is empty"},
		{"voices not a mapping", ch, `{channel: el, upstream_model: m, voices: [alloy]}`, "[audio_speech]", 10, "must be a mapping of OpenAI voice names to voice ids"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := speechDoc(tc.channel, tc.entry, tc.ops)
			if tc.ops == "" {
				doc = strings.Replace(speechDoc(tc.channel, tc.entry, "[chat]"), "    operations: [chat]\n", "", 1)
			}
			wantOneError(t, doc, xi, tc.line, tc.sub)
		})
	}
}
