package telemetry

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Tenant limits (DESIGN §16). The tenant is never a label (unbounded): it
// is the span's hopgate.tenant.
const (
	// OutcomeRateLimited: refused at the door, over a tenant limit; nothing
	// was tried.
	OutcomeRateLimited = "rate_limited"
	// MetricRateLimited counts refusals by model and kind (requests or
	// tokens).
	MetricRateLimited = "hopgate_tenant_ratelimited_total"
	LabelLimitKind    = "kind"
	// MetricRateLimitStoreErrors counts admissions the counter store could
	// not answer, by what rate_limits.on_store_error decided (allow, deny).
	MetricRateLimitStoreErrors = "hopgate_ratelimit_store_errors_total"
	LabelStoreDecision         = "decision"
	// The span event of a refusal and its attributes.
	EventRateLimited      = "hopgate.ratelimit.denied"
	AttrRateLimitKind     = "hopgate.ratelimit.kind"
	AttrRateLimitScope    = "hopgate.ratelimit.scope" // tenant, or tenant and model: "acme/gpt-4o"
	AttrRateLimitLimit    = "hopgate.ratelimit.limit"
	AttrRateLimitRetryMS  = "hopgate.ratelimit.retry_after_ms"
	AttrRateLimitStoreErr = "hopgate.ratelimit.store_error"
)

type rateLimitInstruments struct {
	denied      metric.Int64Counter
	storeErrors metric.Int64Counter
}

func (r *rateLimitInstruments) init(meter metric.Meter) error {
	var e1, e2 error
	r.denied, e1 = meter.Int64Counter(instrumentName(MetricRateLimited),
		metric.WithDescription("Requests refused with 429 rate_limit_exceeded: over a tenant limit, nothing sent upstream."))
	r.storeErrors, e2 = meter.Int64Counter(instrumentName(MetricRateLimitStoreErrors),
		metric.WithDescription("Admissions the rate-limit counter store could not answer, by the decision of on_store_error."))
	return errors.Join(e1, e2)
}

// RateLimited counts one request refused over a tenant limit of kind.
func (m *Metrics) RateLimited(ctx context.Context, model, kind string) {
	if m == nil {
		return
	}
	m.ratelimit.denied.Add(ctx, 1, metric.WithAttributes(m.region,
		attribute.String(LabelModel, model), attribute.String(LabelLimitKind, kind)))
}

// RateLimitStoreError counts one admission the counter store failed;
// decision is what on_store_error made of it.
func (m *Metrics) RateLimitStoreError(ctx context.Context, decision string) {
	if m == nil {
		return
	}
	m.ratelimit.storeErrors.Add(ctx, 1, metric.WithAttributes(m.region, attribute.String(LabelStoreDecision, decision)))
}
