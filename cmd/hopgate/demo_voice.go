package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"

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
	{"rt-eu", "eu-west-1"},
	{"rt-us", "us-east-1"},
}

// demoVoiceSteps are the voice incident's steps.
func demoVoiceSteps() []demoStep {
	return []demoStep{
		{title: "voice incident: the realtime channel in eu-west-1 refuses sessions — the walk opens one in us-east-1",
			want: "rt-eu:503 -> rt-us:ok", do: demoRealtime, kind: "realtime", status: http.StatusSwitchingProtocols},
		{title: "voice incident: the text model answers 429 with Retry-After 3 — failover to mid-us, cheap-eu kept out 3 s",
			before: func(u map[string]*upstream.Server) error { return u["cheap-eu"].SetFault("gpt-4o-mini", "429:ra=3") },
			want:   "cheap-eu:429 -> mid-us:ok"},
		{title: "voice incident: OpenAI TTS 5x slower than the 1 s voice SLO — the header timeout moves speech to ElevenLabs",
			before: func(u map[string]*upstream.Server) error {
				return u["tts-eu"].SetFault("gpt-4o-mini-tts", "header-delay=5s")
			},
			want: "tts-eu:header_timeout -> eleven-us:ok", do: demoSpeech, kind: "speech"},
	}
}

// demoRealtime opens one realtime session, reads its first event (the
// committed channel's session.created) and closes it; the failover path
// is the session's entry in /admin/failovers (the 101 is sent before the
// walk, so it cannot carry X-Hopgate-Path).
func demoRealtime(ctx context.Context, base, admin string) (demoReply, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/v1/realtime?model=gpt-realtime", nil)
	if err != nil {
		return demoReply{}, err
	}
	r := demoReply{status: resp.StatusCode, traceID: resp.Header.Get("X-Request-Id")}
	_, msg, err := conn.Read(ctx)
	if err != nil {
		return r, err
	}
	var ev struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(msg, &ev)
	r.text = "first event: " + ev.Type
	if err := conn.Close(websocket.StatusNormalClosure, ""); err != nil {
		return r, err
	}
	// The session's entry is written when it ends, just after the close.
	for r.path == "" {
		var list []struct {
			Path    string `json:"path"`
			TraceID string `json:"trace_id"`
		}
		if resp, err := http.Get(admin + "/admin/failovers"); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&list)
			_ = resp.Body.Close()
		}
		for _, e := range list {
			if e.TraceID == r.traceID {
				r.path = e.Path
			}
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("the session's failover entry never appeared: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	r.complete = ev.Type == "session.created" // the committed channel spoke first
	return r, nil
}

// demoSpeech sends one OpenAI speech request and reads the audio.
func demoSpeech(ctx context.Context, base, _ string) (demoReply, error) {
	body := `{"model":"tts","input":"Your table for two is confirmed.","voice":"alloy","response_format":"mp3"}`
	resp, r, err := demoPost(ctx, base+"/v1/audio/speech", body)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	r.text = fmt.Sprintf("%d bytes of %s", len(b), resp.Header.Get("Content-Type"))
	r.complete = err == nil && len(b) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "audio/")
	return r, err
}
