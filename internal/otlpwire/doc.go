// Package otlpwire sends OTLP/HTTP protobuf trace exports, written
// straight from the SDK's finished spans.
//
// Why not the SDK's OTLP/HTTP exporter: it converts every span into the
// generated protobuf structs (a pointer per attribute, value and status)
// and then marshals those, which on a busy gateway made export one of the
// three largest CPU costs and a quarter of all allocated bytes
// (docs/performance.md).
//
// Two parts:
//   - Encoder writes the ExportTraceServiceRequest bytes in one pass into
//     a reused buffer: a nested message's length is written once its body
//     is (room for it is left before the body, which moves in the rare
//     case the room was wrong), so nothing is built or sized twice and
//     nothing is allocated per span. Sizing every span first, in a pass of
//     its own, was a third of the encoder's time: BenchmarkEncode's
//     median went from 572 µs to 373 µs per 512-span batch without it
//     (seven interleaved runs each, 2026-12-03, docs/performance.md).
//     TestMatchesSDK holds the bytes to the SDK's own conversion of the
//     same spans. A span that implements AttributeAppender (telemetry's
//     compact spans) appends its attributes into the Encoder's reused
//     buffer instead of allocating a slice for Attributes.
//   - Exporter is the sdktrace.SpanExporter around it: one POST per batch,
//     gzip on request, the OTLP specification's retry rules, partial
//     success reported, nothing sent after Shutdown.
//
// What it must not do: decide which spans are exported or when. The
// failover-aware sampler and the SDK's batch processor in front of it own
// that, and telemetry/env.go turns the OTEL_EXPORTER_OTLP_* variables into
// its Config.
package otlpwire
