package apierror

import (
	"net/http"
	"time"
)

// CodeRateLimitExceeded: the tenant is over one of its limits (DESIGN
// §16); nothing was sent upstream. Final for this request: the client
// retries after Retry-After, as OpenAI's clients do on this code.
const CodeRateLimitExceeded = "rate_limit_exceeded"

// RateLimitExceeded is the 429 of a request over a tenant limit; kind is
// the error type, requests or tokens, as OpenAI's API spells it.
func RateLimitExceeded(kind, msg string, retryAfter time.Duration) *Error {
	return &Error{Status: http.StatusTooManyRequests, Type: kind, Code: CodeRateLimitExceeded, Message: msg, RetryAfter: retryAfter}
}
