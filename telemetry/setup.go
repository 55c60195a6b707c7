package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Options configures Setup. Zero values are usable.
type Options struct {
	// ServiceVersion becomes the service.version resource attribute.
	ServiceVersion string
	// Region is the gateway's region: resource attribute cloud.region and the
	// `region` label on every hopgate metric.
	Region string
	// HealthyRatio is the share of healthy traces (no failover, outcome ok)
	// exported; 1 keeps all, 0 only the interesting ones. Clamped to [0, 1].
	HealthyRatio float64
	// FailoverLogSize is the capacity of the in-memory failover log; 0 means 200.
	FailoverLogSize int
	// Getenv reads the OTEL_* variables; nil means os.Getenv.
	Getenv func(string) string
	// SpanExporter overrides the exporter chosen from the environment (tests
	// use tracetest.NewInMemoryExporter). nil: from the environment, where no
	// endpoint means no exporter (spans are still created, so trace ids and
	// the failover log work).
	SpanExporter sdktrace.SpanExporter
	// Clock ages the traces the tail sampler holds (a trace whose root never
	// ends locally is exported after 15 minutes) and times the OTLP/HTTP
	// exporter's retries; nil means the real clock.
	// gateway.Start passes the engine's clock. It also dates the
	// per-channel error rates of the on-call page.
	Clock clockwork.Clock
	// TraceRing bounds the in-memory ring of interesting traces that
	// /admin/traces shows (zero: DefaultTraceRingTraces and
	// DefaultTraceRingBytes). The ring is fed with or without an exporter.
	TraceRing TraceRingOptions
	// PlainSpans records the request path's spans as SDK spans from their
	// start, as hopgate did before compact records: every trace then costs
	// its spans, kept or not. Tests compare the two (the exported trees
	// must be the same).
	PlainSpans bool
}

// Telemetry is the process's OpenTelemetry wiring. Setup does not install
// globals; call SetGlobal, or wrap handlers with ServerHandler.
type Telemetry struct {
	TracerProvider *sdktrace.TracerProvider
	Tracer         trace.Tracer // scope ScopeName
	MeterProvider  *sdkmetric.MeterProvider
	Metrics        *Metrics
	Spans          *Spans // the request path's spans (DESIGN.md §5)
	Failovers      *FailoverLog
	Registry       *prometheus.Registry          // what /metrics serves
	Propagator     propagation.TextMapPropagator // W3C tracecontext + baggage
	// Traces holds the last interesting traces for /admin/traces; with
	// Noop it stays empty. ErrorRates counts hops per channel for the
	// on-call page's rolling 60 s error rate (pages.go).
	Traces     *TraceRing
	ErrorRates *ErrorRates

	sampler *failoverProcessor // nil without an exporter
	server  *serverRecorder    // nil: SERVER spans are SDK spans
}

const defaultFailoverLogSize = 200

// Setup builds tracing and metrics from o and the standard OTEL_* variables.
func Setup(ctx context.Context, o Options) (*Telemetry, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	ratio := min(max(o.HealthyRatio, 0), 1)

	kvs, err := resourceAttrs(getenv, o)
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(kvs...))
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}

	sampler, headRatio, err := samplerFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	// A ratio sampler from the environment thins healthy traces only.
	ratio = min(ratio, headRatio)
	exp, kind := o.SpanExporter, "override"
	if exp == nil {
		ua := "hopgate"
		if o.ServiceVersion != "" {
			ua += "/" + o.ServiceVersion
		}
		exp, kind, err = spanExporterFromEnv(ctx, getenv, ua, o.Clock)
		if err != nil {
			return nil, err
		}
	}
	if kind == exporterDisabled {
		// OTEL_SDK_DISABLED: nothing is recorded, but the SDK still mints
		// trace ids, which X-Request-Id and the failover log need.
		sampler = sdktrace.NeverSample()
	}

	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSampler(sampler)}
	var fp *failoverProcessor
	var queue *exportQueue
	if exp != nil {
		size, err := exportQueueSize(getenv)
		if err != nil {
			return nil, err
		}
		queue = newExportQueue(exp, size)
		fp = newFailoverProcessor(queue, ratio, o.Clock)
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(fp))
	}
	ringFP := fp
	if fp == nil && kind != exporterDisabled {
		ringFP = ringOnlyProcessor(o.Clock, ratio, o.TraceRing) // no backend: the ring still fills
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(ringFP))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)

	t, err := newTelemetry(tp, res, o.Region, o.FailoverLogSize, healthyExemplarFilter(ratio))
	if err != nil {
		return nil, errors.Join(err, tp.Shutdown(ctx))
	}
	t.sampler = fp
	t.attachPages(ringFP, o)
	if ringFP != nil && !o.PlainSpans {
		if res, scope, ok := spanIdentity(t.Tracer); ok {
			t.Spans.compact(ringFP, o.Clock, tp, res, scope)
			// The SERVER span too, unless a value length limit asks for the
			// SDK's truncation of its strings.
			if limits := sdktrace.NewSpanLimits(); limits.AttributeValueLengthLimit < 0 {
				t.server = &serverRecorder{sampler: sampler, proc: ringFP, tp: tp, res: res, scope: scope, limits: limits}
			}
		}
	}
	if fp != nil {
		if err := t.observeSampler(fp, queue); err != nil {
			return nil, errors.Join(err, t.Shutdown(ctx))
		}
	}
	return t, nil
}

// spanIdentity returns the resource and instrumentation scope the SDK gives
// tracer's spans, for the export views of compact records, read off a span
// that is started and never ended (no processor sees it end). False when
// the sampler records nothing: compact records are then never used.
func spanIdentity(tracer trace.Tracer) (*resource.Resource, instrumentation.Scope, bool) {
	// A sampled remote parent: ParentBased samplers record under it.
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	_, span := tracer.Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "hopgate: span identity probe")
	ro, ok := span.(sdktrace.ReadOnlySpan)
	if !ok || !span.IsRecording() {
		return nil, instrumentation.Scope{}, false
	}
	return ro.Resource(), ro.InstrumentationScope(), true
}

// Noop returns a Telemetry for tests that do not care about export: working
// Metrics on a private registry, a tracer provider that records and samples
// every span but exports nothing.
func Noop() *Telemetry {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t, err := newTelemetry(tp, resource.Empty(), "", 0, exemplar.TraceBasedFilter)
	if err != nil {
		// Only reachable through a programming error in NewMetrics.
		panic(fmt.Sprintf("telemetry.Noop: %v", err))
	}
	t.attachPages(nil, Options{})
	return t
}

func newTelemetry(tp *sdktrace.TracerProvider, res *resource.Resource, region string, logSize int, filter exemplar.Filter) (*Telemetry, error) {
	reg := prometheus.NewRegistry()
	promExp, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		// Our instrument names are the Prometheus names minus what this
		// strategy appends (_total, unit suffix); see instrumentName.
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelprom.WithoutScopeInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, err
	}
	mp := sdkmetric.NewMeterProvider(
		sdkmetric.WithResource(res),
		sdkmetric.WithReader(promExp),
		sdkmetric.WithExemplarFilter(filter),
	)
	m, err := NewMetrics(mp, region)
	if err != nil {
		return nil, errors.Join(err, mp.Shutdown(context.Background()))
	}
	if logSize <= 0 {
		logSize = defaultFailoverLogSize
	}
	tracer := tp.Tracer(ScopeName)
	return &Telemetry{
		TracerProvider: tp,
		Tracer:         tracer,
		MeterProvider:  mp,
		Metrics:        m,
		Spans:          NewSpans(tracer),
		Failovers:      NewFailoverLog(logSize),
		Registry:       reg,
		Propagator:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}, nil
}

// healthyExemplarFilter admits an exemplar only when its trace will be
// exported: the span is sampled and either the measurement marked the trace
// interesting (a failed hop) or the trace id passes the healthy ratio, the
// same arithmetic the tail sampler uses. Otherwise dashboards would link to
// traces the sampler dropped.
func healthyExemplarFilter(ratio float64) exemplar.Filter {
	healthy := newHealthyRatio(ratio)
	return func(ctx context.Context) bool {
		sc := trace.SpanContextFromContext(ctx)
		if !sc.IsSampled() {
			return false
		}
		if healthy.keep(sc.TraceID()) {
			// First: a lookup of interestingKey walks the whole context
			// chain when it is absent, as it is on a healthy hop, and the
			// filter runs for every measurement.
			return true
		}
		v, _ := ctx.Value(interestingKey{}).(bool)
		return v
	}
}

// observeSampler exports the tail sampler's decisions as
// hopgate_trace_decisions_total{decision}, and the spans the export queue
// had no room for (exportqueue.go).
func (t *Telemetry) observeSampler(fp *failoverProcessor, queue *exportQueue) error {
	meter := t.MeterProvider.Meter(ScopeName)
	_, err := meter.Int64ObservableCounter(instrumentName(MetricTraceDecisions),
		metric.WithDescription("Tail sampling decisions: traces kept or dropped, spans forwarded early on overflow."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			region := t.Metrics.region
			for _, d := range []struct {
				name string
				n    int64
			}{
				{TraceDecisionInteresting, fp.counts.interesting.Load()},
				{TraceDecisionHealthyKept, fp.counts.healthyKept.Load()},
				{TraceDecisionHealthyDrop, fp.counts.healthyDropped.Load()},
				{TraceDecisionOverflow, fp.counts.overflow.Load()},
				{TraceDecisionStaleFlushed, fp.counts.stale.Load()},
				{TraceDecisionQueueFull, queue.dropped.Load()},
			} {
				o.Observe(d.n, metric.WithAttributes(region, attribute.String(LabelTraceDecision, d.name)))
			}
			return nil
		}))
	return err
}

// SetGlobal installs the tracer provider, meter provider and propagator as
// the otel globals, for instrumentation that reads them (otelhttp defaults).
func (t *Telemetry) SetGlobal() {
	otel.SetTracerProvider(t.TracerProvider)
	otel.SetMeterProvider(t.MeterProvider)
	otel.SetTextMapPropagator(t.Propagator)
}

// MetricsHandler serves Registry; OpenMetrics is enabled so scrapers that ask
// for it get the hop-duration exemplars.
func (t *Telemetry) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(t.Registry, promhttp.HandlerOpts{
		EnableOpenMetrics: true,
		ErrorHandling:     promhttp.ContinueOnError,
	})
}

// Shutdown flushes and stops tracing (buffered traces are exported) and
// metrics. Safe to call once.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	return errors.Join(
		t.TracerProvider.ForceFlush(ctx),
		t.TracerProvider.Shutdown(ctx),
		t.MeterProvider.Shutdown(ctx),
	)
}
