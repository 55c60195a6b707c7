package telemetry

import (
	"context"
	"strings"

	"github.com/jonboulle/clockwork"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// attachPages creates what the on-call pages read — the trace ring fed by
// fp (nil: an empty ring) and the per-channel error rates fed by
// Metrics.Hop — on o's clock and bounds.
func (t *Telemetry) attachPages(fp *failoverProcessor, o Options) {
	t.Traces = NewTraceRing(o.TraceRing)
	t.ErrorRates = NewErrorRates(o.Clock)
	t.Metrics.rates = t.ErrorRates
	if fp != nil {
		fp.ring = t.Traces
	}
}

// ringOnlyProcessor is the failover-aware sampler with nothing behind it:
// with no exporter configured it still decides which traces are
// interesting, for the ring. It buffers a request's few spans until its
// root ends, then drops them (or copies them into the ring). Healthy
// traces are "kept" only for a ring that wants them (KeepHealthy), at the
// healthy ratio.
func ringOnlyProcessor(clock clockwork.Clock, healthyRatio float64, o TraceRingOptions) *failoverProcessor {
	if !o.KeepHealthy {
		healthyRatio = 0
	}
	return newFailoverProcessor(discardProcessor{}, healthyRatio, clock)
}

// discardProcessor ends the chain of ringOnlyProcessor.
type discardProcessor struct{}

func (discardProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (discardProcessor) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (discardProcessor) Shutdown(context.Context) error                  { return nil }
func (discardProcessor) ForceFlush(context.Context) error                { return nil }

// TraceLink fills a telemetry.trace_url template with a trace id ("" when
// the template is empty). Pages and the dashboards' exemplar links use it.
func TraceLink(template, traceID string) string {
	if template == "" {
		return ""
	}
	return strings.ReplaceAll(template, TraceURLPlaceholder, traceID)
}

// TraceURLPlaceholder is where a trace_url template takes the trace id.
const TraceURLPlaceholder = "{trace_id}"
