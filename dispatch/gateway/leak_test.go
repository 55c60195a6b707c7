package gateway_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hopgate/hopgate/telemetry"

	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// requestLogs returns the parsed "request" log lines by trace_id; it waits
// until want ids are present (the line is written after the reply, which a
// client reading a Content-Length body can beat).
func requestLogs(t *testing.T, g *gwtest.Gateway, want ...string) map[string]map[string]any {
	t.Helper()
	var out map[string]map[string]any
	testkit.EventuallyNil(t, func() error {
		out = map[string]map[string]any{}
		for _, line := range strings.Split(strings.TrimSpace(g.Logs.String()), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line is not JSON: %q", line)
			}
			if rec["msg"] != "request" {
				continue
			}
			if n := strings.Count(line, `"`+telemetry.LogTraceID+`":`); n != 1 {
				t.Errorf("log line carries trace_id %d times (duplicate JSON keys break log pipelines): %s", n, line)
			}
			id, _ := rec[telemetry.LogTraceID].(string)
			out[id] = rec
		}
		missing := 0
		for _, id := range want {
			if out[id] == nil {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d request log lines missing:\n%s", missing, g.Logs.String())
		}
		return nil
	}, "a request log line per request")
	return out
}

// echoingUpstream answers "m|echo-key" with a 401 whose message quotes the
// credential it received, the way real providers quote (part of) a bad key;
// everything else goes to next.
func echoingUpstream(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), `"m|echo-key"`) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			msg, _ := json.Marshal("Incorrect API key provided: " + strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
			fmt.Fprintf(w, `{"error":{"message":%s,"type":"invalid_request_error","code":"invalid_api_key"}}`, msg)
			return
		}
		r.Body = io.NopCloser(strings.NewReader(string(b)))
		r.ContentLength = int64(len(b))
		next.ServeHTTP(w, r)
	})
}

// TestCredentialNeverLeaks drives every path of the engine with a unique
// channel credential and looks for it everywhere hopgate writes: exported
// spans (attributes, events, status), log lines, /metrics and the replies.
// Every request's log line must also name its trace, model, outcome and path.
func TestCredentialNeverLeaks(t *testing.T) {
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	secret := "sk-leak-" + hex.EncodeToString(raw)
	// One primary channel per path, so no path's failures open another's
	// breaker; all share the fake and the healthy fallback b.
	type path struct {
		model, fault, fallback string
		stream                 bool
		policy                 string
		outcome, path          string
		timer                  func(g *gwtest.Gateway) // moves the clock when the path waits on it
	}
	paths := []path{
		{model: "ok", fault: "m", fallback: "m", outcome: telemetry.OutcomeOK, path: "a-ok:ok"},
		{model: "ok-stream", fault: "m", fallback: "m", stream: true, outcome: telemetry.OutcomeOK, path: "a-ok-stream:ok"},
		{model: "failover", fault: "m|503", fallback: "m", stream: true, outcome: telemetry.OutcomeFailoverOK, path: "a-failover:503 -> b:ok"},
		{model: "echo", fault: "m|echo-key", fallback: "m", outcome: telemetry.OutcomeFailoverOK, path: "a-echo:401 -> b:ok"},
		{model: "header-timeout", fault: "m|no-headers", fallback: "m", stream: true, policy: "{header_timeout: 10s}",
			outcome: telemetry.OutcomeFailoverOK, path: "a-header-timeout:header_timeout -> b:ok", timer: func(g *gwtest.Gateway) { g.WaitTimers(1); g.Clock.Advance(10 * time.Second) }},
		{model: "stream-error", fault: "m|stream-error", fallback: "m", stream: true, outcome: telemetry.OutcomeFailoverOK, path: "a-stream-error:stream_error -> b:ok"},
		{model: "cut", fault: "m|cut=3", fallback: "m", stream: true, outcome: telemetry.OutcomeInterrupted, path: "a-cut:cut"},
		{model: "final", fault: "m|400", fallback: "m", outcome: telemetry.OutcomeFinalError, path: "a-final:400"},
		{model: "exhausted", fault: "m|503", fallback: "m|echo-key", outcome: telemetry.OutcomeExhausted, path: "a-exhausted:503 -> b:401"},
		{model: "deadline", fault: "m|no-headers", fallback: "m", stream: true, policy: "{chain_deadline: 5s}",
			outcome: telemetry.OutcomeDeadline, path: "a-deadline:deadline", timer: func(g *gwtest.Gateway) { g.WaitTimers(2); g.Clock.Advance(5 * time.Second) }},
	}
	var yml strings.Builder
	yml.WriteString("listen: {{listen}}\nadmin_listen: {{admin}}\nregion: test-1\nauth: {mode: none}\nchannels:\n")
	yml.WriteString("  - {id: b, base_url: \"{{url:up}}\", api_key_env: LEAK_KEY, region: r-b}\n")
	for _, p := range paths {
		fmt.Fprintf(&yml, "  - {id: a-%s, base_url: \"{{url:up}}\", api_key_env: LEAK_KEY, region: r-a}\n", p.model)
	}
	yml.WriteString("models:\n")
	for _, p := range paths {
		fmt.Fprintf(&yml, "  - name: %s\n    chain:\n", p.model)
		fmt.Fprintf(&yml, "      - {channel: a-%s, upstream_model: %q, price: {input: 1, output: 1}}\n", p.model, p.fault)
		fmt.Fprintf(&yml, "      - {channel: b, upstream_model: %q, price: {input: 2, output: 2}}\n", p.fallback)
		if p.policy != "" {
			fmt.Fprintf(&yml, "    policy: %s\n", p.policy)
		}
	}
	g := gwtest.Start(t, gwtest.Options{
		APIKey: secret, Env: map[string]string{"LEAK_KEY": secret},
		Wrap: map[string]func(http.Handler) http.Handler{"up": echoingUpstream},
	}, yml.String(), "up")

	replies := map[string]gwtest.Reply{}
	var ids []string
	for _, p := range paths {
		var r gwtest.Reply
		if p.timer != nil {
			done := g.Async(gwtest.ChatBody(p.model, p.stream))
			p.timer(g)
			r = testkit.Recv(t, done, p.model+" reply")
		} else {
			r = g.Post(gwtest.ChatBody(p.model, p.stream))
		}
		if r.Status < 0 {
			t.Fatalf("%s: %s", p.model, r.Body)
		}
		id := r.Header.Get("X-Request-Id")
		replies[p.model], ids = r, append(ids, id)

		for k, vs := range r.Header {
			if strings.Contains(strings.Join(vs, ","), secret) {
				t.Errorf("%s: credential in response header %s", p.model, k)
			}
		}
		if strings.Contains(r.Body, secret) {
			t.Errorf("%s: credential in the client-visible body: %s", p.model, r.Body)
		}
		spans := g.Trace(id)
		if len(spans) == 0 {
			t.Errorf("%s: trace %s not exported", p.model, id)
		}
		for _, s := range spans {
			if where := spanMentions(s, secret); where != "" {
				t.Errorf("%s: credential in span %q (%s)", p.model, s.Name, where)
			}
		}
	}

	// Every path took the road it was written for (else this test proves
	// less than it claims), and its log line says so.
	logs := requestLogs(t, g, ids...)
	for i, p := range paths {
		rec := logs[ids[i]]
		if rec == nil {
			continue
		}
		if rec["model"] != p.model || rec["outcome"] != p.outcome {
			t.Errorf("%s: log line model=%v outcome=%v, want %s %s: %v", p.model, rec["model"], rec["outcome"], p.model, p.outcome, rec)
		}
		if rec["failover_path"] != p.path {
			t.Errorf("%s: log line failover_path=%v, want %q", p.model, rec["failover_path"], p.path)
		}
	}
	if strings.Contains(g.Logs.String(), secret) {
		t.Errorf("credential in the log:\n%s", g.Logs.String())
	}

	resp, err := http.Get(g.AdminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(metrics), telemetry.MetricHops) {
		t.Fatalf("/metrics: %d\n%s", resp.StatusCode, metrics)
	}
	if strings.Contains(string(metrics), secret) {
		t.Error("credential in /metrics")
	}

	// The credential did reach the upstreams: this test looked for a value
	// that was really in use.
	sent := 0
	for _, req := range g.Ups["up"].Log() {
		if req.Header.Get("Authorization") == "Bearer "+secret {
			sent++
		}
	}
	if sent == 0 {
		t.Fatal("no upstream request carried the channel credential")
	}
}

// spanMentions says where s contains needle: name, attributes, events,
// status or links; "" when nowhere.
func spanMentions(s tracetest.SpanStub, needle string) string {
	if strings.Contains(s.Name, needle) {
		return "name"
	}
	for _, kv := range s.Attributes {
		if strings.Contains(kv.Value.Emit(), needle) {
			return "attribute " + string(kv.Key)
		}
	}
	for _, e := range s.Events {
		if strings.Contains(e.Name, needle) {
			return "event " + e.Name
		}
		for _, kv := range e.Attributes {
			if strings.Contains(kv.Value.Emit(), needle) {
				return "event " + e.Name + " attribute " + string(kv.Key)
			}
		}
	}
	if strings.Contains(s.Status.Description, needle) {
		return "status"
	}
	for _, l := range s.Links {
		for _, kv := range l.Attributes {
			if strings.Contains(kv.Value.Emit(), needle) {
				return "link attribute " + string(kv.Key)
			}
		}
	}
	if s.Resource != nil {
		for _, kv := range s.Resource.Attributes() {
			if strings.Contains(kv.Value.Emit(), needle) {
				return "resource " + string(kv.Key)
			}
		}
	}
	return ""
}
