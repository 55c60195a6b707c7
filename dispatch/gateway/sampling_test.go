package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// telemetry.healthy_sample_ratio reaches the telemetry gateway.Start sets
// up for `hopgate serve` (the unit tests of the sampler pass the ratio
// themselves): at 0 a healthy request exports no span over OTLP, at 1 it
// does.
func TestConfigHealthyRatioReachesExport(t *testing.T) {
	for _, tc := range []struct {
		ratio string
		spans bool
	}{{"0", false}, {"1", true}} {
		t.Run("ratio="+tc.ratio, func(t *testing.T) {
			var traces atomic.Int64 // non-empty OTLP trace exports
			sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				if r.URL.Path == "/v1/traces" && len(b) > 0 {
					traces.Add(1)
				}
			}))
			defer sink.Close()
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL)
			yml := fmt.Sprintf(`
listen: "{{listen}}"
admin_listen: "{{admin}}"
region: test-1
auth: {mode: none}
telemetry: {healthy_sample_ratio: %s}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY}
models:
  - name: m
    chain: [{channel: a, upstream_model: m, price: {input: 1, output: 1}}]
`, tc.ratio)
			g := gwtest.Start(t, gwtest.Options{OwnTelemetry: true, Clock: clockwork.NewRealClock(), UpstreamClock: clockwork.NewRealClock()}, yml, "a")
			r := g.Post(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
			if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:ok" {
				t.Fatalf("status %d path %q: not a healthy request", r.Status, r.Header.Get("X-Hopgate-Path"))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := g.Shutdown(ctx); err != nil { // flushes the span exporter
				t.Fatal(err)
			}
			if got := traces.Load() > 0; got != tc.spans {
				t.Fatalf("healthy_sample_ratio %s: %d trace exports, want spans exported = %v", tc.ratio, traces.Load(), tc.spans)
			}
		})
	}
}
