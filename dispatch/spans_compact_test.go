package dispatch_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// The engine records a request's spans compactly and builds them only for
// a kept trace (telemetry/record.go). These tests hold what it exports to
// what the same requests export when every span is an SDK span from its
// start (gwtest.Options.PlainSpans): the same tree, names, kinds,
// statuses, attributes, events, resource and scope, span for span. The
// scenarios cover every span hopgate records and every way one is
// written (attributes at start and end, dropped fields, stream ends,
// exception events, a forced skip's event, continuations).

// spanScenario runs one scripted request on a gateway built with o.
type spanScenario struct {
	name string
	run  func(t *testing.T, o gwtest.Options) (*gwtest.Gateway, gwtest.Reply)
}

// onTwo posts body once to twoChannels(upA, upB, extra).
func onTwo(upA, upB, extra string, stream bool) func(*testing.T, gwtest.Options) (*gwtest.Gateway, gwtest.Reply) {
	return func(t *testing.T, o gwtest.Options) (*gwtest.Gateway, gwtest.Reply) {
		h := gwtest.NewWith(t, o, twoChannels(upA, upB, extra), "a", "b")
		return h, h.Post(chat(stream))
	}
}

// onFamilies sends body to path on the five-family gateway.
func onFamilies(secret string, models map[string]string, path, body string, hdr map[string]string) func(*testing.T, gwtest.Options) (*gwtest.Gateway, gwtest.Reply) {
	return func(t *testing.T, o gwtest.Options) (*gwtest.Gateway, gwtest.Reply) {
		if secret == "" {
			secret = upstream.DefaultAWSSecretAccessKey
		}
		fo := familiesOptions(secret)
		fo.PlainSpans = o.PlainSpans
		h := newFamiliesWith(t, fo, models)
		return h, send(t, h, path, body, hdr)
	}
}

var spanScenarios = []spanScenario{
	{"healthy stream", onTwo("m", "m", "", true)},
	{"healthy completion", onTwo("m", "m", "", false)},
	{"503 then ok", onTwo("m|503", "m", "", true)},
	{"gate discard", onTwo("m|stream-error", "m", "", true)},
	{"mid-stream cut", onTwo("m|cut=3", "m", "", true)},
	{"final error", onTwo("m|400", "m", "", false)},
	{"breaker skip", func(t *testing.T, o gwtest.Options) (*gwtest.Gateway, gwtest.Reply) {
		h := gwtest.NewWith(t, o, twoChannels("m|503", "m", ""), "a", "b")
		for range 3 {
			h.Post(chat(false)) // opens a
		}
		return h, h.Post(chat(true))
	}},
	{"forced trial", func(t *testing.T, o gwtest.Options) (*gwtest.Gateway, gwtest.Reply) {
		h := gwtest.NewWith(t, o, `
region: test-1
auth: {mode: none}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY, region: r-a}
models:
  - name: m
    chain: [{channel: a, upstream_model: "m|503"}]
`, "a")
		for range 3 {
			h.Post(chat(false)) // opens a, the only channel
		}
		return h, h.Post(chat(false))
	}},
	{"retry backoff", func(t *testing.T, o gwtest.Options) (*gwtest.Gateway, gwtest.Reply) {
		cfg := strings.Replace(twoChannels("m|503:ra=1", "m", ""),
			"api_key_env: CHANNEL_KEY, region: r-a}", "api_key_env: CHANNEL_KEY, region: r-a, retries: 1}", 1)
		h := gwtest.NewWith(t, o, cfg, "a", "b")
		done := h.Async(chat(false))
		h.WaitSpanEnd(telemetry.SpanAwaitHeaders, 1) // a's 503 arrived
		h.WaitTimers(1)                              // the backoff (its Retry-After)
		h.Clock.Advance(time.Second)
		return h, testkit.Recv(t, done, "the reply")
	}},
	{"header timeout", func(t *testing.T, o gwtest.Options) (*gwtest.Gateway, gwtest.Reply) {
		h := gwtest.NewWith(t, o, twoChannels("m|no-headers", "m", "    policy: {header_timeout: 10s}\n"), "a", "b")
		done := h.Async(chat(true))
		h.WaitAttempts("a", "m|no-headers", 1)
		h.WaitTimers(1)
		h.Clock.Advance(10 * time.Second)
		return h, testkit.Recv(t, done, "the reply")
	}},
	{"deadline degraded", func(t *testing.T, o gwtest.Options) (*gwtest.Gateway, gwtest.Reply) {
		h := gwtest.NewWith(t, o, twoChannels("m|no-headers", "m",
			"    policy: {chain_deadline: 5s, degraded_reply: {mode: message, message: busy}}\n"), "a", "b")
		done := h.Async(chat(true))
		h.WaitAttempts("a", "m|no-headers", 1)
		h.WaitTimers(2)
		h.Clock.Advance(5 * time.Second)
		return h, testkit.Recv(t, done, "the reply")
	}},
	{"resume by prefill", func(t *testing.T, o gwtest.Options) (*gwtest.Gateway, gwtest.Reply) {
		h := gwtest.NewWith(t, o, resumeChannels("m|tokens=60|cut=40", "m|tokens=60", true, "    policy: {mid_stream: resume}\n"), "a", "b")
		return h, h.Post(chat(true))
	}},
	{"resume by replay after a refused prefill", func(t *testing.T, o gwtest.Options) (*gwtest.Gateway, gwtest.Reply) {
		h := gwtest.NewWith(t, o, resumeChannels("m|tokens=60|cut=40", "m|tokens=60|reject-prefill", true, "    policy: {mid_stream: resume}\n"), "a", "b")
		return h, h.Post(chat(true))
	}},
	{"early-warning demotion event", func(t *testing.T, o gwtest.Options) (*gwtest.Gateway, gwtest.Reply) {
		h := gwtest.NewWith(t, o, twoChannels("m", "m", earlyWarningYAML), "a", "b")
		if err := h.Ups["a"].SetFault("m", "503-times=3"); err != nil {
			t.Fatal(err)
		}
		for range 4 { // three errors and a success demote a (TestEarlyWarningReordersTheChain)
			h.Clock.Advance(time.Second)
			h.Post(chat(false))
		}
		h.Clock.Advance(time.Second)
		r := h.Post(chat(false))
		if p := r.Header.Get("X-Hopgate-Path"); p != "a:demoted -> b:ok" {
			t.Fatalf("path %q, want a:demoted -> b:ok", p)
		}
		return h, r
	}},
	{"translated, fields dropped", onFamilies("", map[string]string{}, "/v1/chat/completions",
		chatBody("m-an", true, `,"temperature":1.5`), nil)},
	{"anthropic client on bedrock, betas", onFamilies("", map[string]string{}, "/v1/messages",
		messagesBody("m-br", true, ""), map[string]string{"anthropic-version": "2023-06-01", "anthropic-beta": "no-such-beta-2099-01-01"})},
	{"refused credential: exception event", onFamilies("not-the-secret", map[string]string{"CLAUDE_AN": "claude|503"}, "/v1/chat/completions",
		chatBody("claude", false, ""), nil)},
}

func TestCompactSpansMatchSDKSpans(t *testing.T) {
	for _, sc := range spanScenarios {
		t.Run(sc.name, func(t *testing.T) {
			var got [2]string
			for i, plain := range []bool{false, true} {
				o := gwtest.Options{PlainSpans: plain}
				h, r := sc.run(t, o)
				spans := h.Trace(r.Header.Get("X-Request-Id"))
				if len(spans) < 2 {
					t.Fatalf("plain=%v: %d spans exported", plain, len(spans))
				}
				got[i] = exportedTree(t, spans)
				checkTraceparents(t, h, r.Header.Get("X-Request-Id"), spans)
			}
			if got[0] != got[1] {
				t.Errorf("compact and SDK spans differ\n--- compact\n%s--- SDK spans\n%s", got[0], got[1])
			}
		})
	}
}

// checkTraceparents: every upstream request of trace id named a sampled
// CLIENT span of the exported trace as its parent, each a different one.
func checkTraceparents(t *testing.T, h *gwtest.Gateway, id string, spans tracetest.SpanStubs) {
	t.Helper()
	hops := map[string]bool{}
	for _, s := range spans {
		if s.SpanKind == trace.SpanKindClient {
			hops[s.SpanContext.SpanID().String()] = true
		}
	}
	seen := map[string]bool{}
	for ch, up := range h.Ups {
		for _, req := range up.Log() {
			parts := strings.Split(req.Header.Get("Traceparent"), "-")
			if len(parts) != 4 || parts[1] != id {
				continue
			}
			if !hops[parts[2]] || parts[3] != "01" || seen[parts[2]] {
				t.Errorf("upstream %s got traceparent %q: not a sampled hop span of the trace, or one named twice", ch, req.Header.Get("Traceparent"))
			}
			seen[parts[2]] = true
		}
	}
	if len(seen) == 0 {
		t.Error("no upstream request carried the trace's traceparent")
	}
}

// exportedTree renders every exported field of a trace but ids and times:
// the tree by parent links, children sorted by their rendering (their
// order is not part of the contract; spans_test orders by start time).
// Loopback ports differ between gateways and are masked.
func exportedTree(t *testing.T, spans tracetest.SpanStubs) string {
	t.Helper()
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext.SpanID()] = true
	}
	kids := map[trace.SpanID][]tracetest.SpanStub{}
	var roots []tracetest.SpanStub
	for _, s := range spans {
		if s.SpanContext.TraceID() != spans[0].SpanContext.TraceID() {
			t.Fatalf("spans of two traces")
		}
		if !s.Parent.IsValid() || !ids[s.Parent.SpanID()] {
			roots = append(roots, s)
			continue
		}
		kids[s.Parent.SpanID()] = append(kids[s.Parent.SpanID()], s)
	}
	if len(roots) != 1 {
		t.Fatalf("%d roots", len(roots))
	}
	mask := func(s string) string { return portRE.ReplaceAllString(s, "127.0.0.1:PORT") }
	var walk func(s tracetest.SpanStub, depth int) string
	walk = func(s tracetest.SpanStub, depth int) string {
		var b strings.Builder
		ind := strings.Repeat("  ", depth)
		fmt.Fprintf(&b, "%s%s [%s] status=%s %q scope=%v resource=%s sampled=%v remote-parent=%v links=%d dropped=%d/%d/%d",
			ind, s.Name, s.SpanKind, s.Status.Code, mask(s.Status.Description), s.InstrumentationScope,
			s.Resource.Encoded(attribute.DefaultEncoder()), s.SpanContext.IsSampled(), s.Parent.IsRemote(),
			len(s.Links), s.DroppedAttributes, s.DroppedEvents, s.DroppedLinks)
		if s.SpanKind != trace.SpanKindServer {
			// otelhttp's span counts the dispatch span as its child only
			// when it is an SDK span; OTLP does not carry the count.
			fmt.Fprintf(&b, " children=%d", s.ChildSpanCount)
		}
		b.WriteByte('\n')
		b.WriteString(attrLines(ind+"    ", s.Attributes, mask))
		for _, e := range s.Events {
			fmt.Fprintf(&b, "%s    event %q dropped=%d\n", ind, mask(e.Name), e.DroppedAttributeCount)
			b.WriteString(attrLines(ind+"      ", e.Attributes, mask))
		}
		var sub []string
		for _, k := range kids[s.SpanContext.SpanID()] {
			sub = append(sub, walk(k, depth+1))
		}
		sort.Strings(sub)
		b.WriteString(strings.Join(sub, ""))
		return b.String()
	}
	return walk(roots[0], 0)
}

func attrLines(ind string, kvs []attribute.KeyValue, mask func(string) string) string {
	lines := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		v := mask(kv.Value.Emit())
		if strings.HasSuffix(string(kv.Key), ".port") {
			v = "PORT"
		}
		lines = append(lines, fmt.Sprintf("%s%s=%s (%s)\n", ind, kv.Key, v, kv.Value.Type()))
	}
	sort.Strings(lines)
	return strings.Join(lines, "")
}

// Hop-latency exemplars link to the hop span a kept trace exports: the
// span id the compact recorder assigned when the hop started is the one
// the exemplar carries and the trace holds. At a healthy ratio of 0 a
// healthy request leaves no exemplar (its trace is dropped) while a
// failover's links to its exported failed hop.
func TestExemplarsLinkExportedHops(t *testing.T) {
	exemplars := func(h *gwtest.Gateway) string {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0; charset=utf-8")
		h.Tel.MetricsHandler().ServeHTTP(rec, req)
		var out []string
		for _, l := range strings.Split(rec.Body.String(), "\n") {
			if strings.HasPrefix(l, "hopgate_hop_duration_seconds_bucket") && strings.Contains(l, " # {") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	hopIDs := func(spans tracetest.SpanStubs) []string {
		var ids []string
		for _, s := range spans {
			if s.SpanKind == trace.SpanKindClient {
				ids = append(ids, s.SpanContext.SpanID().String())
			}
		}
		return ids
	}

	h := gwtest.New(t, twoChannels("m", "m", ""), "a", "b")
	r := h.Post(chat(true))
	id := r.Header.Get("X-Request-Id")
	ids := hopIDs(h.Trace(id))
	ex := exemplars(h)
	if len(ids) != 1 || !strings.Contains(ex, `trace_id="`+id+`"`) || !strings.Contains(ex, `span_id="`+ids[0]+`"`) {
		t.Fatalf("trace %s, hop spans %v; exemplars:\n%s", id, ids, ex)
	}

	h = gwtest.New(t, twoChannels("m", "m", "telemetry: {healthy_sample_ratio: 0}\n"), "a", "b")
	healthy := h.Post(chat(false)).Header.Get("X-Request-Id")
	if got := h.Trace(healthy); len(got) != 0 {
		t.Fatalf("healthy trace exported at ratio 0: %d spans", len(got))
	}
	if ex := exemplars(h); strings.Contains(ex, healthy) {
		t.Fatalf("exemplar links the dropped healthy trace %s:\n%s", healthy, ex)
	}
	if err := h.Ups["a"].SetFault("m", "503"); err != nil {
		t.Fatal(err)
	}
	r = h.Post(chat(false))
	id = r.Header.Get("X-Request-Id")
	ids = hopIDs(h.Trace(id))
	ex = exemplars(h)
	if r.Header.Get("X-Hopgate-Path") != "a:503 -> b:ok" || len(ids) != 2 || !strings.Contains(ex, `trace_id="`+id+`"`) {
		t.Fatalf("path %q, hop spans %v; exemplars:\n%s", r.Header.Get("X-Hopgate-Path"), ids, ex)
	}
	for _, l := range strings.Split(ex, "\n") {
		if strings.Contains(l, id) && !strings.Contains(l, ids[0]) && !strings.Contains(l, ids[1]) {
			t.Fatalf("exemplar of trace %s names no exported hop span (%v): %s", id, ids, l)
		}
	}
}
