package dispatch_test

import (
	"fmt"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// channelKey is the credential every fake channel expects.
const channelKey = gwtest.ChannelKey

// twoChannels is the common shape: a cheap channel "a" and a dearer "b".
func twoChannels(upA, upB, extra string) string {
	return fmt.Sprintf(`
region: test-1
auth: {mode: none}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY, region: r-a}
  - {id: b, base_url: "{{url:b}}", api_key_env: CHANNEL_KEY, region: r-b}
models:
  - name: m
    chain:
      - {channel: b, upstream_model: %q, price: {input: 2, output: 2}}
      - {channel: a, upstream_model: %q, price: {input: 1, output: 1}}
%s`, upB, upA, extra)
}

func chat(stream bool) string { return gwtest.ChatBody("m", stream) }

// spanValues are the values of attribute key on the spans keep accepts
// (nil: every span), in span order.
func spanValues(spans tracetest.SpanStubs, key string, keep func(*tracetest.SpanStub) bool) []string {
	var out []string
	for i := range spans {
		if keep != nil && !keep(&spans[i]) {
			continue
		}
		for _, kv := range spans[i].Attributes {
			if string(kv.Key) == key {
				out = append(out, kv.Value.AsString())
			}
		}
	}
	return out
}
