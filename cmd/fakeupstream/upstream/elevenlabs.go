package upstream

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// DialectElevenLabs is ElevenLabs' text-to-speech API:
// POST /v1/text-to-speech/{voice_id}[/stream]?output_format=F with
// {"text","model_id","voice_settings"} and the key in xi-api-key. The
// fault is chosen by model_id, as the model field chooses it elsewhere.
const DialectElevenLabs Dialect = "elevenlabs"

var elevenLabsEndpoint = endpoint{method: http.MethodPost, serve: serveElevenLabs}

// elevenLabsVoiceRE: ElevenLabs voice ids are short alphanumeric strings.
var elevenLabsVoiceRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// elevenLabsRoute reads /v1/text-to-speech/{voice_id}[/stream].
func elevenLabsRoute(esc string) target {
	t := target{dialect: DialectElevenLabs}
	rest := strings.TrimPrefix(esc, "/v1/text-to-speech/")
	voice, tail, _ := strings.Cut(rest, "/")
	if tail == "" || tail == "stream" {
		t.ep, t.found = elevenLabsEndpoint, true
		t.stream = tail == "stream"
		t.voice = unescapeSegment(voice)
	}
	return t
}

// elevenLabsContentTypes is the Content-Type of each output_format family
// the fake serves; another format is ElevenLabs' 422.
var elevenLabsContentTypes = map[string]string{
	"mp3_44100_128": "audio/mpeg", "mp3_44100_64": "audio/mpeg", "mp3_22050_32": "audio/mpeg",
	"opus_48000_128": "audio/opus", "opus_48000_64": "audio/opus",
	"pcm_16000": "audio/pcm", "pcm_22050": "audio/pcm", "pcm_24000": "audio/pcm", "pcm_44100": "audio/pcm",
}

// parseElevenLabs reads a text-to-speech body: text is the speech input,
// model_id the model (and its fault).
func parseElevenLabs(body []byte) (parsed, error) {
	var b struct {
		Text    *string `json:"text"`
		ModelID string  `json:"model_id"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return parsed{}, fmt.Errorf("request body is not valid JSON: %v", err)
	}
	if b.Text == nil {
		return parsed{}, fmt.Errorf("field required: text")
	}
	return parsed{Model: b.ModelID, Inputs: []string{*b.Text}}, nil
}

// elevenLabsAuthorized checks xi-api-key against Options.APIKey (when
// set): ElevenLabs answers a wrong key 401 invalid_api_key.
func (ex *exchange) elevenLabsAuthorized() bool {
	if k := ex.s.opts.APIKey; k != "" && ex.r.Header.Get("Xi-Api-Key") != k {
		writeElevenLabsError(ex.w, http.StatusUnauthorized, "invalid_api_key", "Invalid API key")
		return false
	}
	return true
}

// elevenLabsStatus is a status fault in ElevenLabs' words: 429
// system_busy (or error=too_many_concurrent_requests), 5xx
// internal_server_error, others by status.
func (ex *exchange) elevenLabsStatus(status int) {
	word, msg := "internal_server_error", "An internal server error occurred."
	switch {
	case status == http.StatusTooManyRequests:
		word, msg = "system_busy", "We're experiencing a high volume of requests. Please try again later."
		if ex.fault.ErrorType != "" {
			word, msg = ex.fault.ErrorType, "Too many concurrent requests for your subscription."
		}
	case status == http.StatusUnauthorized:
		word, msg = "quota_exceeded", "This request exceeds your quota."
	case status < 500:
		word, msg = "invalid_request", "fakeupstream: status "+itoa(status)
	}
	writeElevenLabsError(ex.w, status, word, msg)
}

// writeElevenLabsError writes {"detail":{"status","message"}}.
func writeElevenLabsError(w http.ResponseWriter, status int, word, msg string) {
	writeBody(w, status, "application/json", elevenLabsErrorJSON(word, msg))
}

func elevenLabsErrorJSON(word, msg string) []byte {
	return mustJSON(map[string]any{"detail": map[string]string{"status": word, "message": msg}})
}

// serveElevenLabs answers audio in the requested output_format (a 422
// validation error for another), applying the fault as every body does:
// error-body is a 200 JSON detail, cut a body that dies half-way,
// slow-first-token headers at once and the audio later.
func serveElevenLabs(ex *exchange) {
	if !elevenLabsVoiceRE.MatchString(ex.tgt.voice) {
		writeElevenLabsError(ex.w, http.StatusNotFound, "voice_not_found", "A voice with the voice_id "+ex.tgt.voice+" was not found.")
		return
	}
	format := ex.r.URL.Query().Get("output_format")
	if format == "" {
		format = "mp3_44100_128" // ElevenLabs' default
	}
	ct, ok := elevenLabsContentTypes[format]
	if !ok {
		writeBody(ex.w, http.StatusUnprocessableEntity, "application/json", mustJSON(map[string]any{"detail": []map[string]any{{
			"loc": []string{"query", "output_format"}, "msg": "invalid output_format " + format, "type": "value_error",
		}}}))
		return
	}
	input := ""
	if len(ex.req.Inputs) > 0 {
		input = ex.req.Inputs[0]
	}
	ex.body(ct, SpeechAudio(input, ex.fault.Tokens))
}
