package telemetry

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The export queue: how many ended spans may wait for the exporter.
//
// The SDK's batch processor holds at most OTEL_BSP_MAX_QUEUE_SIZE spans
// (2048 by default) and drops what does not fit, silently: it counts the
// drops in a private field. That is too small for a gateway's incidents.
// When a stalled upstream recovers, the thousand requests it held end
// within milliseconds. Each ends with its server span and the spans of its
// hops, 5 to 10 each, so about 7 000 spans arrive at once.
// `make soak DURATION=3m RATE=250` (on a loaded host) had 1 171 requests
// in flight at such a moment. The SDK dropped 1 480 spans, all within one
// second, among them the roots of 183 failover traces: the traces on-call
// needs most. A 10-minute soak on a quiet host lost 94 roots the same way.
//
// So hopgate sizes the queue itself: defaultExportQueue spans unless
// OTEL_BSP_MAX_QUEUE_SIZE says otherwise. A waiting span costs its slot (16
// bytes of channel) beyond the span it already is. exportQueue also counts
// what it cannot take: hopgate_trace_decisions_total{decision=
// "dropped_queue_full"}, per span. It admits a span only while fewer than
// max spans have been handed to the batch processor and not yet to the
// exporter. That count includes the batch being built and the one being
// exported, so the processor's own queue, of the same size, never drops.
const (
	defaultExportQueue = 16384
	envBSPMaxQueueSize = "OTEL_BSP_MAX_QUEUE_SIZE"
)

// exportQueue is the span processor in front of the SDK's batch processor.
type exportQueue struct {
	next    sdktrace.SpanProcessor
	max     int64
	pending atomic.Int64 // handed to next, not yet returned by the exporter
	dropped atomic.Int64
}

var _ sdktrace.SpanProcessor = (*exportQueue)(nil)

// exportQueueSize is the queue bound from getenv: OTEL_BSP_MAX_QUEUE_SIZE
// when set (the SDK's variable, so an operator's existing setting holds),
// else defaultExportQueue.
func exportQueueSize(getenv func(string) string) (int, error) {
	v := getenv(envBSPMaxQueueSize)
	if v == "" {
		return defaultExportQueue, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want a positive integer", envBSPMaxQueueSize, v)
	}
	return n, nil
}

// newExportQueue builds the batch processor for exp behind an exportQueue
// of size spans; opts are further batch processor options (tests).
func newExportQueue(exp sdktrace.SpanExporter, size int, opts ...sdktrace.BatchSpanProcessorOption) *exportQueue {
	q := &exportQueue{max: int64(size)}
	opts = append([]sdktrace.BatchSpanProcessorOption{sdktrace.WithMaxQueueSize(size)}, opts...)
	q.next = sdktrace.NewBatchSpanProcessor(countingExporter{SpanExporter: exp, q: q}, opts...)
	return q
}

func (q *exportQueue) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) { q.next.OnStart(ctx, s) }

// OnEnd hands s to the batch processor, or drops and counts it when max
// spans are already waiting. Only sampled spans get here (the failover
// processor returns before the others), and the batch processor exports
// every sampled span it takes, so pending comes back down.
func (q *exportQueue) OnEnd(s sdktrace.ReadOnlySpan) {
	if q.pending.Add(1) > q.max {
		q.pending.Add(-1)
		q.dropped.Add(1)
		return
	}
	q.next.OnEnd(s)
}

func (q *exportQueue) ForceFlush(ctx context.Context) error { return q.next.ForceFlush(ctx) }
func (q *exportQueue) Shutdown(ctx context.Context) error   { return q.next.Shutdown(ctx) }

// countingExporter returns the spans of each export to q's count, whether
// or not the export succeeded (a failed export is the exporter's to
// report; the spans no longer wait).
type countingExporter struct {
	sdktrace.SpanExporter
	q *exportQueue
}

func (e countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	defer e.q.pending.Add(-int64(len(spans)))
	return e.SpanExporter.ExportSpans(ctx, spans)
}
