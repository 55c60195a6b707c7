package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
)

// elevenLabsPost sends a text-to-speech request as hopgate does.
func (fx *fixture) elevenLabsPost(t *testing.T, path, key, model string) (*http.Response, []byte) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"text": "hello", "model_id": model})
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, fx.ts.URL+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("xi-api-key", key)
	resp, err := fx.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

// TestElevenLabsDialect: the fake answers and fails as ElevenLabs does
// (DESIGN.md §15): audio in the requested output_format, a wrong key 401,
// 429 system_busy or too_many_concurrent_requests with or without
// Retry-After, 5xx, a 200 whose body is a JSON detail, ElevenLabs' 422 for
// an unknown output_format.
func TestElevenLabsDialect(t *testing.T) {
	fx := newFixture(t, Options{APIKey: "xi-key"})
	const path = "/v1/text-to-speech/21m00Tcm4TlvDq8ikWAM/stream?output_format="
	cases := []struct {
		name, path, key, model string
		status                 int
		ct, word, retryAfter   string
	}{
		{"audio", path + "mp3_44100_128", "xi-key", "eleven_flash_v2_5", 200, "audio/mpeg", "", ""},
		{"pcm", path + "pcm_24000", "xi-key", "eleven_flash_v2_5", 200, "audio/pcm", "", ""},
		{"wrong key", path + "mp3_44100_128", "sk-x", "eleven_flash_v2_5", 401, "application/json", "invalid_api_key", ""},
		{"busy", path + "mp3_44100_128", "xi-key", "m|429", 429, "application/json", "system_busy", ""},
		{"busy, Retry-After", path + "mp3_44100_128", "xi-key", "m|429:ra=7", 429, "application/json", "system_busy", "7"},
		{"concurrency", path + "mp3_44100_128", "xi-key", "m|429|error=too_many_concurrent_requests", 429, "application/json", "too_many_concurrent_requests", ""},
		{"500", path + "mp3_44100_128", "xi-key", "m|500", 500, "application/json", "internal_server_error", ""},
		{"200 with an error", path + "mp3_44100_128", "xi-key", "m|error-body", 200, "application/json", "system_busy", ""},
		{"bad output_format", path + "wav_44100", "xi-key", "m", 422, "application/json", "", ""},
		{"bad fault word", path + "mp3_44100_128", "xi-key", "m|429|error=overloaded_error", 400, "application/json", "unknown_fault", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := fx.elevenLabsPost(t, tc.path, tc.key, tc.model)
			if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != tc.ct || resp.Header.Get("Retry-After") != tc.retryAfter {
				t.Fatalf("%d %q Retry-After %q: %.200s", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Retry-After"), body)
			}
			if tc.word != "" {
				var e struct {
					Detail struct{ Status, Message string }
				}
				if json.Unmarshal(body, &e) != nil || e.Detail.Status != tc.word {
					t.Errorf("body %s, want detail.status %q", body, tc.word)
				}
			}
			if tc.status == 200 && tc.word == "" && !bytes.Equal(body, SpeechAudio("hello", DefaultTokens)) {
				t.Errorf("audio = %d bytes, want SpeechAudio(hello)", len(body))
			}
		})
	}
}
