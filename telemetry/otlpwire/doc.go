// Package otlpwire writes OTLP/protobuf trace export requests straight
// from the SDK's finished spans.
//
// Why not the OTLP exporter's own encoding: it converts every span into
// the generated protobuf structs (a pointer per attribute, value and
// status) and then marshals those, which on a busy gateway made export
// one of the three largest CPU costs and a quarter of all allocated bytes
// (docs/performance.md). This package writes the same wire bytes in one
// pass into a reused buffer: the sizes of nested messages are computed
// first, so nothing is built twice and nothing is allocated per span.
//
// What it must not do: decide anything about which spans are exported, or
// how. The batch processor, the sampler and the HTTP exporter around it
// own that. It owns the bytes only, and TestMatchesSDK holds them to the
// SDK's own conversion of the same spans.
package otlpwire
