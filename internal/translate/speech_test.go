package translate

import (
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"
)

// TestSpeechToElevenLabs (DESIGN.md §15): what an entry can serve, what it
// skips, and the body it sends.
func TestSpeechToElevenLabs(t *testing.T) {
	voices := map[string]string{"alloy": "21m00Tcm4TlvDq8ikWAM"}
	cases := []struct {
		name, body       string
		param            string // the field that skips the entry; "" serves it
		format, wantBody string
		dropped          int
	}{
		// The default response_format is mp3.
		{"default mp3", `{"model":"tts","input":"hi","voice":"alloy"}`, "", "mp3_44100_128", `{"text":"hi","model_id":"eleven_flash_v2_5"}`, 0},
		{"opus", `{"model":"tts","input":"hi","voice":"alloy","response_format":"opus"}`, "", "opus_48000_128", `{"text":"hi","model_id":"eleven_flash_v2_5"}`, 0},
		// pcm: OpenAI's is 24 kHz, so is pcm_24000.
		{"pcm and speed", `{"model":"tts","input":"hi \"you\"","voice":"alloy","response_format":"pcm","speed":1.1}`, "", "pcm_24000", `{"text":"hi \"you\"","model_id":"eleven_flash_v2_5","voice_settings":{"speed":1.1}}`, 0},
		// instructions have no ElevenLabs field: dropped, and said so.
		{"instructions dropped", `{"model":"tts","input":"hi","voice":"alloy","instructions":"whisper"}`, "", "mp3_44100_128", `{"text":"hi","model_id":"eleven_flash_v2_5"}`, 1},
		// An unmapped voice skips the entry: no voice id, no URL.
		{"unmapped voice", `{"model":"tts","input":"hi","voice":"nova"}`, "voice", "", "", 0},
		// A custom voice object is OpenAI's.
		{"voice object", `{"model":"tts","input":"hi","voice":{"id":"voice_123"}}`, "voice", "", "", 0},
		{"wav", `{"model":"tts","input":"hi","voice":"alloy","response_format":"wav"}`, "response_format", "", "", 0},
		{"aac", `{"model":"tts","input":"hi","voice":"alloy","response_format":"aac"}`, "response_format", "", "", 0},
		{"sse", `{"model":"tts","input":"hi","voice":"alloy","stream_format":"sse"}`, "stream_format", "", "", 0},
		// OpenAI takes 0.25-4.0, ElevenLabs 0.7-1.2: 2x would be a final 422 there.
		{"speed 2", `{"model":"tts","input":"hi","voice":"alloy","speed":2}`, "speed", "", "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseSpeech([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			param, why := ElevenLabsUnsupported(s, voices)
			if param != tc.param || (param != "") != (why != "") {
				t.Fatalf("unsupported = %q %q, want %q", param, why, tc.param)
			}
			if param != "" {
				return
			}
			if f := ElevenLabsOutputFormat(s); f != tc.format {
				t.Errorf("output_format = %q, want %q", f, tc.format)
			}
			body, dropped := SpeechToElevenLabs(s, "eleven_flash_v2_5")
			if string(body) != tc.wantBody || len(dropped) != tc.dropped {
				t.Errorf("body = %s dropped %v, want %s", body, dropped, tc.wantBody)
			}
		})
	}
}

// TestParseSpeechErrors: a body no provider can speak is a client error
// naming the field, before any hop.
func TestParseSpeechErrors(t *testing.T) {
	for body, param := range map[string]string{
		`{"model":"tts","voice":"alloy"}`:            "input",
		`{"model":"tts","input":"","voice":"alloy"}`: "input",
		`{"model":"tts","input":"hi"}`:               "voice",
		`{"model":"tts","input":"hi","voice":null}`:  "voice",
		`[1]`: "",
		`{"model":"tts","input":"hi","voice":"alloy"`: "",
	} {
		_, err := ParseSpeech([]byte(body))
		var te *Error
		if !errors.As(err, &te) || te.Param != param || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want an invalid request naming %q", body, err, param)
		}
	}
}

// TestElevenLabsErrorToOpenAI: an ElevenLabs error the client receives
// (a final 400/422) reads as an OpenAI error, with ElevenLabs' words.
func TestElevenLabsErrorToOpenAI(t *testing.T) {
	cases := []struct{ body, code, msg string }{
		{`{"detail":{"status":"voice_not_found","message":"A voice with the voice_id x was not found."}}`, "voice_not_found", "A voice with the voice_id x was not found."},
		{`{"detail":[{"loc":["body","text"],"msg":"field required","type":"value_error.missing"}]}`, "value_error.missing", "field required"},
		{`{"detail":"Not Found"}`, "", "Not Found"},
		{`<html>bad gateway</html>`, "", "upstream error (HTTP 422)"},
	}
	for _, tc := range cases {
		var e struct {
			Error struct{ Message, Type, Code string }
		}
		out := ElevenLabsErrorToOpenAI(422, []byte(tc.body))
		if err := json.Unmarshal(out, &e); err != nil || e.Error.Code != tc.code || e.Error.Message != tc.msg || e.Error.Type != "invalid_request_error" {
			t.Errorf("%s -> %s", tc.body, out)
		}
	}
}

// FuzzElevenLabsError: upstream error bytes never panic the reader, and
// the translated body is always one valid JSON object in UTF-8.
func FuzzElevenLabsError(f *testing.F) {
	for _, s := range []string{`{"detail":{"status":"system_busy","message":"busy"}}`, `{"detail":[{"msg":"x","type":"y"}]}`, `{"detail":"x"}`, `{"detail":7}`, `{"detail":[]}`, ``, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _ = ElevenLabsError(b)
		out := ElevenLabsErrorToOpenAI(500, b)
		if !json.Valid(out) || !utf8.Valid(out) {
			t.Fatalf("%q -> %q", b, out)
		}
	})
}

// FuzzParseSpeech: client bytes never panic the speech parser.
func FuzzParseSpeech(f *testing.F) {
	f.Add([]byte(`{"model":"tts","input":"hi","voice":"alloy","speed":1.1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSpeech(b)
		if err == nil {
			if _, why := ElevenLabsUnsupported(s, map[string]string{"alloy": "x"}); why == "" {
				body, _ := SpeechToElevenLabs(s, "m")
				if !json.Valid(body) {
					t.Fatalf("%q -> %q", b, body)
				}
			}
		}
	})
}
