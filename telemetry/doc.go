// Package telemetry owns hopgate's observability plumbing: OpenTelemetry
// setup from the standard OTEL_* environment (resource, exporter, head
// sampler, W3C propagation), the span, attribute and metric names of
// DESIGN.md §5 (names.go — a contract), the Prometheus metrics served at
// /metrics (with trace exemplars), the failover-aware tail sampler that keeps
// every trace of a request that skipped, retried, failed over, timed out or
// errored, the in-memory failover log behind /admin/failovers, and the JSON
// logger that stamps trace_id on every line.
//
// It must not know how breakers, chains or gates work beyond their names:
// callers report what happened, this package records it. It never records
// credentials (API keys, Authorization headers) and never records prompt or
// completion text on its own; callers decide what goes into attributes.
package telemetry
