package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/telemetry"

	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// jaeger is a real Jaeger v2 process (deploy/jaeger/config.yaml) on free
// loopback ports.
type jaeger struct {
	otlpHTTP, otlpGRPC, query string
	out                       *testkit.SyncBuffer
}

// startJaeger runs the binary of HOPGATE_JAEGER_BIN (default: where `make
// jaeger` caches it). Missing binary: skip, except under CI=true where the
// Makefile must have built it.
func startJaeger(t *testing.T) *jaeger {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no external components")
	}
	bin := os.Getenv("HOPGATE_JAEGER_BIN")
	if bin == "" {
		home, _ := os.UserHomeDir()
		bin = filepath.Join(home, ".cache", "hopgate", "jaeger-v1.76.0", "jaeger")
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Jaeger binary %s: %v (run `make jaeger`)", bin, err)
		}
		t.Skipf("Jaeger binary %s missing (`make jaeger` builds it): %v", bin, err)
	}
	// Free ports are found by listening and closing, so another test
	// package running in parallel can take one first: retry on new ports
	// when Jaeger exits at start because an address is in use.
	for attempt := 1; ; attempt++ {
		j, exitedOut, ok := tryStartJaeger(t, bin)
		if ok {
			return j
		}
		if attempt == 3 || !strings.Contains(exitedOut, "address already in use") {
			t.Fatalf("Jaeger did not start:\n%s", exitedOut)
		}
		t.Logf("Jaeger lost a port race (attempt %d); retrying on new ports", attempt)
	}
}

// tryStartJaeger starts one Jaeger; ok is false (with its output) when it
// exited during start-up.
func tryStartJaeger(t *testing.T, bin string) (*jaeger, string, bool) {
	t.Helper()
	j := &jaeger{otlpHTTP: testkit.LoopbackAddr(t), otlpGRPC: testkit.LoopbackAddr(t), query: testkit.LoopbackAddr(t), out: &testkit.SyncBuffer{}}
	cmd := exec.Command(bin, "--config", filepath.Join("..", "..", "deploy", "jaeger", "config.yaml"))
	cmd.Env = append(os.Environ(),
		"JAEGER_OTLP_GRPC="+j.otlpGRPC,
		"JAEGER_OTLP_HTTP="+j.otlpHTTP,
		"JAEGER_QUERY_HTTP="+j.query,
		"JAEGER_QUERY_GRPC="+testkit.LoopbackAddr(t),
	)
	cmd.Stdout, cmd.Stderr = j.out, j.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start Jaeger: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // only the process we started, by its handle
		<-exited
		if t.Failed() {
			t.Logf("Jaeger output:\n%s", j.out.String())
		}
	})
	// Ready when the query API answers and the OTLP/HTTP receiver accepts,
	// or exited.
	gone := func() bool {
		select {
		case <-exited:
			return true
		default:
			return false
		}
	}
	testkit.Poll{Within: 15 * time.Second, Every: 20 * time.Millisecond}.Eventually(t, func() bool {
		return gone() || (httpOK("http://"+j.query+"/api/services") && httpAnswers("http://"+j.otlpHTTP+"/v1/traces"))
	}, "Jaeger ready")
	if gone() {
		return nil, j.out.String(), false
	}
	return j, "", true
}

func httpOK(u string) bool {
	resp, err := http.Get(u)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func httpAnswers(u string) bool {
	resp, err := http.Get(u)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

// jaegerTrace is the part of Jaeger's v1 JSON (/api/traces/{id}) we read.
type jaegerTrace struct {
	Data []struct {
		TraceID string `json:"traceID"`
		Spans   []struct {
			TraceID       string `json:"traceID"`
			SpanID        string `json:"spanID"`
			OperationName string `json:"operationName"`
			References    []struct {
				RefType string `json:"refType"`
				TraceID string `json:"traceID"`
				SpanID  string `json:"spanID"`
			} `json:"references"`
			Tags []struct {
				Key   string `json:"key"`
				Value any    `json:"value"`
			} `json:"tags"`
		} `json:"spans"`
	} `json:"data"`
}

// jspan is a span of the fetched trace with its parent resolved.
type jspan struct {
	id, parent, name string
	tags             map[string]string
}

// fetchTrace polls Jaeger until the trace has at least n spans.
func (j *jaeger) fetchTrace(t *testing.T, id string, n int, flush func()) []jspan {
	t.Helper()
	var out []jspan
	testkit.Poll{Every: 20 * time.Millisecond}.EventuallyNil(t, func() error {
		flush()
		resp, err := http.Get("http://" + j.query + "/api/traces/" + id)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var tr jaegerTrace
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &tr) != nil || len(tr.Data) != 1 || len(tr.Data[0].Spans) < n {
			return fmt.Errorf("last answer: %d %.2000s", resp.StatusCode, b)
		}
		out = nil
		for _, s := range tr.Data[0].Spans {
			js := jspan{id: s.SpanID, name: s.OperationName, tags: map[string]string{}}
			for _, r := range s.References {
				if r.RefType == "CHILD_OF" && r.TraceID == id {
					js.parent = r.SpanID
				}
			}
			for _, tag := range s.Tags {
				js.tags[tag.Key] = fmt.Sprint(tag.Value)
			}
			out = append(out, js)
		}
		return nil
	}, "trace "+id+" in Jaeger with "+strconv.Itoa(n)+" spans")
	return out
}

// TestJaegerEndToEnd exports one failover request's trace through the
// standard OTEL_* environment into a real Jaeger, over OTLP/HTTP and
// OTLP/gRPC, and reads it back: what on-call sees is the tree of
// DESIGN.md §5, and the upstream joined the same trace.
func TestJaegerEndToEnd(t *testing.T) {
	j := startJaeger(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"otlp-http", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + j.otlpHTTP}},
		{"otlp-grpc", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + j.otlpGRPC, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.env["OTEL_SERVICE_NAME"] = "hopgate-e2e-" + tc.name
			jaegerCase(t, j, tc.env)
		})
	}
}

func jaegerCase(t *testing.T, j *jaeger, env map[string]string) {
	yml := `
listen: {{listen}}
admin_listen: {{admin}}
region: test-1
auth: {mode: none}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY, region: r-a}
  - {id: b, base_url: "{{url:b}}", api_key_env: CHANNEL_KEY, region: r-b}
  - {id: c, base_url: "{{url:c}}", api_key_env: CHANNEL_KEY, region: r-c}
models:
  - name: m
    chain:
      - {channel: a, upstream_model: m, price: {input: 1, output: 1}}
      - {channel: b, upstream_model: "m|stream-error", price: {input: 2, output: 2}}
      - {channel: c, upstream_model: m, price: {input: 3, output: 3}}
  - name: warmup
    chain:
      - {channel: a, upstream_model: "m|503", price: {input: 1, output: 1}}
`
	// The real clock: the OTLP exporter times its retries on it.
	g := gwtest.Start(t, gwtest.Options{OTELEnv: env, Clock: clockwork.NewRealClock(), UpstreamClock: clockwork.NewRealClock()}, yml, "a", "b", "c")
	ctx := context.Background()
	send := func(model string, stream bool) gwtest.Reply {
		return g.Post(gwtest.ChatBody(model, stream))
	}

	// Three failures on another model open channel a's breaker.
	for i := 0; i < 3; i++ {
		if r := send("warmup", false); r.Status != http.StatusServiceUnavailable {
			t.Fatalf("warmup %d: %d %s", i, r.Status, r.Body)
		}
	}
	r := send("m", true)
	const path = "a:open -> b:stream_error -> c:ok"
	if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != path {
		t.Fatalf("status %d path %q: %s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
	}
	id := r.Header.Get("X-Request-Id")

	// server, dispatch, skip, 2 × (hop, await headers, stream gate).
	spans := j.fetchTrace(t, id, 9, func() { _ = g.Tel.TracerProvider.ForceFlush(ctx) })
	if len(spans) != 9 {
		t.Errorf("%d spans in Jaeger, want 9", len(spans))
	}
	byName := map[string][]jspan{}
	for _, s := range spans {
		byName[s.name] = append(byName[s.name], s)
	}
	one := func(name, parent string) jspan {
		t.Helper()
		var found []jspan
		for _, s := range byName[name] {
			if s.parent == parent {
				found = append(found, s)
			}
		}
		if len(found) != 1 {
			t.Fatalf("want one %q under %q, found %d; trace: %+v", name, parent, len(found), spans)
		}
		return found[0]
	}
	root := one(telemetry.SpanServer, "")
	if root.tags["span.kind"] != "server" || root.tags[telemetry.AttrFailoverPath] != path {
		t.Errorf("root span tags: %v", root.tags)
	}
	disp := one(telemetry.SpanDispatch+" m", root.id)
	if disp.tags[telemetry.AttrFailoverPath] != path || disp.tags[telemetry.AttrHops] != "2" {
		t.Errorf("dispatch tags: %v", disp.tags)
	}
	skip := one(telemetry.SpanBreakerSkip+" a", disp.id)
	if skip.tags[telemetry.AttrBreakerState] != "open" || skip.tags[telemetry.AttrBreakerReopenAt] == "" {
		t.Errorf("breaker skip tags: %v", skip.tags)
	}
	for _, hop := range []struct {
		name, channel, decision string
	}{
		{"chat m|stream-error", "b", telemetry.GateDiscardError},
		{"chat m", "c", telemetry.GateCommitContent},
	} {
		h := one(hop.name, disp.id)
		if h.tags["span.kind"] != "client" || h.tags[telemetry.AttrChannel] != hop.channel {
			t.Errorf("%s tags: %v", hop.name, h.tags)
		}
		one(telemetry.SpanAwaitHeaders, h.id)
		if d := one(telemetry.SpanStreamGate, h.id).tags[telemetry.AttrGateDecision]; d != hop.decision {
			t.Errorf("%s gate decision %q, want %q", hop.name, d, hop.decision)
		}
		// The provider joined the trace: its traceparent names this trace
		// and this hop span.
		log := g.Ups[hop.channel].Log()
		tp := log[len(log)-1].Header.Get("Traceparent")
		if want := "00-" + id + "-" + h.id + "-01"; tp != want {
			t.Errorf("upstream %s got traceparent %q, want %q", hop.channel, tp, want)
		}
	}
	if n := len(g.Ups["a"].Log()); n != 3 {
		t.Errorf("open channel a saw %d requests, want the 3 warm-up ones", n)
	}
}
