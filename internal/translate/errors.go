package translate

import (
	"errors"
	"net/http"
)

// Sentinels for the two ways a request translation fails. Both are client
// errors (400): the request never leaves the gateway.
var (
	// ErrInvalid: the request is malformed or wrong for the target (e.g. no
	// max_tokens and no configured default, an image URL for a
	// base64-only channel).
	ErrInvalid = errors.New("translate: invalid request")
	// ErrUnsupported: the request is well-formed but uses a feature the
	// target family cannot express without changing its meaning (n > 1,
	// audio output, a server tool).
	ErrUnsupported = errors.New("translate: unsupported by the target family")
)

// Error codes carried by *Error, in the OpenAI error shape's "code".
const (
	CodeInvalidRequest       = "invalid_request"
	CodeUnsupportedParameter = "unsupported_parameter"
	CodeImageURLNotSupported = "image_url_not_supported"
	CodeMaxTokensRequired    = "max_tokens_required"
)

// Error is a request that cannot be translated. Status is always 400.
type Error struct {
	Status  int
	Code    string
	Param   string // JSON path of the offending field, e.g. messages[2].content[0].image_url
	Message string
	kind    error // ErrInvalid or ErrUnsupported
	// native: only the OpenAI family serves the field (ResponsesNativeOnly).
	native bool
}

func (e *Error) Error() string {
	if e.Param != "" {
		return e.Message + " (" + e.Param + ")"
	}
	return e.Message
}

// Unwrap returns ErrInvalid or ErrUnsupported.
func (e *Error) Unwrap() error { return e.kind }

func invalid(code, param, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: code, Param: param, Message: msg, kind: ErrInvalid}
}

func unsupported(param, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeUnsupportedParameter, Param: param, Message: msg, kind: ErrUnsupported}
}
