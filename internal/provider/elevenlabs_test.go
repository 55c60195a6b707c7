package provider

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/hopgate/hopgate/dispatch/config"
)

// TestElevenLabsRequest (DESIGN.md §15): a speech hop goes to the
// streaming endpoint of the entry's voice id with the output_format in the
// query, the key in xi-api-key (never as a Bearer token), and is named
// elevenlabs on spans.
func TestElevenLabsRequest(t *testing.T) {
	ch := &config.Channel{ID: "el", Provider: config.ProviderElevenLabs, BaseURL: "https://api.elevenlabs.io", APIKey: "xi-secret"}
	u, err := New(context.Background(), ch, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &Request{Path: "/audio/speech", Model: "eleven_flash_v2_5", VoiceID: "21m00Tcm4TlvDq8ikWAM", OutputFormat: "mp3_44100_128",
		ContentType: "application/json", Accept: "*/*"}
	if got, want := u.URL(r), "https://api.elevenlabs.io/v1/text-to-speech/21m00Tcm4TlvDq8ikWAM/stream?output_format=mp3_44100_128"; got != want {
		t.Errorf("URL = %s, want %s", got, want)
	}
	// A voice id is path-escaped: a stray "/" cannot reach another endpoint.
	if got, want := u.URL(&Request{VoiceID: "a/b", OutputFormat: "pcm_24000"}), "https://api.elevenlabs.io/v1/text-to-speech/a%2Fb/stream?output_format=pcm_24000"; got != want {
		t.Errorf("URL = %s, want %s", got, want)
	}
	req, _ := http.NewRequest(http.MethodPost, u.URL(r), nil)
	if err := u.SetHeaders(context.Background(), req, r, nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if req.Header.Get("xi-api-key") != "xi-secret" || req.Header.Get("Authorization") != "" {
		t.Errorf("headers = %v", req.Header)
	}
	if u.GenAIName() != "elevenlabs" {
		t.Errorf("gen_ai.provider.name = %q", u.GenAIName())
	}
}
