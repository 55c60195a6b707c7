package telemetry

import (
	"context"
	"errors"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The share of the buffer budget in use at which the on-call page's
// overload tile and the board's budget panel turn yellow, then red.
const (
	BudgetWarnShare = 0.7
	BudgetFullShare = 0.9
)

// OverloadObservation is the overload state the gauges report.
type OverloadObservation struct {
	BudgetUsed, BudgetLimit int64
	InFlight, Streams       int64
}

// overloadMetrics are the instruments of the overload protection.
type overloadMetrics struct {
	shed    metric.Int64Counter
	observe atomic.Pointer[func() OverloadObservation]
}

func (m *Metrics) initOverload(meter metric.Meter) error {
	var errs []error
	var err error
	m.overload.shed, err = meter.Int64Counter(instrumentName(MetricShed),
		metric.WithDescription("Requests shed at once (503 engine_overloaded), by reason: in_flight, streams, budget."))
	errs = append(errs, err)
	used, err := meter.Int64ObservableGauge(MetricBudgetUsed, metric.WithUnit("By"),
		metric.WithDescription("Bytes buffered for requests (gate frames, bodies being classified, request bodies)."))
	errs = append(errs, err)
	limit, err := meter.Int64ObservableGauge(MetricBudgetLimit, metric.WithUnit("By"),
		metric.WithDescription("The buffer budget."))
	errs = append(errs, err)
	inFlight, err := meter.Int64ObservableGauge(MetricInFlight, metric.WithDescription("Requests admitted and not finished."))
	errs = append(errs, err)
	streams, err := meter.Int64ObservableGauge(MetricStreamsOpen, metric.WithDescription("Streaming requests admitted and not finished."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		f := m.overload.observe.Load()
		if f == nil {
			return nil
		}
		s := (*f)()
		opt := metric.WithAttributes(m.region)
		o.ObserveInt64(used, s.BudgetUsed, opt)
		o.ObserveInt64(limit, s.BudgetLimit, opt)
		o.ObserveInt64(inFlight, s.InFlight, opt)
		o.ObserveInt64(streams, s.Streams, opt)
		return nil
	}, used, limit, inFlight, streams)
	return err
}

// ObserveOverload sets the function feeding the overload gauges (one per
// process; calling it again replaces it).
func (m *Metrics) ObserveOverload(f func() OverloadObservation) {
	if m == nil {
		return
	}
	m.overload.observe.Store(&f)
	// Every reason's series exists from the start (at 0), so a rate over
	// it is a number, not "no data", until the first shed.
	for _, r := range []string{"in_flight", "streams", "budget"} {
		m.overload.shed.Add(context.Background(), 0, metric.WithAttributes(m.region, attribute.String(LabelShedReason, r)))
	}
}

// Shed counts a request refused at once by overload protection.
func (m *Metrics) Shed(ctx context.Context, reason string) {
	if m == nil {
		return
	}
	m.overload.shed.Add(ctx, 1, metric.WithAttributes(m.region, attribute.String(LabelShedReason, reason)))
}
