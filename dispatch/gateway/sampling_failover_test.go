package gateway_test

import (
	"testing"

	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// TestSamplingKeepsEveryFailover is the sampling rule of the issue through
// a running gateway: with healthy_sample_ratio 0 a healthy request's trace
// is not exported, while every trace of a request that failed over, skipped
// an open channel or ended in an error is exported whole.
func TestSamplingKeepsEveryFailover(t *testing.T) {
	yml := `
listen: {{listen}}
admin_listen: {{admin}}
region: test-1
auth: {mode: none}
telemetry: {healthy_sample_ratio: 0}
channels:
  - {id: a, base_url: "{{url:up}}", api_key_env: CHANNEL_KEY, region: r-a}
  - {id: b, base_url: "{{url:up}}", api_key_env: CHANNEL_KEY, region: r-b}
  - {id: flaky, base_url: "{{url:up}}", api_key_env: CHANNEL_KEY, region: r-a}
models:
  - name: healthy
    chain:
      - {channel: a, upstream_model: m, price: {input: 1, output: 1}}
  - name: failover
    chain:
      - {channel: flaky, upstream_model: "m|503", price: {input: 1, output: 1}}
      - {channel: b, upstream_model: m, price: {input: 2, output: 2}}
  - name: final
    chain:
      - {channel: a, upstream_model: "m|400", price: {input: 1, output: 1}}
`
	g := gwtest.Start(t, gwtest.Options{}, yml, "up")
	if r := g.Process.Config().Telemetry.HealthySampleRatio; r != 0 {
		t.Fatalf("config healthy_sample_ratio = %v", r)
	}

	for _, tc := range []struct {
		model  string
		stream bool
		path   string
		spans  int // exported spans; 0 = dropped
	}{
		// healthy: server, dispatch, hop, await headers — dropped.
		{"healthy", false, "a:ok", 0},
		{"healthy", true, "a:ok", 0},
		// server, dispatch, 2 hops, 2 await headers, 1 gate.
		{"failover", true, "flaky:503 -> b:ok", 7},
		{"failover", false, "flaky:503 -> b:ok", 6},
		{"failover", false, "flaky:503 -> b:ok", 6}, // third failure opens flaky
		// server, dispatch, breaker skip, hop, await headers.
		{"failover", false, "flaky:open -> b:ok", 5},
		// server, dispatch, hop, await headers: a final error is an error.
		{"final", false, "a:400", 4},
	} {
		r := g.Post(gwtest.ChatBody(tc.model, tc.stream))
		if got := r.Header.Get("X-Hopgate-Path"); got != tc.path {
			t.Fatalf("%s: path %q, want %q", tc.model, got, tc.path)
		}
		id := r.Header.Get("X-Request-Id")
		spans := g.Trace(id)
		if len(spans) != tc.spans {
			t.Errorf("%s %q: %d spans exported, want %d", tc.model, tc.path, len(spans), tc.spans)
		}
		for _, s := range spans {
			if s.Name == telemetry.SpanServer {
				for _, kv := range s.Attributes {
					if string(kv.Key) == telemetry.AttrFailoverPath && kv.Value.AsString() != tc.path {
						t.Errorf("%s: exported path %q", tc.model, kv.Value.AsString())
					}
				}
			}
		}
	}
}
