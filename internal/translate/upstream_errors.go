package translate

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hopgate/hopgate/internal/jsonscan"
)

// errBody reads every error body shape met upstream: Anthropic
// {"type":"error","error":{"type","message"}}, OpenAI and Azure
// {"error":{"message","type","code","param"}}, Google's
// {"error":{"code":429,"message","status"}}, Bedrock's {"message"} (or
// {"Message"}: encoding/json matches keys case-insensitively).
type errBody struct {
	Error   json.RawMessage `json:"error"`
	Message string          `json:"message"`
}

type errObject struct {
	Type    string          `json:"type"`
	Message string          `json:"message"`
	Code    json.RawMessage `json:"code"`
	Param   *string         `json:"param"`
}

// parseError returns the error's message, type and code (a string code, or
// a number as written); ok is false when the body is not a JSON error.
func parseError(body []byte) (msg, typ, code string, param *string, ok bool) {
	var b errBody
	if json.Unmarshal(body, &b) != nil {
		return "", "", "", nil, false
	}
	msg = b.Message
	if !isNull(b.Error) {
		var o errObject
		if json.Unmarshal(b.Error, &o) == nil {
			msg, typ, param = o.Message, o.Type, o.Param
			var s string
			if json.Unmarshal(o.Code, &s) == nil {
				code = s
			} else if !isNull(o.Code) {
				code = string(bytes.TrimSpace(o.Code))
			}
		} else {
			_ = json.Unmarshal(b.Error, &msg) // "error": "text"
		}
	}
	return msg, typ, code, param, msg != "" || typ != "" || code != ""
}

// ContextLengthExceeded reports an upstream error body that says the prompt
// does not fit the model's context window, in any family's wording:
// OpenAI's code context_length_exceeded, Anthropic's "prompt is too long:
// N tokens > M maximum" and "input length and `max_tokens` exceed context
// limit", Bedrock's "Input is too long for requested model" (or Anthropic's
// text inside a ValidationException). DESIGN §3 makes these final, or a
// context_fallback.
func ContextLengthExceeded(body []byte) bool {
	msg, _, code, _, ok := parseError(body)
	if !ok {
		return false
	}
	if code == "context_length_exceeded" {
		return true
	}
	m := strings.ToLower(msg)
	for _, w := range contextWordings {
		if strings.Contains(m, w) {
			return true
		}
	}
	return false
}

var contextWordings = []string{
	"prompt is too long",
	"input is too long",
	"exceed context limit",
	"maximum context length",
	"context_length_exceeded",
	"model_context_window_exceeded",
}

// AnthropicErrorType is the Anthropic error type of an HTTP status: the
// type Anthropic's API answers with that status.
func AnthropicErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusPaymentRequired:
		return "billing_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusRequestTimeout || status == http.StatusGatewayTimeout:
		return "timeout_error"
	case status == http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusServiceUnavailable || status == 529:
		return "overloaded_error"
	case status >= 400 && status < 500:
		return "invalid_request_error"
	default:
		return "api_error"
	}
}

// openAIType is the OpenAI error "type" for an Anthropic error type.
func openAIType(anType string) string {
	switch anType {
	case "invalid_request_error", "not_found_error", "request_too_large":
		return "invalid_request_error"
	case "authentication_error":
		return "authentication_error"
	case "permission_error":
		return "permission_error"
	case "billing_error":
		return "insufficient_quota"
	case "rate_limit_error":
		return "rate_limit_error"
	default: // api_error, overloaded_error, timeout_error, unknown
		return "server_error"
	}
}

// anthropicTypeForOpenAI is the Anthropic error type of an OpenAI error:
// its code when it names the cause, else its HTTP status, else (in-band,
// no status) its type.
func anthropicTypeForOpenAI(status int, typ, code string) string {
	switch code {
	case "context_length_exceeded", "content_filter", "invalid_request":
		return "invalid_request_error"
	case "insufficient_quota":
		return "billing_error"
	case "rate_limit_exceeded":
		return "rate_limit_error"
	case "invalid_api_key":
		return "authentication_error"
	case "model_not_found":
		return "not_found_error"
	case "engine_overloaded", "overloaded_error":
		return "overloaded_error"
	}
	if status >= 400 {
		if status == http.StatusTooManyRequests && typ == "insufficient_quota" {
			return "billing_error"
		}
		return AnthropicErrorType(status)
	}
	switch typ {
	case "invalid_request_error":
		return "invalid_request_error"
	case "insufficient_quota":
		return "billing_error"
	case "rate_limit_error", "requests", "tokens":
		return "rate_limit_error"
	case "authentication_error":
		return "authentication_error"
	}
	return "api_error"
}

// AnthropicErrorToOpenAI renders an Anthropic-family error body (Anthropic,
// Bedrock, Vertex) in the OpenAI shape {"error":{"message","type","code",
// "param"}}; the caller keeps the upstream status. The code is
// context_length_exceeded for a prompt too long (so context_fallback works
// across families), else Anthropic's error type.
func AnthropicErrorToOpenAI(status int, body []byte) []byte {
	msg, typ, _, _, ok := parseError(body)
	if !ok {
		msg = bodyText(status, body)
	}
	if typ == "" {
		typ = AnthropicErrorType(status)
	}
	code := typ
	if ContextLengthExceeded(body) {
		code = "context_length_exceeded"
	}
	return appendChatErrorJSON(nil, openAIType(typ), code, msg)
}

// CloudErrorToAnthropic renders an Anthropic-family cloud's error body
// (Bedrock's REST-JSON {"message"}, Google's {"error":{"code","message",
// "status"}}) in Anthropic's shape, so a Messages client shows its message;
// a body already in Anthropic's shape (Vertex passes the model's errors
// through) is returned as it is. The type is the one Anthropic's API
// answers the status with; the caller keeps the status.
func CloudErrorToAnthropic(status int, body []byte) []byte {
	msg, typ, _, _, ok := parseError(body)
	if ok && typ != "" && bytes.Contains(body, []byte(`"error"`)) && isAnthropicType(typ) {
		return body
	}
	if !ok || msg == "" {
		msg = bodyText(status, body)
	}
	anType := AnthropicErrorType(status)
	if ContextLengthExceeded(body) {
		anType = "invalid_request_error"
	}
	return appendMessagesErrorJSON(nil, anType, msg)
}

// isAnthropicType reports an error type of Anthropic's API.
func isAnthropicType(t string) bool {
	switch t {
	case "invalid_request_error", "authentication_error", "billing_error", "permission_error",
		"not_found_error", "request_too_large", "rate_limit_error", "timeout_error", "api_error", "overloaded_error":
		return true
	}
	return false
}

// OpenAIErrorToAnthropic renders an OpenAI-family error body in Anthropic's
// shape {"type":"error","error":{"type","message"}}; the caller keeps the
// upstream status.
func OpenAIErrorToAnthropic(status int, body []byte) []byte {
	msg, typ, code, _, ok := parseError(body)
	if !ok {
		msg = bodyText(status, body)
	}
	anType := anthropicTypeForOpenAI(status, typ, code)
	if ContextLengthExceeded(body) {
		anType = "invalid_request_error"
	}
	return appendMessagesErrorJSON(nil, anType, msg)
}

// bodyText is the message for a body that is not a JSON error (an HTML
// page from a proxy): its text when short and printable, else the status.
func bodyText(status int, body []byte) string {
	t := strings.TrimSpace(string(body))
	if t == "" || len(t) > maxErrorMessage || !utf8.ValidString(t) || strings.ContainsAny(t, "<>") {
		return "upstream error (HTTP " + strconv.Itoa(status) + ")"
	}
	return t
}

// chatErrorType is the Anthropic type of an OpenAI in-band error frame.
func chatErrorType(data []byte) string {
	_, typ, code, _, _ := parseError(data)
	return anthropicTypeForOpenAI(0, typ, code)
}

func appendChatErrorJSON(dst []byte, typ, code, msg string) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = jsonscan.AppendQuote(dst, msg)
	dst = append(dst, `,"type":`...)
	dst = jsonscan.AppendQuote(dst, typ)
	dst = append(dst, `,"code":`...)
	dst = jsonscan.AppendQuote(dst, code)
	return append(dst, `,"param":null}}`...)
}

func appendMessagesErrorJSON(dst []byte, anType, msg string) []byte {
	dst = append(dst, `{"type":"error","error":{"type":`...)
	dst = jsonscan.AppendQuote(dst, anType)
	dst = append(dst, `,"message":`...)
	dst = jsonscan.AppendQuote(dst, msg)
	return append(dst, "}}"...)
}

// appendChatError is the OpenAI in-band error frame for an Anthropic error
// event of type anType.
func appendChatError(dst []byte, anType, msg string) []byte {
	if anType == "" {
		anType = "api_error"
	}
	if msg == "" {
		msg = "upstream stream error (" + anType + ")"
	}
	dst = append(dst, "data: "...)
	dst = appendChatErrorJSON(dst, openAIType(anType), anType, msg)
	return append(dst, "\n\n"...)
}

// appendMessagesError is the Anthropic error event for an OpenAI in-band
// error.
func appendMessagesError(dst []byte, anType, msg string) []byte {
	if msg == "" {
		msg = "upstream stream error"
	}
	dst = appendEventHead(dst, "error")
	dst = appendMessagesErrorJSON(dst, anType, msg)
	return append(dst, "\n\n"...)
}

// CodeStreamInterrupted is the in-band error code of a committed stream
// that could not be finished (DESIGN §2 "After commit").
const CodeStreamInterrupted = "upstream_stream_interrupted"

// OpenAIInterruptFrame is the OpenAI-dialect in-band interruption:
// data: {"error":{"message":…,"type":"server_error","code":"upstream_stream_interrupted","param":null}}
// followed by the blank line. No [DONE] may follow it.
func OpenAIInterruptFrame(message string) []byte {
	b := append([]byte(nil), "data: "...)
	b = appendChatErrorJSON(b, "server_error", CodeStreamInterrupted, message)
	return append(b, "\n\n"...)
}

// AnthropicInterruptFrame is the Anthropic-dialect in-band interruption:
// event: error with {"type":"error","error":{"type":"api_error","message":…}}.
// Anthropic's error object has no code, so the message starts with
// "upstream_stream_interrupted: " for clients and logs that look for it.
// No message_stop may follow it.
func AnthropicInterruptFrame(message string) []byte {
	b := appendEventHead(nil, "error")
	b = appendMessagesErrorJSON(b, "api_error", CodeStreamInterrupted+": "+message)
	return append(b, "\n\n"...)
}
