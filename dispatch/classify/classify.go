package classify

import (
	"context"
	"errors"
	"net/http"
)

// Class is the failover meaning of one hop's result.
type Class int

const (
	// Success: the hop produced an answer the client can have.
	Success Class = iota
	// Retryable: the channel failed; try the next hop and count a breaker failure.
	Retryable
	// Final: the request itself is at fault (or the provider refused its
	// content); return the upstream answer at once, no breaker effect.
	Final
	// Canceled: the client went away; cancel upstream, no breaker effect.
	Canceled
)

var classNames = [...]string{"success", "retryable", "final", "canceled"}

func (c Class) String() string {
	if c < 0 || int(c) >= len(classNames) {
		return "unknown"
	}
	return classNames[c]
}

// Status classifies an upstream HTTP status code (DESIGN.md §3). code is the
// upstream error code from the body (e.g. "context_length_exceeded"), which
// does not change the class of a 400 — it is final unless the model names a
// context_fallback, a decision the chain walk takes with ErrContextLength.
func Status(status int) Class {
	switch {
	case status >= 200 && status < 300:
		return Success
	}
	switch status {
	case http.StatusRequestTimeout, // 408
		http.StatusConflict,            // 409
		http.StatusTooEarly,            // 425
		http.StatusTooManyRequests,     // 429
		http.StatusInternalServerError, // 500
		http.StatusBadGateway,          // 502
		http.StatusServiceUnavailable,  // 503
		http.StatusGatewayTimeout,      // 504
		529,                            // Anthropic-style "overloaded"
		// Our credential or account is at fault, not the client's request:
		// another channel (another account) may well serve it.
		http.StatusUnauthorized,    // 401
		http.StatusPaymentRequired, // 402
		http.StatusForbidden:       // 403
		return Retryable
	case http.StatusBadRequest, http.StatusNotFound,
		http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return Final
	}
	switch {
	case status >= 500:
		// An unlisted server error is still the server's fault.
		return Retryable
	case status >= 400:
		return Final
	default:
		// 1xx leftovers and 3xx: redirects are never followed (an upstream
		// must not send us to another host), so the hop failed.
		return Retryable
	}
}

// Error classifies a transport-level error of a hop (no usable response):
// connect refused/reset, DNS, TLS, header timeout, body read errors are
// retryable; the client's own cancellation is Canceled. clientCtx is the
// request's context as the client sees it (not the hop's).
func Error(clientCtx context.Context, err error) Class {
	if err == nil {
		return Success
	}
	if clientCtx != nil && clientCtx.Err() != nil && errors.Is(context.Cause(clientCtx), context.Canceled) {
		return Canceled
	}
	return Retryable
}

// RetryAfterStatus reports whether a Retry-After header on this status is a
// promise from the provider about when to come back (DESIGN.md §2 L1).
func RetryAfterStatus(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
}
