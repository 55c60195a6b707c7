package telemetry

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
)

// The attributes of the request path's spans (DESIGN.md §5), built from
// what the engine reported. Both ways of recording spans use these: the
// compact record builds them only for a trace that is kept (record.go),
// spans recorded as SDK spans from the start build them as they go. Each
// appends to a and returns it; the callers size a so nothing grows.

// appendSkipAttrs is a "breaker skip" span's attributes.
func appendSkipAttrs(a []attribute.KeyValue, k *Skip) []attribute.KeyValue {
	a = append(a,
		attribute.String(AttrChannel, k.Channel),
		attribute.String(AttrChannelRegion, k.ChannelRegion),
		attribute.String(AttrBreakerState, k.State))
	if !k.ReopenAt.IsZero() {
		a = append(a, attribute.String(AttrBreakerReopenAt, k.ReopenAt.UTC().Format(time.RFC3339Nano)))
	}
	if k.Forced {
		a = append(a, attribute.Bool(AttrBreakerForced, true))
	}
	return a
}

// forcedSkipEvent is the event of a skip whose channel is tried anyway.
const forcedSkipEvent = "every channel of the chain is open: trying the one whose cooldown ends first"

// appendBackoffAttrs is a "retry backoff" span's attributes.
func appendBackoffAttrs(a []attribute.KeyValue, channel string, d time.Duration) []attribute.KeyValue {
	return append(a, attribute.String(AttrChannel, channel), attribute.Int64(AttrBackoffMillis, d.Milliseconds()))
}

// appendDegradedAttrs is a "degraded reply" span's attributes.
func appendDegradedAttrs(a []attribute.KeyValue, d *Degraded) []attribute.KeyValue {
	return append(a,
		attribute.String(AttrDegradedReason, d.Reason),
		attribute.String(AttrModel, d.Model),
		attribute.String(AttrDegradedMode, d.Mode),
		attribute.String(AttrErrorCode, d.Code))
}

// appendCallEndAttrs is what the dispatch span records when it ends.
func appendCallEndAttrs(a []attribute.KeyValue, e *CallEnd) []attribute.KeyValue {
	a = append(a,
		attribute.String(AttrModel, e.Model),
		attribute.String(AttrChain, e.Chain),
		attribute.Int(AttrHops, e.Hops),
		attribute.String(AttrOutcome, e.Outcome),
		attribute.String(AttrFailoverPath, e.Path))
	if e.Tenant != "" {
		a = append(a, attribute.String(AttrTenant, e.Tenant))
	}
	if e.ServedModel != "" {
		a = append(a, attribute.String(AttrServedModel, e.ServedModel))
	}
	return a
}

// callFailed reports whether the dispatch span of outcome is an error.
func callFailed(outcome string) bool { return outcome != OutcomeOK && outcome != OutcomeFailoverOK }

// appendHopStartAttrs is what is known of a hop before it is sent; u is
// its URL's attributes (Spans.urlAttrs).
func appendHopStartAttrs(a []attribute.KeyValue, h *HopStart, u []attribute.KeyValue) []attribute.KeyValue {
	a = append(a,
		attribute.String(AttrGenAIOperation, h.Operation),
		attribute.String(AttrGenAIProvider, h.Provider),
		attribute.String(AttrGenAIRequestModel, h.RequestModel),
		attribute.String(AttrChannel, h.Channel),
		attribute.String(AttrChannelRegion, h.ChannelRegion),
		attribute.Int(AttrHopIndex, h.Index))
	switch {
	case h.Continuation != "":
		a = append(a,
			attribute.String(AttrContinuationMode, h.Continuation),
			attribute.Int(AttrResumeDelivered, h.Delivered))
	default:
		a = append(a, attribute.String("http.request.method", "POST"))
		if h.Retry > 0 {
			a = append(a, attribute.Int(AttrHopRetry, h.Retry))
		}
	}
	return append(a, u...)
}

// appendDroppedAttrs is what a cross-family hop left out of the request.
func appendDroppedAttrs(a []attribute.KeyValue, fields, betas []string) []attribute.KeyValue {
	if len(fields) > 0 {
		a = append(a, attribute.StringSlice(AttrTranslationDropped, fields))
	}
	if len(betas) > 0 {
		a = append(a, attribute.StringSlice(AttrBetaDropped, betas))
	}
	return a
}

// appendHopEndAttrs is what a hop records when it ends.
func appendHopEndAttrs(a []attribute.KeyValue, e *HopEnd) []attribute.KeyValue {
	a = append(a, attribute.String(AttrHopOutcome, e.Outcome))
	if e.Status > 0 {
		a = append(a, attribute.Int("http.response.status_code", e.Status))
	}
	if e.ErrorType != "" {
		a = append(a, attribute.String(AttrErrorType, e.ErrorType))
	}
	if e.RetryAfter > 0 {
		a = append(a, attribute.Float64(AttrRetryAfter, e.RetryAfter.Seconds()))
	}
	if e.ResponseModel != "" {
		a = append(a, attribute.String(AttrGenAIResponseMdl, e.ResponseModel))
	}
	if e.Usage {
		a = append(a,
			attribute.Int64(AttrGenAIInputTokens, e.InputTokens),
			attribute.Int64(AttrGenAIOutputTokens, e.OutputTokens))
	}
	if e.Dropped > 0 {
		a = append(a, attribute.Int(AttrStreamDropped, e.Dropped))
	}
	return a
}

// appendGateAttrs is a "stream gate" span's decision and what it held.
func appendGateAttrs(a []attribute.KeyValue, decision string, frames, bytes int) []attribute.KeyValue {
	return append(a,
		attribute.String(AttrGateDecision, decision),
		attribute.Int(AttrGateFramesHeld, frames),
		attribute.Int(AttrGateBytesHeld, bytes))
}

// gateFailed reports whether a gate decision is an error.
func gateFailed(decision string) bool {
	return decision != GateCommitContent && decision != GateCommitTimeout && decision != GateCommitSession
}

// abortedEvent is the event of a binary answer cut after commit.
func abortedEvent(why string) string { return "client connection aborted: " + why }
