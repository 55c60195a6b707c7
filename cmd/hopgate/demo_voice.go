package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
)

// The voice incident of the post-mortem (DESIGN.md §15), played after the
// chat story: the text model rate-limited (429 with Retry-After), then the
// TTS provider five times slower than the voice SLO, whose header_timeout
// moves speech to ElevenLabs.

// demoVoiceChannels are the voice story's fakes: an OpenAI TTS channel and
// an ElevenLabs one (its base URL is the server's root, not …/v1).
var demoVoiceChannels = []struct{ id, region string }{
	{"tts-eu", "eu-west-1"},
	{"eleven-us", "us-east-1"},
}

// demoVoiceSteps are the voice incident's steps.
func demoVoiceSteps() []demoStep {
	return []demoStep{
		{title: "voice incident: the text model answers 429 with Retry-After 3 — failover to mid-us, cheap-eu kept out 3 s",
			before: func(u map[string]*upstream.Server) error { return u["cheap-eu"].SetFault("gpt-4o-mini", "429:ra=3") },
			want:   "cheap-eu:429 -> mid-us:ok"},
		{title: "voice incident: OpenAI TTS 5x slower than the 1 s voice SLO — the header timeout moves speech to ElevenLabs",
			before: func(u map[string]*upstream.Server) error {
				return u["tts-eu"].SetFault("gpt-4o-mini-tts", "header-delay=5s")
			},
			want: "tts-eu:header_timeout -> eleven-us:ok", do: demoSpeech},
	}
}

// demoSpeech sends one OpenAI speech request and reads the audio.
func demoSpeech(ctx context.Context, base string) (demoReply, error) {
	body := `{"model":"tts","input":"Your table for two is confirmed.","voice":"alloy","response_format":"mp3"}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/audio/speech", strings.NewReader(body))
	if err != nil {
		return demoReply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return demoReply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	r := demoReply{status: resp.StatusCode, path: resp.Header.Get("X-Hopgate-Path"), traceID: resp.Header.Get("X-Request-Id")}
	r.text = fmt.Sprintf("%d bytes of %s", len(b), resp.Header.Get("Content-Type"))
	r.complete = err == nil && len(b) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "audio/")
	return r, err
}
