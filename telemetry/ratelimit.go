package telemetry

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

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
	utilization metric.Float64ObservableGauge
	reset       metric.Float64ObservableGauge
	windowsFn   atomic.Pointer[func() []WindowObservation]
}

func (r *rateLimitInstruments) init(meter metric.Meter, region attribute.KeyValue) error {
	var e1, e2 error
	r.denied, e1 = meter.Int64Counter(instrumentName(MetricRateLimited),
		metric.WithDescription("Requests refused with 429 rate_limit_exceeded: over a tenant limit, nothing sent upstream."))
	r.storeErrors, e2 = meter.Int64Counter(instrumentName(MetricRateLimitStoreErrors),
		metric.WithDescription("Admissions the rate-limit counter store could not answer, by the decision of on_store_error."))
	return errors.Join(e1, e2, r.initWindows(meter, region))
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

// Channel windows (DESIGN §16): what each channel's last answer said of
// its provider's rate-limit window.
const (
	MetricChannelRateLimitUtilization = "hopgate_channel_ratelimit_utilization"
	MetricChannelRateLimitReset       = "hopgate_channel_ratelimit_reset_timestamp_seconds"
)

// WindowObservation is one channel's window of one kind.
type WindowObservation struct {
	Channel, Kind string
	Utilization   float64   // 1 - remaining/limit
	ResetAt       time.Time // zero: not stated
}

// ObserveRateLimitWindows sets the function feeding the channel window
// gauges (nil: none).
func (m *Metrics) ObserveRateLimitWindows(f func() []WindowObservation) {
	if m == nil {
		return
	}
	if f == nil {
		m.ratelimit.windowsFn.Store(nil)
		return
	}
	m.ratelimit.windowsFn.Store(&f)
}

func (r *rateLimitInstruments) initWindows(meter metric.Meter, region attribute.KeyValue) error {
	var e1, e2 error
	r.utilization, e1 = meter.Float64ObservableGauge(MetricChannelRateLimitUtilization,
		metric.WithDescription("Share of the channel's provider rate-limit window used, as its last answer stated (1 - remaining/limit)."))
	r.reset, e2 = meter.Float64ObservableGauge(MetricChannelRateLimitReset, metric.WithUnit("s"),
		metric.WithDescription("When the channel's provider rate-limit window is full again (Unix seconds), as its last answer stated."))
	if err := errors.Join(e1, e2); err != nil {
		return err
	}
	_, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		f := r.windowsFn.Load()
		if f == nil {
			return nil
		}
		for _, w := range (*f)() {
			attrs := metric.WithAttributes(region, attribute.String(LabelChannel, w.Channel), attribute.String(LabelLimitKind, w.Kind))
			o.ObserveFloat64(r.utilization, w.Utilization, attrs)
			if !w.ResetAt.IsZero() {
				o.ObserveFloat64(r.reset, float64(w.ResetAt.UnixMilli())/1000, attrs)
			}
		}
		return nil
	}, r.utilization, r.reset)
	return err
}
