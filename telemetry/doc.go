// Package telemetry owns hopgate's observability plumbing: OpenTelemetry
// setup from the standard OTEL_* environment (resource, exporter, head
// sampler, W3C propagation), the span, attribute and metric names of
// DESIGN.md §5 (names.go — a contract), the Prometheus metrics served at
// /metrics (with trace exemplars), the failover-aware tail sampler that keeps
// every trace of a request that skipped, retried, failed over, timed out or
// errored, the in-memory failover log behind /admin/failovers, the trace
// ring of the traces that sampler keeps for a reason (tracering.go: compact
// copies, bounded in count and bytes, behind /admin/traces, fed with or
// without an exporter), the per-channel rolling error rates of the on-call
// page (errorrate.go), and the JSON logger that stamps trace_id on every
// line (with Lines, logline.go, which writes the request path's lines as
// that logger would without a slog.Record).
//
// It must not know how breakers, chains or gates work beyond their names:
// callers report what happened, this package records it. It never records
// credentials (API keys, Authorization headers) and never records prompt or
// completion text on its own; callers decide what goes into attributes.
//
// # Spans are paid for only when their trace is kept
//
// The request path's spans (Spans) are recorded as one compact record per
// request (record.go): typed values, times from the engine's clock, span
// ids assigned as spans start (a hop's traceparent names its span before
// anyone knows whether the trace will be kept). The record joins its trace
// in the failover-aware sampler when the dispatch span ends; only if the
// sampler keeps the trace are attributes built and the spans handed on, as
// read-only SDK spans, to the exporter and the trace ring. The SERVER span
// is compact too (serverspan.go): the head sampler's decision and the ids
// as the SDK makes them, attributes kept as set, a read-only view built
// when it ends for the failover-aware sampler, which decides on it as on
// an SDK root span. A healthy trace dropped at the healthy ratio costs its
// SERVER span's attributes and its record, nothing more.
// Options.PlainSpans records SDK spans from the start instead, the
// reference the record is tested against.
//
// # Why the SERVER span is not otelhttp's
//
// ServerHandler (server.go) makes the SERVER span that otelhttp's handler
// made until 2026-12: the same name ("{METHOD} {route}"), kind, parent or
// link (trust_inbound_trace), status and HTTP attributes (semantic
// conventions v1.43, as otelhttp v0.72 sets them), under hopgate's
// instrumentation scope. TestServerSpanMatchesOtelhttp runs otelhttp's
// handler (the version in go.mod) next to it on the same requests and
// compares the spans, so an otelhttp upgrade that changes its span shows;
// TestCompactServerSpanMatchesSDK holds the compact SERVER span to the SDK
// span ServerHandler makes without compact spans.
// otelhttp's handler does work hopgate throws away on every request: it
// computes the attributes of http.server.* metrics that hopgate does not
// record (a no-op meter), builds the span's attributes when the span is not
// recording (tracing off), wraps the writer with httpsnoop (an allocation
// per wrapped interface set) and copies the request twice.
// BenchmarkServerSpan (2 cores, 2026-12-01): with the span sampled 2.9 µs,
// 4.4 KB and 13 allocations against otelhttp's 5.4 µs, 7.8 KB and 40; with
// tracing off 1.1 µs, 1.7 KB and 10 against 7.0 µs, 5.3 KB and 38. In the
// bench's CPU profiles of the whole gateway (hopbench -profile, 1 KB
// completions) otelhttp's handler outside hopgate's own handler was 8 % of
// the CPU with tracing off and 15 % at healthy_sample_ratio 0.1, and a fifth
// of the allocated objects.
//
// # Why the hop span is hopgate's, not otelhttp's
//
// The main listener's SERVER span is made as otelhttp's handler made it
// (above), but upstream calls are not sent through otelhttp.Transport.
// The dispatch engine starts its own CLIENT span per hop ("chat {upstream_model}") and injects
// traceparent from it, because the hop span must parent "await headers" and
// "stream gate", and must carry what only the engine knows when the hop
// ends: hopgate.hop.outcome, error.type for failures that arrive with a 200
// (an error frame, a cut stream), and gen_ai usage of the serving hop only.
// otelhttp's transport span ends at body close with an HTTP view of the
// exchange; stacking it under ours would double every hop in the trace and
// still not know the gate's decision.
//
// # Why the healthy ratio is not the SDK's sampler
//
// healthy_sample_ratio keeps a healthy trace by the arithmetic of the
// SDK's TraceIDRatioBased sampler (sampling.go, healthyRatio), computed
// here rather than by calling it: ShouldSample takes a SamplingParameters
// and reads a parent context, two 328-byte stack frames under the
// exemplar filter of every metric the request path records. Those frames
// were on the deepest path a streamed request took before it parked
// (debug.SetMaxStack, docs/performance.md), and a stack grown to 16 KiB
// there is kept by every idle stream. TestHealthyRatioMatchesSDK holds the
// two to the same decisions.
//
// # Why the access line is not written through slog.Logger
//
// Lines (logline.go) appends the request path's log lines into a pooled
// buffer, the bytes slog's JSON handler under NewLogger writes, instead of
// building a slog.Record: in a 30 s CPU profile of hopbench's burst
// streams (2026-12-02) the access line was 10.7 µs of the gateway's 286 µs
// per stream, 8 µs of it before the write (the Record, its attributes
// grown past five and cloned when the trace ids are added, the handler's
// attribute walk). BenchmarkAccessLine: 0.37 µs and no allocation against
// 2.0 µs and 4 allocations. slog stays the logger: Lines writes directly
// only for NewLogger's own handler, through the same lock, and
// TestLinesMatchSlog and FuzzLinesMatchSlog hold the two outputs to the
// same bytes; any other logger gets LogAttrs.
package telemetry
