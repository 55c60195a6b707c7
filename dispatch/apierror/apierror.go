package apierror

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/hopgate/hopgate/internal/translate"
)

// Codes produced by hopgate (docs/errors.md is the client-facing reference).
const (
	CodeInvalidRequest        = "invalid_request"
	CodeInvalidAPIKey         = "invalid_api_key"
	CodeModelNotFound         = "model_not_found"
	CodeOperationNotSupported = "operation_not_supported"
	CodeRequestTooLarge       = "request_too_large"
	CodeMethodNotAllowed      = "method_not_allowed"
	CodeAllChannelsFailed     = "all_channels_failed"
	CodeEngineOverloaded      = "engine_overloaded"
	CodeStreamInterrupted     = "upstream_stream_interrupted"
	CodeShuttingDown          = "gateway_shutting_down"
	CodeNotFound              = "not_found"
)

// Error is one hopgate-produced error reply.
type Error struct {
	Status     int
	Type       string // OpenAI error type: invalid_request_error, authentication_error, server_error…
	Code       string
	Message    string
	Param      string
	RetryAfter time.Duration // sets Retry-After when > 0
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

type body struct {
	Error     detail `json:"error"`
	RequestID string `json:"request_id,omitempty"`
}

type detail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Code    string  `json:"code"`
	Param   *string `json:"param"`
}

// JSON renders the error body.
func (e *Error) JSON(requestID string) []byte {
	d := detail{Message: e.Message, Type: e.Type, Code: e.Code}
	if e.Param != "" {
		p := e.Param
		d.Param = &p
	}
	b, _ := json.Marshal(body{Error: d, RequestID: requestID})
	return b
}

// Write sends the error as the whole response.
func Write(w http.ResponseWriter, requestID string, e *Error) {
	e.write(w, e.JSON(requestID))
}

// write sends body with e's status, Retry-After (rounded up to whole
// seconds) and the headers every error reply carries.
func (e *Error) write(w http.ResponseWriter, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if e.RetryAfter > 0 {
		secs := int((e.RetryAfter + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.Itoa(secs))
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(body, '\n'))
}

// StreamFrame renders the error as one SSE frame, the in-band form used once a
// stream has been committed and a status can no longer be sent.
func StreamFrame(requestID string, e *Error) []byte {
	b := make([]byte, 0, 256)
	b = append(b, "data: "...)
	b = append(b, e.JSON(requestID)...)
	b = append(b, "\n\n"...)
	return b
}

// Constructors for the codes of DESIGN.md §3.

func InvalidRequest(msg, param string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: CodeInvalidRequest, Message: msg, Param: param}
}

func InvalidAPIKey(msg string) *Error {
	return &Error{Status: http.StatusUnauthorized, Type: "authentication_error", Code: CodeInvalidAPIKey, Message: msg}
}

func ModelNotFound(msg string) *Error {
	return &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Code: CodeModelNotFound, Message: msg, Param: "model"}
}

func OperationNotSupported(msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: CodeOperationNotSupported, Message: msg, Param: "model"}
}

func RequestTooLarge(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: CodeRequestTooLarge,
		Message: "request body exceeds the limit of " + strconv.FormatInt(limit, 10) + " bytes"}
}

func MethodNotAllowed(method string) *Error {
	return &Error{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Code: CodeMethodNotAllowed,
		Message: "method " + method + " is not allowed on this endpoint"}
}

func NotFound(path string) *Error {
	return &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Code: CodeNotFound, Message: "no such endpoint: " + path}
}

// AllChannelsFailed is the exhaustion reply; status is 502, or the upstream
// status every hop shared.
func AllChannelsFailed(status int, path string) *Error {
	return &Error{Status: status, Type: "server_error", Code: CodeAllChannelsFailed,
		Message: "every channel of the chain failed: " + path}
}

func EngineOverloaded(msg string, retryAfter time.Duration) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: CodeEngineOverloaded, Message: msg, RetryAfter: retryAfter}
}

func StreamInterrupted(msg string) *Error {
	return &Error{Status: http.StatusBadGateway, Type: "server_error", Code: CodeStreamInterrupted, Message: msg}
}

// ShuttingDown is the in-band error of a committed stream cut because the
// gateway is shutting down (a drain that ran out of time): retryable, on
// another replica.
func ShuttingDown(msg string) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: CodeShuttingDown, Message: msg}
}

// AnthropicType is e's error type in Anthropic's vocabulary, the one
// Anthropic's API answers with e's status: clients of POST /v1/messages
// (the Anthropic SDKs) switch on it. Upstream errors translated for those
// clients use the same mapping.
func (e *Error) AnthropicType() string { return translate.AnthropicErrorType(e.Status) }

type anBody struct {
	Type      string   `json:"type"`
	Error     anDetail `json:"error"`
	RequestID string   `json:"request_id,omitempty"`
}

type anDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// AnthropicJSON renders the error in Anthropic's shape, hopgate's code
// leading the message (Anthropic's error object has no code field).
func (e *Error) AnthropicJSON(requestID string) []byte {
	b, _ := json.Marshal(anBody{Type: "error", Error: anDetail{Type: e.AnthropicType(), Message: e.Code + ": " + e.Message}, RequestID: requestID})
	return b
}

// WriteAnthropic sends the error as the whole response in Anthropic's
// shape (POST /v1/messages), with the same status and Retry-After as Write.
func WriteAnthropic(w http.ResponseWriter, requestID string, e *Error) {
	e.write(w, e.AnthropicJSON(requestID))
}
