package gateway_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/gateway"
	"github.com/hopgate/hopgate/telemetry"
)

// parseLoopbackConfig parses yml with {{listen}} and {{admin}} replaced by
// free loopback addresses; env feeds api_key_env and token_env.
func parseLoopbackConfig(t *testing.T, yml string, env map[string]string) *config.Config {
	t.Helper()
	yml = strings.ReplaceAll(yml, "{{listen}}", loopbackAddr(t))
	yml = strings.ReplaceAll(yml, "{{admin}}", loopbackAddr(t))
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

// syncBuffer is a strings.Builder safe for the gateway's concurrent logging.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// loopbackAddr reserves a free 127.0.0.1 port and releases it for the caller.
func loopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
