package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Refusal is a request the front door answered itself before any walk
// began (package api: a bad request, overload's shed, a wallet's or a
// limit's refusal). It has no dispatch span: its SERVER span carries it.
type Refusal struct {
	Outcome string // hopgate.outcome
	Code    string // hopgate.error.code: the error body's code
	Tenant  string // hopgate.tenant, "" when the refusal came before auth
}

// Refused records a front-door refusal on the SERVER span of ctx, as
// CallSpan.End records a walked request's outcome there.
func (s *Spans) Refused(ctx context.Context, r *Refusal) {
	a := [3]attribute.KeyValue{
		attribute.String(AttrOutcome, r.Outcome),
		attribute.String(AttrErrorCode, r.Code),
	}
	n := 2
	if r.Tenant != "" {
		a[n] = attribute.String(AttrTenant, r.Tenant)
		n++
	}
	trace.SpanFromContext(ctx).SetAttributes(a[:n]...)
}

// WalletDenied records a wallet's refusal of tenant's reservation (hold
// micro-units, for reason insufficient_balance or no_wallet) on the SERVER
// span of ctx, as the event EventWalletDenied.
func (s *Spans) WalletDenied(ctx context.Context, tenant, reason string, hold int64) {
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(attribute.String(AttrTenant, tenant))
	span.AddEvent(EventWalletDenied, trace.WithAttributes(
		attribute.String(AttrWalletReason, reason), attribute.Int64(AttrWalletHold, hold)))
}

// RateLimit is a tenant limit's refusal (DESIGN.md §16): the window that
// refused the request, or, under on_store_error: deny, the counter
// store's error.
type RateLimit struct {
	Kind       string // requests or tokens
	Scope      string // the tenant, or tenant/model
	Limit      int64
	RetryAfter time.Duration
	StoreError error // set: the store failed and the refusal is on_store_error's
}

// RateLimited records a limit's refusal on the SERVER span of ctx: the
// store's error, or the event EventRateLimited with the window. The
// refusal itself (outcome, code, tenant) is Refused's.
func (s *Spans) RateLimited(ctx context.Context, l *RateLimit) {
	span := trace.SpanFromContext(ctx)
	if l.StoreError != nil {
		span.SetAttributes(attribute.String(AttrRateLimitStoreErr, l.StoreError.Error()))
		return
	}
	span.AddEvent(EventRateLimited, trace.WithAttributes(
		attribute.String(AttrRateLimitKind, l.Kind), attribute.String(AttrRateLimitScope, l.Scope),
		attribute.Int64(AttrRateLimitLimit, l.Limit), attribute.Int64(AttrRateLimitRetryMS, l.RetryAfter.Milliseconds())))
}
