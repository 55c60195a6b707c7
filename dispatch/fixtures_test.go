package dispatch_test

import (
	"fmt"
	"io"
	"net/http"

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

// sseResponse is a 200 event stream for r with body, what a test's own
// RoundTripper answers when it must control every read of the stream.
func sseResponse(r *http.Request, body io.ReadCloser) *http.Response {
	return &http.Response{
		StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {"text/event-stream"}},
		Body:    body,
		Request: r, ContentLength: -1,
	}
}
