package otlpwire

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// batch is a full default export batch (512 spans) of healthy completion
// traces, what every request exports.
func batch() []sdktrace.ReadOnlySpan {
	res := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0",
		attribute.String("service.name", "hopgate"), attribute.String("service.version", "0.1.0"),
		attribute.String("host.name", "gateway-7d9f"), attribute.String("telemetry.sdk.language", "go"))
	var spans []sdktrace.ReadOnlySpan
	for len(spans) < 512 {
		spans = append(spans, healthySpans(res)...)
	}
	return spans[:512]
}

// BenchmarkEncode compares the SDK's conversion and marshal with Append,
// per 512-span batch.
func BenchmarkEncode(b *testing.B) {
	spans := batch()
	b.Run("sdk", func(b *testing.B) {
		exp, err := otlptrace.New(context.Background(), &captureClient{})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if err := exp.ExportSpans(context.Background(), spans); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("otlpwire", func(b *testing.B) {
		var e Encoder
		var buf []byte
		b.ReportAllocs()
		for b.Loop() {
			buf = e.Append(buf[:0], spans)
		}
	})
}
