package dispatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// speechConfig: model tts walks OpenAI tts -> ElevenLabs, model tts-el
// ElevenLabs -> OpenAI (DESIGN.md §15), model el-only ElevenLabs alone.
const speechConfig = `
region: test-1
auth: {mode: none}
channels:
  - {id: oa, base_url: "{{url:oa}}", api_key_env: CHANNEL_KEY, region: r-a}
  - {id: el, provider: elevenlabs, base_url: "{{base:el}}", api_key_env: CHANNEL_KEY, region: r-b}
models:
  - name: tts
    operations: [audio_speech]
    policy: {header_timeout: 10s}
    chain:
      - {channel: oa, upstream_model: tts-1, price: {input: 1, output: 1}}
      - {channel: el, upstream_model: eleven_flash_v2_5, price: {input: 2, output: 2}, voices: {alloy: 21m00Tcm4TlvDq8ikWAM}}
  - name: tts-el
    operations: [audio_speech]
    policy: {header_timeout: 10s}
    chain:
      - {channel: el, upstream_model: eleven_flash_v2_5, price: {input: 1, output: 1}, voices: {alloy: 21m00Tcm4TlvDq8ikWAM}}
      - {channel: oa, upstream_model: tts-1, price: {input: 2, output: 2}}
  - name: tts-el-idle
    operations: [audio_speech]
    policy: {header_timeout: 10s, stream_idle_timeout: 2s}
    chain:
      - {channel: el, upstream_model: eleven_flash_v2_5, price: {input: 1, output: 1}, voices: {alloy: 21m00Tcm4TlvDq8ikWAM}}
      - {channel: oa, upstream_model: tts-1, price: {input: 2, output: 2}}
  - name: tts-el-gate
    operations: [audio_speech]
    policy: {header_timeout: 10s, stream_gate: {timeout: 3s, on_timeout: failover}}
    chain:
      - {channel: el, upstream_model: eleven_flash_v2_5, price: {input: 1, output: 1}, voices: {alloy: 21m00Tcm4TlvDq8ikWAM}}
      - {channel: oa, upstream_model: tts-1, price: {input: 2, output: 2}}
  - name: el-only
    operations: [audio_speech]
    chain:
      - {channel: el, upstream_model: eleven_flash_v2_5, voices: {alloy: 21m00Tcm4TlvDq8ikWAM}}
`

func speechBody(model, voice, format string) []byte {
	b, _ := json.Marshal(map[string]any{"model": model, "input": "hello there", "voice": voice, "response_format": format})
	return b
}

var speechAudio = string(upstream.SpeechAudio("hello there", upstream.DefaultTokens))

// TestSpeechAcrossProviders: each way ElevenLabs fails moves speech to the
// next provider or ends it, as its class says (429 system_busy and
// too_many_concurrent_requests, 5xx, 401/403 ours: next; 400/422 final,
// in the OpenAI error shape; a 200 JSON detail: a failed hop), both ways
// round (OpenAI tts -> ElevenLabs and back); the audio is ElevenLabs'
// bytes, untouched.
func TestSpeechAcrossProviders(t *testing.T) {
	cases := []struct {
		name, model, up, fault string
		status                 int
		path                   string
	}{
		{"openai 503 -> elevenlabs", "tts", "oa", "503", 200, "oa:503 -> el:ok"},
		{"openai 429 -> elevenlabs", "tts", "oa", "429", 200, "oa:429 -> el:ok"},
		{"system_busy -> openai", "tts-el", "el", "429", 200, "el:429 -> oa:ok"},
		{"system_busy with Retry-After -> openai", "tts-el", "el", "429:ra=3", 200, "el:429 -> oa:ok"},
		{"too_many_concurrent_requests -> openai", "tts-el", "el", "429|error=too_many_concurrent_requests", 200, "el:429 -> oa:ok"},
		{"500 -> openai", "tts-el", "el", "500", 200, "el:500 -> oa:ok"},
		{"503 -> openai", "tts-el", "el", "503", 200, "el:503 -> oa:ok"},
		// Our key refused (or our quota, ElevenLabs' 401 quota_exceeded): another channel may serve.
		{"401 -> openai", "tts-el", "el", "401", 200, "el:401 -> oa:ok"},
		{"403 -> openai", "tts-el", "el", "403", 200, "el:403 -> oa:ok"},
		{"200 with a JSON detail -> openai", "tts-el", "el", "error-body", 200, "el:error_body -> oa:ok"},
		// The client's request is wrong: no other provider makes it right.
		{"400 final", "tts-el", "el", "400", 400, "el:400"},
		{"422 final", "tts-el", "el", "422", 422, "el:422"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := gwtest.New(t, speechConfig, "oa", "el")
			upModel := map[string]string{"oa": "tts-1", "el": "eleven_flash_v2_5"}[tc.up]
			if err := h.Ups[tc.up].SetFault(upModel, tc.fault); err != nil {
				t.Fatal(err)
			}
			r, err := h.Call(context.Background(), "/v1/audio/speech", "application/json", speechBody(tc.model, "alloy", "mp3"))
			if err != nil || r.Status != tc.status || r.Header.Get("X-Hopgate-Path") != tc.path {
				t.Fatalf("status %d path %q err %v: %.300s", r.Status, r.Header.Get("X-Hopgate-Path"), err, r.Body)
			}
			if tc.status == 200 && r.Body != speechAudio {
				t.Fatalf("audio: %d bytes, want %d", len(r.Body), len(speechAudio))
			}
			if tc.status != 200 {
				var e struct {
					Error struct{ Message, Type, Code string }
				}
				if json.Unmarshal([]byte(r.Body), &e) != nil || e.Error.Message == "" || e.Error.Type != "invalid_request_error" {
					t.Fatalf("a final ElevenLabs error reaches an OpenAI client in the OpenAI shape: %s", r.Body)
				}
			}
			// The ElevenLabs hop went to its stream endpoint with the voice
			// id and output_format, the key in xi-api-key, text and model_id.
			for _, req := range h.Ups["el"].Log() {
				var b struct {
					ModelID string `json:"model_id"`
				}
				_ = json.Unmarshal(req.Body, &b)
				if b.ModelID != "eleven_flash_v2_5" || !strings.Contains(string(req.Body), `"text":"hello there"`) {
					t.Errorf("elevenlabs body %s", req.Body)
				}
			}
		})
	}
}

// TestSpeechElevenLabsWire: what reaches ElevenLabs, byte for byte where
// it matters, and the hop span's provider name.
func TestSpeechElevenLabsWire(t *testing.T) {
	var got *http.Request
	var body []byte
	h := gwtest.NewWith(t, gwtest.Options{Wrap: map[string]func(http.Handler) http.Handler{
		"el": func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = r.Clone(context.Background())
				body, _ = io.ReadAll(r.Body)
				r.Body = io.NopCloser(strings.NewReader(string(body)))
				next.ServeHTTP(w, r)
			})
		},
	}}, speechConfig, "oa", "el")
	for _, f := range []struct{ format, query, ct string }{
		{"mp3", "mp3_44100_128", "audio/mpeg"}, {"opus", "opus_48000_128", "audio/opus"}, {"pcm", "pcm_24000", "audio/pcm"},
	} {
		r, err := h.Call(context.Background(), "/v1/audio/speech", "application/json", speechBody("el-only", "alloy", f.format))
		if err != nil || r.Status != 200 || r.Header.Get("Content-Type") != f.ct || r.Body != speechAudio {
			t.Fatalf("%s: status %d %q err %v", f.format, r.Status, r.Header.Get("Content-Type"), err)
		}
		if got.URL.Path != "/v1/text-to-speech/21m00Tcm4TlvDq8ikWAM/stream" || got.URL.RawQuery != "output_format="+f.query ||
			got.Header.Get("Xi-Api-Key") != h.APIKey || got.Header.Get("Authorization") != "" {
			t.Errorf("%s: %s ? %s, headers %v", f.format, got.URL.Path, got.URL.RawQuery, got.Header)
		}
		if string(body) != `{"text":"hello there","model_id":"eleven_flash_v2_5"}` {
			t.Errorf("body %s", body)
		}
		hops := 0
		for _, s := range h.Trace(r.Header.Get("X-Request-Id")) {
			for _, kv := range s.Attributes {
				if kv.Key == "gen_ai.provider.name" {
					hops++
					if kv.Value.AsString() != "elevenlabs" {
						t.Errorf("span %q: gen_ai.provider.name %q", s.Name, kv.Value.AsString())
					}
				}
			}
		}
		if hops == 0 {
			t.Errorf("no hop span names its provider")
		}
	}
}

// TestSpeechVoiceSkips: an ElevenLabs entry that cannot serve the request
// (an unmapped voice, a format without an output_format) is skipped as
// unsupported_request with nothing sent; alone in its chain, the request
// is a 400 naming the field.
func TestSpeechVoiceSkips(t *testing.T) {
	h := gwtest.New(t, speechConfig, "oa", "el")
	for _, tc := range []struct{ voice, format, param string }{{"nova", "mp3", "voice"}, {"alloy", "wav", "response_format"}} {
		r, err := h.Call(context.Background(), "/v1/audio/speech", "application/json", speechBody("tts-el", tc.voice, tc.format))
		if err != nil || r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "el:unsupported_request -> oa:ok" {
			t.Fatalf("%s/%s: status %d path %q", tc.voice, tc.format, r.Status, r.Header.Get("X-Hopgate-Path"))
		}
		r, _ = h.Call(context.Background(), "/v1/audio/speech", "application/json", speechBody("el-only", tc.voice, tc.format))
		var e struct{ Error struct{ Code, Param string } }
		if r.Status != 400 || json.Unmarshal([]byte(r.Body), &e) != nil || e.Error.Param != tc.param || e.Error.Code != "unsupported_request" {
			t.Fatalf("el-only %s/%s: status %d %s", tc.voice, tc.format, r.Status, r.Body)
		}
	}
	if n := len(h.Ups["el"].Log()); n != 0 {
		t.Fatalf("ElevenLabs saw %d requests for entries it cannot serve", n)
	}
}

// TestSpeechHeaderTimeoutMovesToElevenLabs: the voice incident's third
// layer: OpenAI tts slow past the model's header_timeout, the hop fails at
// the timeout and ElevenLabs serves (no same-channel retry after a timeout).
func TestSpeechHeaderTimeoutMovesToElevenLabs(t *testing.T) {
	h := gwtest.New(t, speechConfig, "oa", "el")
	if err := h.Ups["oa"].SetFault("tts-1", "header-delay=50s"); err != nil {
		t.Fatal(err)
	}
	done := h.AsyncCall("/v1/audio/speech", "application/json", speechBody("tts", "alloy", "mp3"))
	h.WaitTimers(1)
	h.Clock.Advance(10 * time.Second)
	r := testkit.Recv(t, done, "the speech answer")
	if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "oa:header_timeout -> el:ok" || r.Body != speechAudio {
		t.Fatalf("status %d path %q: %d bytes", r.Status, r.Header.Get("X-Hopgate-Path"), len(r.Body))
	}
	// The trace shows both hops, each named by its provider.
	providers := spanValues(h.Trace(r.Header.Get("X-Request-Id")), "gen_ai.provider.name", nil)
	if strings.Join(providers, ",") != "openai,elevenlabs" && strings.Join(providers, ",") != "elevenlabs,openai" {
		t.Fatalf("hop spans' gen_ai.provider.name: %v, want one openai and one elevenlabs", providers)
	}
}

// TestSpeechFirstBytesCommit: audio commits at its first bytes, not at its
// headers: a 200 that ends before any byte is a failed hop (the next
// provider serves); once bytes went out, a cut cannot fail over and breaks
// the client's transfer.
func TestSpeechFirstBytesCommit(t *testing.T) {
	t.Run("empty 200", func(t *testing.T) {
		h := gwtest.NewWith(t, gwtest.Options{Custom: map[string]http.Handler{
			"el": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "audio/mpeg")
				w.WriteHeader(http.StatusOK)
			}),
		}}, speechConfig, "oa")
		r, err := h.Call(context.Background(), "/v1/audio/speech", "application/json", speechBody("tts-el", "alloy", "mp3"))
		if err != nil || r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "el:stream_eof -> oa:ok" || r.Body != speechAudio {
			t.Fatalf("status %d path %q err %v", r.Status, r.Header.Get("X-Hopgate-Path"), err)
		}
	})
	// ElevenLabs sends headers, then no audio: past stream_idle_timeout,
	// or with stream_gate.on_timeout: failover past stream_gate.timeout
	// (as a stream with nothing decisive), nothing was committed, so the
	// next provider serves; commit (the default) waits.
	for _, tc := range []struct {
		name, model, step string
		timer             time.Duration
	}{
		{"slow first byte", "tts-el-idle", "stream_idle_timeout", 2 * time.Second},
		{"no first byte within the gate's timeout", "tts-el-gate", "gate_timeout", 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := gwtest.New(t, speechConfig, "oa", "el")
			if err := h.Ups["el"].SetFault("eleven_flash_v2_5", "slow-first-token=30s"); err != nil {
				t.Fatal(err)
			}
			done := h.AsyncCall("/v1/audio/speech", "application/json", speechBody(tc.model, "alloy", "mp3"))
			h.WaitUpstreamTimers(1) // the fake holds the audio back
			testkit.Eventually(t, func() bool { return slices.Contains(h.Armed.Armed(), tc.timer) }, "the gateway's timer armed")
			h.Clock.Advance(tc.timer)
			r := testkit.Recv(t, done, "the speech answer")
			if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "el:"+tc.step+" -> oa:ok" || r.Body != speechAudio {
				t.Fatalf("status %d path %q: %d bytes", r.Status, r.Header.Get("X-Hopgate-Path"), len(r.Body))
			}
		})
	}
	t.Run("cut mid-audio", func(t *testing.T) {
		h := gwtest.New(t, speechConfig, "oa", "el")
		if err := h.Ups["el"].SetFault("eleven_flash_v2_5", "cut=4"); err != nil {
			t.Fatal(err)
		}
		r, err := h.Call(context.Background(), "/v1/audio/speech", "application/json", speechBody("tts-el", "alloy", "mp3"))
		if !errors.Is(err, io.ErrUnexpectedEOF) || r.Status != 200 || len(r.Body) == 0 || len(r.Body) >= len(speechAudio) {
			t.Fatalf("status %d, %d bytes, err %v: want a broken transfer", r.Status, len(r.Body), err)
		}
		if n := len(h.Ups["oa"].Log()); n != 0 {
			t.Fatalf("failover after commit: oa saw %d requests", n)
		}
	})
}
