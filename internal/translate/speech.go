package translate

import (
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/hopgate/hopgate/internal/jsonscan"
)

// Speech is what an OpenAI /v1/audio/speech body says that a walk across
// speech providers needs (DESIGN.md §15): the voice and the formats pick
// or skip a chain entry; input, speed and instructions go to the provider.
type Speech struct {
	Input string
	// Voice is the OpenAI voice name ("alloy"); "" when the body names a
	// custom voice object, which only OpenAI resolves.
	Voice string
	// Format is response_format, "mp3" when absent (OpenAI's default).
	Format string
	// StreamFormat is stream_format ("audio", "sse"), "" when absent.
	StreamFormat string
	Speed        float64 // 0 when absent
	Instructions bool    // the body has instructions (no ElevenLabs field)
}

// ParseSpeech reads an OpenAI speech request body. Its error is an *Error
// naming the field (a client error).
func ParseSpeech(body []byte) (Speech, error) {
	var b struct {
		Input          *string         `json:"input"`
		Voice          json.RawMessage `json:"voice"`
		ResponseFormat string          `json:"response_format"`
		StreamFormat   string          `json:"stream_format"`
		Speed          *float64        `json:"speed"`
		Instructions   string          `json:"instructions"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return Speech{}, invalid(CodeInvalidRequest, "", "the speech request body is not a valid JSON object: "+err.Error())
	}
	s := Speech{Format: b.ResponseFormat, StreamFormat: b.StreamFormat, Instructions: b.Instructions != ""}
	if b.Input == nil || *b.Input == "" {
		return Speech{}, invalid(CodeInvalidRequest, "input", "input is required: the text to speak")
	}
	s.Input = *b.Input
	if len(b.Voice) > 0 && b.Voice[0] == '"' {
		_ = json.Unmarshal(b.Voice, &s.Voice)
	} else if isNull(b.Voice) {
		return Speech{}, invalid(CodeInvalidRequest, "voice", "voice is required")
	}
	if s.Format == "" {
		s.Format = "mp3"
	}
	if b.Speed != nil {
		s.Speed = *b.Speed
	}
	return s, nil
}

// ElevenLabs output_format of each OpenAI response_format it can produce:
// the rest (aac, flac, wav) have no ElevenLabs equivalent at the same
// container, so such a request skips the entry.
var elevenLabsFormats = map[string]string{
	"mp3":  "mp3_44100_128",
	"opus": "opus_48000_128",
	"pcm":  "pcm_24000", // OpenAI's pcm is 24 kHz 16-bit mono, as is this
}

// ElevenLabs' voice_settings.speed range.
const (
	elevenLabsMinSpeed = 0.7
	elevenLabsMaxSpeed = 1.2
)

// ElevenLabsUnsupported names the field of s an ElevenLabs entry cannot
// serve ("" when it can): a voice not in voices (or a custom voice
// object), a response_format with no output_format, an SSE stream_format,
// a speed outside ElevenLabs' range. The walk skips such an entry.
func ElevenLabsUnsupported(s Speech, voices map[string]string) (param, why string) {
	switch {
	case s.Voice == "":
		return "voice", "a custom voice object is served by OpenAI only"
	case voices[s.Voice] == "":
		return "voice", "voice " + quote(s.Voice) + " has no voice id on this channel"
	case elevenLabsFormats[s.Format] == "":
		return "response_format", "response_format " + quote(s.Format) + " has no ElevenLabs output_format (mp3, opus and pcm do)"
	case s.StreamFormat != "" && s.StreamFormat != "audio":
		return "stream_format", "stream_format " + quote(s.StreamFormat) + " is served by OpenAI only"
	case s.Speed != 0 && (s.Speed < elevenLabsMinSpeed || s.Speed > elevenLabsMaxSpeed):
		return "speed", "speed outside ElevenLabs' range 0.7-1.2"
	}
	return "", ""
}

// ElevenLabsOutputFormat is the output_format query value of s.
func ElevenLabsOutputFormat(s Speech) string { return elevenLabsFormats[s.Format] }

func quote(s string) string { return string(jsonscan.AppendQuote(nil, s)) }

// SpeechToElevenLabs is the body of ElevenLabs' text-to-speech stream
// request for s: {"text","model_id"} and voice_settings.speed when the
// client set one; instructions have no ElevenLabs field and are named in
// dropped (the hop's span records them).
func SpeechToElevenLabs(s Speech, modelID string) (body []byte, dropped []string) {
	b := make([]byte, 0, len(s.Input)+len(modelID)+64)
	b = append(b, `{"text":`...)
	b = jsonscan.AppendQuote(b, s.Input)
	b = append(b, `,"model_id":`...)
	b = jsonscan.AppendQuote(b, modelID)
	if s.Speed != 0 {
		b = append(b, `,"voice_settings":{"speed":`...)
		sp, _ := json.Marshal(s.Speed)
		b = append(b, sp...)
		b = append(b, '}')
	}
	b = append(b, '}')
	if s.Instructions {
		dropped = append(dropped, "instructions")
	}
	return b, dropped
}

// elevenLabsError reads ElevenLabs' error bodies: {"detail":{"status",
// "message"}} (its own errors: system_busy, quota_exceeded, …) or
// {"detail":[{"loc","msg","type"}]} (a request that fails validation).
type elevenLabsError struct {
	Detail json.RawMessage `json:"detail"`
}

// ElevenLabsError returns the status word and message of an ElevenLabs
// error body; ok is false when the body is not one.
func ElevenLabsError(body []byte) (status, msg string, ok bool) {
	var e elevenLabsError
	if json.Unmarshal(body, &e) != nil || isNull(e.Detail) {
		return "", "", false
	}
	switch e.Detail[0] {
	case '{':
		var d struct {
			Status  string `json:"status"`
			Message string `json:"message"`
		}
		if json.Unmarshal(e.Detail, &d) != nil {
			return "", "", false
		}
		return d.Status, d.Message, d.Status != "" || d.Message != ""
	case '[':
		var ds []struct {
			Loc  []any  `json:"loc"`
			Msg  string `json:"msg"`
			Type string `json:"type"`
		}
		if json.Unmarshal(e.Detail, &ds) != nil || len(ds) == 0 {
			return "", "", false
		}
		parts := make([]string, 0, len(ds))
		for _, d := range ds {
			parts = append(parts, d.Msg)
		}
		return ds[0].Type, strings.Join(parts, "; "), true
	case '"':
		var s string
		_ = json.Unmarshal(e.Detail, &s)
		return "", s, s != ""
	}
	return "", "", false
}

// ElevenLabsErrorToOpenAI renders an ElevenLabs error body in the OpenAI
// shape {"error":{"message","type","code","param"}} (the code is
// ElevenLabs' status word); the caller keeps the upstream status.
func ElevenLabsErrorToOpenAI(status int, body []byte) []byte {
	code, msg, ok := ElevenLabsError(body)
	if !ok {
		msg = bodyText(status, body)
	}
	if len(msg) > maxErrorMessage {
		n := maxErrorMessage
		for n > 0 && !utf8.RuneStart(msg[n]) {
			n-- // a cut at a rune boundary: the body must stay valid UTF-8
		}
		msg = msg[:n]
	}
	if msg == "" {
		msg = code
	}
	return appendChatErrorJSON(nil, "invalid_request_error", code, msg)
}
