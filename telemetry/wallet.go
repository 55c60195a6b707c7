package telemetry

import (
	"context"
	"errors"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// walletInstruments are the metrics of tenants' wallets (DESIGN §9).
type walletInstruments struct {
	revenue   metric.Float64Counter
	premium   metric.Float64Counter
	charges   metric.Int64Counter
	denied    metric.Int64Counter
	storeDown metric.Int64Counter
	errors    metric.Int64Counter
	expired   metric.Int64Counter
	pending   metric.Int64ObservableGauge
	pendingFn atomic.Pointer[func() int64]
}

func (w *walletInstruments) init(meter metric.Meter, region attribute.KeyValue) error {
	var errs []error
	counter := func(prom, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(instrumentName(prom), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	money := func(prom, desc string) metric.Float64Counter {
		c, err := meter.Float64Counter(instrumentName(prom), metric.WithUnit("{currency}"), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	w.revenue = money(MetricRevenue, "What tenants were charged: list price times usage, in the billing currency.")
	w.premium = money(MetricFailoverPremium, "What a channel cost above the model's cheapest entry for the same usage.")
	w.charges = counter(MetricWalletCharges, "Requests charged to a wallet, by whether the usage was reported or estimated.")
	w.denied = counter(MetricWalletDenied, "Requests refused with 402 insufficient_balance.")
	w.storeDown = counter(MetricWalletStoreDown, "Charged requests that arrived while the store was unavailable.")
	w.errors = counter(MetricWalletErrors, "Store calls of the wallet that failed, by operation.")
	w.expired = counter(MetricWalletExpiredHolds, "Reservations released because they expired.")
	var err error
	w.pending, err = meter.Int64ObservableGauge(MetricWalletPendingSettles,
		metric.WithDescription("Charges waiting for the store, retried until they land."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			if f := w.pendingFn.Load(); f != nil {
				o.Observe((*f)(), metric.WithAttributes(region))
			}
			return nil
		}))
	errs = append(errs, err)
	return errors.Join(errs...)
}

// Revenue adds what a tenant was charged for model, in currency units.
func (m *Metrics) Revenue(ctx context.Context, model string, amount float64) {
	if m == nil || !(amount > 0) {
		return
	}
	m.wallet.revenue.Add(ctx, amount, metric.WithAttributes(m.region, attribute.String(LabelModel, model)))
}

// FailoverPremium adds what channel cost above the model's cheapest entry.
func (m *Metrics) FailoverPremium(ctx context.Context, channel, model string, amount float64) {
	if m == nil || !(amount > 0) {
		return
	}
	m.wallet.premium.Add(ctx, amount, m.channelModel(channel, model).add...)
}

// WalletCharge counts a settled request; basis is UsageReported or
// UsageEstimated.
func (m *Metrics) WalletCharge(ctx context.Context, model, basis string) {
	if m == nil {
		return
	}
	m.wallet.charges.Add(ctx, 1, metric.WithAttributes(m.region,
		attribute.String(LabelModel, model), attribute.String(LabelUsageBasis, basis)))
}

// WalletDenied counts a request refused with 402 insufficient_balance.
func (m *Metrics) WalletDenied(ctx context.Context, model string) {
	if m == nil {
		return
	}
	m.wallet.denied.Add(ctx, 1, metric.WithAttributes(m.region, attribute.String(LabelModel, model)))
}

// WalletStoreDown counts a charged request that met an unavailable store;
// result is StoreDownRefused (503) or StoreDownCredit (served on credit).
func (m *Metrics) WalletStoreDown(ctx context.Context, model, result string) {
	if m == nil {
		return
	}
	m.wallet.storeDown.Add(ctx, 1, metric.WithAttributes(m.region,
		attribute.String(LabelModel, model), attribute.String(LabelResult, result)))
}

// WalletStoreError counts a failed store call of the wallet (op: hold,
// settle, release, expire, keys).
func (m *Metrics) WalletStoreError(ctx context.Context, op string) {
	if m == nil {
		return
	}
	m.wallet.errors.Add(ctx, 1, metric.WithAttributes(m.region, attribute.String(LabelStoreOp, op)))
}

// WalletExpiredHolds counts holds released by expiry.
func (m *Metrics) WalletExpiredHolds(ctx context.Context, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.wallet.expired.Add(ctx, int64(n), metric.WithAttributes(m.region))
}

// ObservePendingSettles sets the function feeding the pending-settles
// gauge (nil: none).
func (m *Metrics) ObservePendingSettles(f func() int64) {
	if m == nil {
		return
	}
	if f == nil {
		m.wallet.pendingFn.Store(nil)
		return
	}
	m.wallet.pendingFn.Store(&f)
}
