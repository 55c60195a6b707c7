package classify

import (
	"strconv"
	"time"
)

// Kind says how a hop failed. Its String is the label that names the hop's
// fate on the failover path ("a:header_timeout -> b:ok") and in error.type.
type Kind uint8

// Hop failure kinds. KindStatus is an upstream HTTP status; every other
// kind happened without a usable status (before headers) or despite a 200
// (inside the body or stream).
const (
	KindStatus        Kind = iota // an upstream error status (label: the number)
	KindHeaderTimeout             // L4: no response headers in time
	KindGateTimeout               // L3: nothing decisive in time (on_timeout: failover)
	KindIdleTimeout               // the body stalled past stream_idle_timeout (before commit)
	KindDeadline                  // the chain deadline ended the hop
	KindCanceled                  // the client went away
	KindRefused                   // connection refused
	KindReset                     // connection reset, broken pipe, EOF before headers
	KindDNS                       // name resolution failed
	KindTLS                       // TLS handshake failed
	KindNetTimeout                // a dial or read timed out
	KindConnect                   // any other transport failure
	KindRequest                   // the upstream request could not be built
	KindRewrite                   // the client body could not be rewritten
	KindStreamError               // an in-band error frame before commit
	KindStreamEOF                 // the stream ended before anything decisive
	KindFrameTooLarge             // one SSE frame exceeded the bound
	KindGateOverflow              // the gate would hold more than its bound
	KindErrorBody                 // a 200 whose body is an error object
	KindBadJSON                   // a 200 whose body is not JSON
	KindShortBody                 // a body shorter than its Content-Length
	KindBodyError                 // the body could not be read
	KindCut                       // a committed stream or body died (interrupted)
	KindNotAStream                // a continuation answered without SSE
	KindDiverged                  // a replayed continuation differs from what was delivered
	KindStalled                   // a continuation stalled
	KindCredential                // the channel's credential could not be obtained (token refresh, AWS chain)
	KindUnsupported               // the request cannot be expressed for this channel's family (a client error)
	KindBudget                    // buffering the answer would cross the process's buffer budget
	KindShutdown                  // the gateway shut down under a committed stream (a drain that ran out of time)
	kindCount
)

var kindLabels = [kindCount]string{
	KindStatus:        "status",
	KindHeaderTimeout: "header_timeout",
	KindGateTimeout:   "gate_timeout",
	KindIdleTimeout:   "stream_idle_timeout",
	KindDeadline:      "deadline",
	KindCanceled:      "canceled",
	KindRefused:       "refused",
	KindReset:         "reset",
	KindDNS:           "dns",
	KindTLS:           "tls",
	KindNetTimeout:    "timeout",
	KindConnect:       "connect_error",
	KindRequest:       "request_error",
	KindRewrite:       "rewrite_error",
	KindStreamError:   "stream_error",
	KindStreamEOF:     "stream_eof",
	KindFrameTooLarge: "frame_too_large",
	KindGateOverflow:  "gate_overflow",
	KindErrorBody:     "error_body",
	KindBadJSON:       "bad_json",
	KindShortBody:     "short_body",
	KindBodyError:     "body_error",
	KindCut:           "cut",
	KindNotAStream:    "not_a_stream",
	KindDiverged:      "diverged",
	KindStalled:       "stalled",
	KindCredential:    "credential_error",
	KindUnsupported:   "unsupported_request",
	KindBudget:        "buffer_budget",
	KindShutdown:      "gateway_shutting_down",
}

// String is the kind's label.
func (k Kind) String() string {
	if k < kindCount {
		return kindLabels[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// HopError is why one hop produced no answer the client can have: its
// kind, the upstream status and Retry-After when there was one, and the
// cause (a transport error, a read error), kept for traces and logs.
type HopError struct {
	Kind       Kind
	Status     int           // the upstream response status, 0 when none arrived
	RetryAfter time.Duration // the upstream's Retry-After (429/503), 0 when none
	// Code is the upstream error's code when a final answer named one
	// (e.g. "context_length_exceeded").
	Code string
	// Body and ContentType: a final answer's body and media type, passed
	// to the client unchanged.
	Body        []byte
	ContentType string
	Cause       error
	label       string // cached Label of a KindStatus error
	// retry: the provider's own words make a status that reads final
	// retryable (NewBedrockStatus).
	retry bool
}

// NewStatus is the failure of an upstream answer with status.
func NewStatus(status int) *HopError {
	return &HopError{Kind: KindStatus, Status: status, label: strconv.Itoa(status)}
}

// NewBedrockStatus is the failure of a Bedrock answer with status naming
// exception, classed by BedrockStatus; its label is still the status.
func NewBedrockStatus(status int, exception string) *HopError {
	e := NewStatus(status)
	e.retry = BedrockStatus(status, exception) == Retryable
	return e
}

// Error says what happened.
func (e *HopError) Error() string {
	msg := "hop failed: " + e.Label()
	if e.Cause != nil {
		msg += ": " + e.Cause.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *HopError) Unwrap() error { return e.Cause }

// Label names the hop's fate on the failover path and in error.type: the
// status number for KindStatus, else the kind.
func (e *HopError) Label() string {
	if e.Kind == KindStatus {
		if e.label == "" {
			e.label = strconv.Itoa(e.Status)
		}
		return e.label
	}
	return e.Kind.String()
}

// Class is the failover meaning of the error (DESIGN.md §3): a status by
// the status table (or its family's, NewBedrockStatus), a client's
// departure Canceled, everything else the channel failing (Retryable).
func (e *HopError) Class() Class {
	switch e.Kind {
	case KindStatus:
		if e.retry {
			return Retryable
		}
		return Status(e.Status)
	case KindCanceled:
		return Canceled
	case KindUnsupported:
		// The client's request is wrong for this family (an image URL for
		// a base64-only cloud): no other channel makes it right.
		return Final
	}
	return Retryable
}

// Timeout reports a hop that cost the caller a full wait (header timeout,
// gate timeout, a stall, a dial or TLS handshake that timed out): the
// channel is never retried after it; the next entry of the chain is tried
// instead (DESIGN.md §2 L2: "after any timeout").
func (e *HopError) Timeout() bool {
	switch e.Kind {
	case KindHeaderTimeout, KindGateTimeout, KindIdleTimeout, KindStalled, KindNetTimeout:
		return true
	}
	return false
}

// ChainDeadline reports a hop ended by the chain deadline: the caller's
// budget ran out, which says nothing about the channel (no breaker effect).
func (e *HopError) ChainDeadline() bool { return e.Kind == KindDeadline }

// AboutChannel reports whether the hop's result is a verdict on its channel,
// for the breaker and the early-warning detector alike. Final answers (the
// request is at fault), cancellations, the chain deadline (the caller's
// budget: a later hop only gets what earlier ones left), the process's
// own buffer budget (hopgate is overloaded, not the channel) and its
// shutdown are not.
func (e *HopError) AboutChannel() bool {
	return e.Class() == Retryable && e.Kind != KindDeadline && e.Kind != KindBudget && e.Kind != KindShutdown
}

// ContextLength reports a final answer saying the request does not fit the
// model's context (the walk may move to the model's context_fallback).
func (e *HopError) ContextLength() bool {
	return e.Kind == KindStatus && e.Code == "context_length_exceeded"
}
