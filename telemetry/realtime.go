package telemetry

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Realtime sessions (DESIGN.md §15): the names of their spans, attributes
// and metrics.
const (
	// OperationRealtime names a realtime hop span: "realtime {upstream_model}".
	OperationRealtime = "realtime"
	// SpanAwaitSession is the session gate, a child of the hop span: from
	// the dial to session.created (commit) or the discard.
	SpanAwaitSession = "await session"

	// Session gate decisions (hopgate.gate.decision of "await session").
	GateCommitSession  = "commit_session"  // session.created
	GateDiscardClose   = "discard_close"   // the upstream closed first
	GateDiscardRefused = "discard_refused" // the upgrade was refused or failed

	AttrRealtimeEventsIn  = "hopgate.realtime.events_in"  // client -> upstream
	AttrRealtimeEventsOut = "hopgate.realtime.events_out" // upstream -> client
	AttrRealtimeResponses = "hopgate.realtime.responses"  // response.done events
	AttrRealtimeCloseCode = "hopgate.realtime.close_code" // the WebSocket close code the client got or sent

	MetricRealtimeSessions        = "hopgate_realtime_sessions_total"
	MetricRealtimeSessionsActive  = "hopgate_realtime_sessions_active"
	MetricRealtimeSessionDuration = "hopgate_realtime_session_duration_seconds"
)

// realtimeDurationBuckets: a voice session lasts seconds to the 60 minute
// bound of realtime.max_session.
var realtimeDurationBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600}

// realtimeMetrics are the instruments of realtime sessions.
type realtimeMetrics struct {
	sessions metric.Int64Counter
	active   metric.Int64UpDownCounter
	duration metric.Float64Histogram
}

func (r *realtimeMetrics) init(meter metric.Meter) error {
	var errs []error
	var err error
	r.sessions, err = meter.Int64Counter(instrumentName(MetricRealtimeSessions),
		metric.WithDescription("Realtime sessions ended, by model and outcome."))
	errs = append(errs, err)
	r.active, err = meter.Int64UpDownCounter(MetricRealtimeSessionsActive,
		metric.WithDescription("Realtime sessions open now, by model."))
	errs = append(errs, err)
	r.duration, err = meter.Float64Histogram(MetricRealtimeSessionDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of a realtime session, from the client's upgrade to its close."),
		metric.WithExplicitBucketBoundaries(realtimeDurationBuckets...))
	errs = append(errs, err)
	return errors.Join(errs...)
}

// RealtimeOpened counts a realtime session the client opened (upgraded).
func (m *Metrics) RealtimeOpened(ctx context.Context, model string) {
	if m == nil || m.realtime.active == nil {
		return
	}
	m.realtime.active.Add(ctx, 1, metric.WithAttributes(m.region, attribute.String(LabelModel, model)))
}

// RealtimeClosed counts the end of a session RealtimeOpened counted.
func (m *Metrics) RealtimeClosed(ctx context.Context, model, outcome string, d time.Duration) {
	if m == nil || m.realtime.active == nil {
		return
	}
	opt := metric.WithAttributes(m.region, attribute.String(LabelModel, model))
	m.realtime.active.Add(ctx, -1, opt)
	m.realtime.sessions.Add(ctx, 1, metric.WithAttributes(m.region, attribute.String(LabelModel, model), attribute.String(LabelOutcome, outcome)))
	m.realtime.duration.Record(ctx, d.Seconds(), metric.WithAttributes(m.region, attribute.String(LabelModel, model)))
}

// SessionEnd is what a realtime hop span records of its session.
type SessionEnd struct {
	EventsIn, EventsOut, Responses int64
	CloseCode                      int // 0: none
}

// AwaitSession starts the "await session" span under the hop: the
// session gate (its decision ends it, as the stream gate's does).
func (h HopSpan) AwaitSession(ctx context.Context) GateSpan {
	if h.sp != nil {
		return GateSpan{sp: h.child(ctx, recGate, SpanAwaitSession)}
	}
	_, span := h.s.tracer.Start(ctx, SpanAwaitSession)
	return GateSpan{live: span}
}

// Session records what a realtime hop's session carried; call it before End.
func (h HopSpan) Session(e SessionEnd) {
	if h.sp != nil {
		h.sp.hop.session = &e
		return
	}
	var a [4]attribute.KeyValue
	h.live.SetAttributes(appendSessionAttrs(a[:0], &e)...)
}

// appendSessionAttrs is a realtime hop's session.
func appendSessionAttrs(a []attribute.KeyValue, e *SessionEnd) []attribute.KeyValue {
	a = append(a,
		attribute.Int64(AttrRealtimeEventsIn, e.EventsIn),
		attribute.Int64(AttrRealtimeEventsOut, e.EventsOut),
		attribute.Int64(AttrRealtimeResponses, e.Responses))
	if e.CloseCode != 0 {
		a = append(a, attribute.Int(AttrRealtimeCloseCode, e.CloseCode))
	}
	return a
}
