package gateway_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// shutdownConfig: every stream stalls upstream after half its tokens
// (on the providers' fake clock, never advanced), so it is still being
// passed on when the drain runs out.
const shutdownConfig = `
listen: "{{listen}}"
admin_listen: "{{admin}}"
auth: {mode: none}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY}
  - {id: an, provider: anthropic, base_url: "{{base:an}}", api_key_env: CHANNEL_KEY}
models:
  - name: gpt
    operations: [chat, completions, responses]
    chain: [{channel: a, upstream_model: "m|tokens=6|stall=10s", price: {input: 1, output: 1}}]
  - name: claude
    max_tokens_default: 64
    operations: [chat, responses]
    chain: [{channel: an, upstream_model: "m|tokens=6|stall=10s", price: {input: 1, output: 1}}]
`

// openStream posts body to path and reads the stream until its first
// token arrived: the stream is committed and being passed on.
func openStream(t *testing.T, g *gwtest.Gateway, path, body string) (*http.Response, *bufio.Reader, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, g.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if path == "/v1/messages" {
		req.Header.Set("Anthropic-Version", "2023-06-01")
	}
	resp, err := g.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
	}
	br := bufio.NewReader(resp.Body)
	var head strings.Builder
	for !strings.Contains(head.String(), "tok1") {
		line, err := br.ReadString('\n')
		head.WriteString(line)
		if err != nil {
			t.Fatalf("%s: %v before the first token:\n%s", path, err, head.String())
		}
	}
	return resp, br, head.String()
}

// TestDrainTimeoutCutsStreamsInBand: issue 35 item 4, DESIGN.md §2 after
// commit. A stream still open when the drain runs out of time ends with
// the in-band gateway_shutting_down error in its client's dialect and no
// end marker (chat, completions, Responses passed through and translated,
// where it is Responses' own error event, Anthropic Messages), never as a body that
// simply stops; the request log and the requests counter say the gateway
// cut it (interrupted, 200 sent, path a:gateway_shutting_down), not that
// the client left (canceled, 499); no breaker counts it.
func TestDrainTimeoutCutsStreamsInBand(t *testing.T) {
	g := gwtest.Start(t, gwtest.Options{DrainTimeout: time.Nanosecond}, shutdownConfig, "a", "an")
	cases := []struct {
		name, path, body string
		frame            string // the in-band error, as the client reads it
		end              string // the end marker that must not come
		// responses: Responses' own error event, which has no request_id
		// (X-Request-Id carries it) and ends its stream with "null}" (pass
		// through) or response.failed (translated).
		responses bool
	}{
		{"chat", "/v1/chat/completions",
			`{"model":"gpt","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			`data: {"error":{"message":"the gateway is shutting down; the answer above is incomplete: retry the request","type":"server_error","code":"gateway_shutting_down","param":null},"request_id":"`,
			"[DONE]", false},
		{"completions", "/v1/completions",
			`{"model":"gpt","stream":true,"prompt":"hi"}`,
			`data: {"error":{"message":"the gateway is shutting down; the answer above is incomplete: retry the request","type":"server_error","code":"gateway_shutting_down","param":null},"request_id":"`,
			"[DONE]", false},
		{"responses", "/v1/responses",
			`{"model":"gpt","stream":true,"input":"hi"}`,
			`"code":"gateway_shutting_down","message":"the gateway is shutting down; the answer above is incomplete: retry the request","param":null}` + "\n\n",
			"response.completed", true},
		{"responses translated", "/v1/responses",
			`{"model":"claude","stream":true,"input":"hi"}`,
			`"code":"gateway_shutting_down","message":"the gateway is shutting down; the answer above is incomplete: retry the request","param":null}` + "\n\nevent: response.failed\n",
			"response.completed", true},
		{"messages", "/v1/messages",
			`{"model":"claude","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`,
			"event: error\n" + `data: {"type":"error","error":{"type":"overloaded_error","message":"gateway_shutting_down: the gateway is shutting down; the answer above is incomplete: retry the request"},"request_id":"`,
			"message_stop", false},
	}
	type open struct {
		resp *http.Response
		br   *bufio.Reader
	}
	streams := make([]open, len(cases))
	for i, tc := range cases {
		resp, br, _ := openStream(t, g, tc.path, tc.body)
		streams[i] = open{resp, br}
	}
	g.WaitUpstreamTimers(len(cases)) // every upstream stalls: nothing more comes
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Bound)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	for i, tc := range cases {
		rest, _ := io.ReadAll(streams[i].br) // the closed connection may end it unexpectedly: the bytes decide
		tail := string(rest)
		if tc.responses {
			if !strings.Contains(tail, "event: error\ndata: {\"type\":\"error\",\"sequence_number\":") ||
				!strings.Contains(tail, tc.frame) || !strings.HasSuffix(tail, "}\n\n") || strings.Contains(tail, tc.end) {
				t.Errorf("%s: the stream does not end with Responses' gateway_shutting_down error event:\n%s", tc.name, tail)
			}
			continue
		}
		if !strings.Contains(tail, tc.frame) || !strings.HasSuffix(tail, "\"}\n\n") {
			t.Errorf("%s: the stream does not end with the gateway_shutting_down frame:\n%s", tc.name, tail)
		}
		if strings.Contains(tail, tc.end) {
			t.Errorf("%s: a stream cut by the shutdown carries its end marker %q:\n%s", tc.name, tc.end, tail)
		}
		if rid := streams[i].resp.Header.Get("X-Request-Id"); !strings.Contains(tail, `"request_id":"`+rid+`"`) {
			t.Errorf("%s: the frame does not carry the request id %s:\n%s", tc.name, rid, tail)
		}
	}
	testkit.Eventually(t, func() bool {
		return strings.Count(g.Logs.String(), `"msg":"request"`) == len(cases)
	}, "every cut request logged")
	logs := g.Logs.String()
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `"msg":"request"`) {
			continue
		}
		if !strings.Contains(line, `"status":200`) || !strings.Contains(line, `"outcome":"interrupted"`) ||
			!strings.Contains(line, `:gateway_shutting_down"`) {
			t.Errorf("request log of a stream the shutdown cut: %s", line)
		}
	}
	if !strings.Contains(logs, `"msg":"drain timeout: streams still open end with gateway_shutting_down","streams":5`) {
		t.Errorf("the drain does not log the streams it cut:\n%s", logs)
	}
	for _, br := range g.Engine.Breakers().All() {
		if s := br.Snapshot(); s.Failures != 0 {
			t.Errorf("breaker %s counted %d failures for the gateway's own shutdown", s.Name, s.Failures)
		}
	}
}
