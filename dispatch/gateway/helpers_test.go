package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/gateway"
	"github.com/hopgate/hopgate/telemetry"

	"github.com/hopgate/hopgate/internal/testkit"
)

// parseLoopbackConfig parses yml with {{listen}} and {{admin}} replaced by
// free loopback addresses; env feeds api_key_env and token_env.
func parseLoopbackConfig(t *testing.T, yml string, env map[string]string) *config.Config {
	t.Helper()
	yml = strings.ReplaceAll(yml, "{{listen}}", testkit.LoopbackAddr(t))
	yml = strings.ReplaceAll(yml, "{{admin}}", testkit.LoopbackAddr(t))
	cfg, err := config.Parse([]byte(yml), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yml)
	}
	return cfg
}

// startTestGateway starts a gateway through gateway.Start (the process
// `hopgate serve` runs) with telemetry exporting to an in-memory exporter
// (plus any extra span processors), and shuts both down when the test ends.
func startTestGateway(t *testing.T, cfg *config.Config, healthyRatio float64, o gateway.Options, extra ...sdktrace.SpanProcessor) (*gateway.Gateway, *telemetry.Telemetry, *tracetest.InMemoryExporter) {
	t.Helper()
	spans := tracetest.NewInMemoryExporter()
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{
		Region: cfg.Region, HealthyRatio: healthyRatio, SpanExporter: spans,
		Getenv: func(string) string { return "" },
		Clock:  o.Clock, // as gateway.Start does when it builds telemetry itself
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range extra {
		tel.TracerProvider.RegisterSpanProcessor(p)
	}
	o.Telemetry = tel
	if o.DrainTimeout == 0 {
		o.DrainTimeout = 2 * time.Second
	}
	gw, err := gateway.Start(context.Background(), cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = gw.Shutdown(ctx)
		_ = tel.Shutdown(ctx)
	})
	return gw, tel, spans
}
