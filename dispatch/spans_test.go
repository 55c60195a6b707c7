package dispatch_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// The span-tree tests pin DESIGN.md §5 exactly: every span of a request's
// trace, its kind, its parent, its status and every attribute hopgate sets.
// A span parented to the wrong hop, a missing or extra attribute or a failed
// hop that reports usage fails here, before a dashboard or a saved search
// breaks. The expectations use the telemetry constants, so a renamed name
// fails telemetry's TestContractNames instead.

// attrs is an exact attribute set. Ports are written as PORT.
type attrs map[string]string

func (a attrs) with(b attrs) attrs {
	out := attrs{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// node is one span of an expected (or rendered actual) trace.
type node struct {
	name   string
	kind   trace.SpanKind
	status string // "" when unset, else "error" or "error: description"
	attrs  attrs
	kids   []node
}

func serverSpan(path, outcome string, status int, failed bool, kids ...node) node {
	n := node{name: telemetry.SpanServer, kind: trace.SpanKindServer, attrs: attrs{
		telemetry.AttrFailoverPath:  path,
		telemetry.AttrOutcome:       outcome,
		telemetry.AttrModel:         "m",
		"http.request.method":       "POST",
		"http.response.status_code": strconv.Itoa(status),
	}, kids: kids}
	if failed {
		n.status = "error" // otelhttp owns the description of its span
	}
	return n
}

func dispatchSpan(path, outcome string, hops int, served bool, kids ...node) node {
	n := node{name: telemetry.SpanDispatch + " m", kind: trace.SpanKindInternal, attrs: attrs{
		telemetry.AttrModel:        "m",
		telemetry.AttrChain:        "a,b",
		telemetry.AttrHops:         strconv.Itoa(hops),
		telemetry.AttrOutcome:      outcome,
		telemetry.AttrFailoverPath: path,
	}, kids: kids}
	if served {
		n.attrs[telemetry.AttrServedModel] = "m"
	}
	if outcome != telemetry.OutcomeOK && outcome != telemetry.OutcomeFailoverOK {
		n.status = "error: " + outcome
	}
	return n
}

func skipSpan(ch, region, reopenAt string) node {
	return node{name: telemetry.SpanBreakerSkip + " " + ch, kind: trace.SpanKindInternal, attrs: attrs{
		telemetry.AttrChannel:         ch,
		telemetry.AttrChannelRegion:   region,
		telemetry.AttrBreakerState:    "open",
		telemetry.AttrBreakerReopenAt: reopenAt,
	}}
}

// hopSpan is a CLIENT hop span; extra holds what depends on the hop's fate.
func hopSpan(ch, region, model string, index int, outcome, status string, extra attrs, kids ...node) node {
	return node{name: "chat " + model, kind: trace.SpanKindClient, status: status, attrs: attrs{
		telemetry.AttrGenAIOperation:    "chat",
		telemetry.AttrGenAIProvider:     "openai",
		telemetry.AttrGenAIRequestModel: model,
		telemetry.AttrChannel:           ch,
		telemetry.AttrChannelRegion:     region,
		telemetry.AttrHopIndex:          strconv.Itoa(index),
		telemetry.AttrHopOutcome:        outcome,
		"http.request.method":           "POST",
		"server.address":                "127.0.0.1",
		"server.port":                   "PORT",
		"url.full":                      "http://127.0.0.1:PORT/v1/chat/completions",
	}.with(extra), kids: kids}
}

// servedHop: only the hop that served the answer reports the response model
// and usage (the fake answers 8 tokens to a 1-token prompt).
func servedHop(ch, region string, index int) node {
	return hopSpan(ch, region, "m", index, telemetry.HopOK, "", attrs{
		"http.response.status_code":     "200",
		telemetry.AttrGenAIResponseMdl:  "m",
		telemetry.AttrGenAIInputTokens:  "1",
		telemetry.AttrGenAIOutputTokens: "8",
	}, awaitSpan(""), gateSpan(telemetry.GateCommitContent, 1, 239))
}

func awaitSpan(status string, a ...attrs) node {
	n := node{name: telemetry.SpanAwaitHeaders, kind: trace.SpanKindInternal, status: status, attrs: attrs{}}
	for _, x := range a {
		n.attrs = n.attrs.with(x)
	}
	return n
}

func gateSpan(decision string, frames, bytes int) node {
	n := node{name: telemetry.SpanStreamGate, kind: trace.SpanKindInternal, attrs: attrs{
		telemetry.AttrGateDecision:   decision,
		telemetry.AttrGateFramesHeld: strconv.Itoa(frames),
		telemetry.AttrGateBytesHeld:  strconv.Itoa(bytes),
	}}
	if decision != telemetry.GateCommitContent && decision != telemetry.GateCommitTimeout {
		n.status = "error: " + decision
	}
	return n
}

func degradedSpan(reason, mode, code string) node {
	return node{name: telemetry.SpanDegradedReply, kind: trace.SpanKindInternal, attrs: attrs{
		telemetry.AttrDegradedReason: reason,
		telemetry.AttrModel:          "m",
		"hopgate.degraded.mode":      mode,
		"hopgate.error.code":         code,
	}}
}

var portRE = regexp.MustCompile(`127\.0\.0\.1:\d+`)

// render prints a tree one span per line, attributes sorted, children in
// start order: a diff of two renders reads like a diff of two traces.
func render(n node) string {
	var b strings.Builder
	var walk func(n node, depth int)
	walk = func(n node, depth int) {
		ind := strings.Repeat("    ", depth)
		fmt.Fprintf(&b, "%s%s [%s]", ind, n.name, n.kind)
		if n.status != "" {
			fmt.Fprintf(&b, " status=%q", n.status)
		}
		b.WriteByte('\n')
		keys := make([]string, 0, len(n.attrs))
		for k := range n.attrs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s    %s=%s\n", ind, k, n.attrs[k])
		}
		for _, k := range n.kids {
			walk(k, depth+1)
		}
	}
	walk(n, 0)
	return b.String()
}

// actualTree converts the exported spans of one trace. The SERVER span is
// otelhttp's: only hopgate's attributes and the HTTP method and status are
// compared, the rest is otelhttp's contract, not ours.
func actualTree(t *testing.T, spans tracetest.SpanStubs) node {
	t.Helper()
	byParent := map[trace.SpanID][]tracetest.SpanStub{}
	var roots []tracetest.SpanStub
	for _, s := range spans {
		if !s.Parent.IsValid() {
			roots = append(roots, s)
			continue
		}
		byParent[s.Parent.SpanID()] = append(byParent[s.Parent.SpanID()], s)
	}
	if len(roots) != 1 {
		t.Fatalf("trace has %d roots, want 1", len(roots))
	}
	var conv func(s tracetest.SpanStub) node
	conv = func(s tracetest.SpanStub) node {
		n := node{name: s.Name, kind: s.SpanKind, attrs: attrs{}}
		for _, kv := range s.Attributes {
			k := string(kv.Key)
			if s.SpanKind == trace.SpanKindServer && !strings.HasPrefix(k, "hopgate.") &&
				k != "http.request.method" && k != "http.response.status_code" {
				continue
			}
			v := portRE.ReplaceAllString(kv.Value.Emit(), "127.0.0.1:PORT")
			if k == "server.port" {
				v = "PORT"
			}
			n.attrs[k] = v
		}
		for _, e := range s.Events {
			n.attrs["event "+e.Name] = fmt.Sprint(e.Attributes)
		}
		if s.Status.Code.String() == "Error" {
			n.status = "error"
			if s.SpanKind != trace.SpanKindServer && s.Status.Description != "" {
				n.status += ": " + portRE.ReplaceAllString(s.Status.Description, "127.0.0.1:PORT")
			}
		}
		kids := byParent[s.SpanContext.SpanID()]
		sort.SliceStable(kids, func(i, j int) bool { return kids[i].StartTime.Before(kids[j].StartTime) })
		for _, k := range kids {
			n.kids = append(n.kids, conv(k))
		}
		return n
	}
	return conv(roots[0])
}

// checkTrace asserts the exact tree, that the root's failover path is the
// one the client saw (pathHeader), and that every upstream request carried
// a traceparent naming this trace and its own hop span as parent.
func checkTrace(t *testing.T, h *gwtest.Gateway, r gwtest.Reply, pathHeader string, want node) {
	t.Helper()
	id := r.Header.Get("X-Request-Id")
	if len(id) != 32 {
		t.Fatalf("X-Request-Id %q is not a trace id", id)
	}
	if got := r.Header.Get("X-Hopgate-Path"); got != pathHeader {
		t.Errorf("X-Hopgate-Path = %q, want %q", got, pathHeader)
	}
	spans := h.Trace(id)
	if got, w := render(actualTree(t, spans)), render(want); got != w {
		t.Errorf("span tree mismatch\n--- got\n%s--- want\n%s", got, w)
	}
	hops := map[string]bool{}
	for _, s := range spans {
		if s.SpanKind == trace.SpanKindClient {
			hops[s.SpanContext.SpanID().String()] = true
		}
	}
	seen := map[string]bool{}
	for _, ch := range slices.Sorted(maps.Keys(h.Ups)) {
		for _, req := range h.Ups[ch].Log() {
			tp := req.Header.Get("Traceparent")
			parts := strings.Split(tp, "-")
			if len(parts) != 4 {
				t.Fatalf("upstream %s got traceparent %q", ch, tp)
			}
			if parts[1] != id {
				continue // an earlier request of the test
			}
			if !hops[parts[2]] || parts[3] != "01" {
				t.Errorf("upstream %s got traceparent %q: parent is not a sampled hop span of the trace", ch, tp)
			}
			seen[parts[2]] = true
		}
	}
	if len(seen) != len(hops) {
		t.Errorf("%d hop spans but %d upstream requests carried this trace's traceparent", len(hops), len(seen))
	}
}

// TestSpanTreeBreakerSkip: an open channel appears as a breaker-skip span
// with its state and reopen time, and costs no hop span.
func TestSpanTreeBreakerSkip(t *testing.T) {
	h := gwtest.New(t, twoChannels("m", "m", ""), "a", "b")
	if err := h.Ups["a"].SetFault("m", "503"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		h.Post(chat(false)) // three failures open a at 12:00:00 for 60 s
	}
	r := h.Post(chat(true))
	path := "a:open -> b:ok"
	checkTrace(t, h, r, path,
		serverSpan(path, telemetry.OutcomeFailoverOK, 200, false,
			dispatchSpan(path, telemetry.OutcomeFailoverOK, 1, true,
				skipSpan("a", "r-a", "2026-11-29T12:01:00Z"),
				servedHop("b", "r-b", 0))))
}

// TestSpanTree503ThenSuccess: a failed hop carries the upstream status as
// error.type, an error status and no usage; it has no gate (no 200).
func TestSpanTree503ThenSuccess(t *testing.T) {
	h := gwtest.New(t, twoChannels("m|503", "m", ""), "a", "b")
	r := h.Post(chat(true))
	path := "a:503 -> b:ok"
	checkTrace(t, h, r, path,
		serverSpan(path, telemetry.OutcomeFailoverOK, 200, false,
			dispatchSpan(path, telemetry.OutcomeFailoverOK, 2, true,
				hopSpan("a", "r-a", "m|503", 0, telemetry.HopRetryable, "error: 503", attrs{
					telemetry.AttrErrorType:     "503",
					"http.response.status_code": "503",
				}, awaitSpan("")),
				servedHop("b", "r-b", 1))))
}

// TestSpanTreeHeaderTimeout: the header timeout is an error on "await
// headers" with error.type=header_timeout, and the hop's outcome says so.
func TestSpanTreeHeaderTimeout(t *testing.T) {
	h := gwtest.New(t, twoChannels("m|no-headers", "m", "    policy: {header_timeout: 10s}\n"), "a", "b")
	done := h.Async(chat(true))
	h.WaitAttempts("a", "m|no-headers", 1)
	h.WaitTimers(1)
	h.Clock.Advance(10 * time.Second)
	r := testkit.Recv(t, done, "the reply")
	path := "a:header_timeout -> b:ok"
	checkTrace(t, h, r, path,
		serverSpan(path, telemetry.OutcomeFailoverOK, 200, false,
			dispatchSpan(path, telemetry.OutcomeFailoverOK, 2, true,
				hopSpan("a", "r-a", "m|no-headers", 0, telemetry.HopHeaderTimeout, "error: header_timeout", attrs{
					telemetry.AttrErrorType: telemetry.ErrTypeHeaderTimeout,
				}, awaitSpan("error: header timeout after 10s", attrs{telemetry.AttrErrorType: telemetry.ErrTypeHeaderTimeout})),
				servedHop("b", "r-b", 1))))
}

// TestSpanTreeGateDiscard: a 200 whose stream carries an error frame is a
// discard_error gate decision under a failed hop, then the next hop commits.
func TestSpanTreeGateDiscard(t *testing.T) {
	h := gwtest.New(t, twoChannels("m|stream-error", "m", ""), "a", "b")
	r := h.Post(chat(true))
	path := "a:stream_error -> b:ok"
	checkTrace(t, h, r, path,
		serverSpan(path, telemetry.OutcomeFailoverOK, 200, false,
			dispatchSpan(path, telemetry.OutcomeFailoverOK, 2, true,
				hopSpan("a", "r-a", "m|stream-error", 0, telemetry.HopRetryable, "error: stream_error", attrs{
					telemetry.AttrErrorType:     telemetry.ErrTypeStreamError,
					"http.response.status_code": "200",
				}, awaitSpan(""), gateSpan(telemetry.GateDiscardError, 1, 252)),
				servedHop("b", "r-b", 1))))
}

// TestSpanTreeGateTimeoutCommit: nothing decisive within the gate timeout
// with on_timeout commit is commit_timeout; the slow hop still serves.
func TestSpanTreeGateTimeoutCommit(t *testing.T) {
	h := gwtest.New(t, twoChannels("m|slow-first-token=60s", "m",
		"    policy: {stream_gate: {timeout: 30s, on_timeout: commit}}\n"), "a", "b")
	headers, gated := h.SpanEnds(telemetry.SpanAwaitHeaders), h.SpanEnds(telemetry.SpanStreamGate)
	done := h.Async(chat(true))
	testkit.Recv(t, headers, "response headers")
	h.WaitArmed(30 * time.Second) // the gate's timer (the chain deadline is armed too)
	h.Clock.Advance(30 * time.Second)
	testkit.Recv(t, gated, "gate decision")
	// The first token arrives after the commit, once the fake waits for it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.UpClock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal("the fake never waited for its first token")
	}
	h.UpClock.Advance(60 * time.Second)
	r := testkit.Recv(t, done, "the reply")
	// The fake's ": keep-alive" comment races the gate timer over real
	// sockets: the gate held it (1 frame, 14 bytes) or had not read it yet.
	frames, bytes := 0, 0
	for _, s := range h.Trace(r.Header.Get("X-Request-Id")) {
		for _, kv := range s.Attributes {
			if s.Name == telemetry.SpanStreamGate && string(kv.Key) == telemetry.AttrGateFramesHeld && kv.Value.AsInt64() == 1 {
				frames, bytes = 1, 14
			}
		}
	}
	path := "a:ok"
	model := "m|slow-first-token=60s"
	root := serverSpan(path, telemetry.OutcomeOK, 200, false,
		dispatchSpan(path, telemetry.OutcomeOK, 1, true,
			hopSpan("a", "r-a", model, 0, telemetry.HopOK, "", attrs{
				"http.response.status_code":     "200",
				telemetry.AttrGenAIResponseMdl:  model,
				telemetry.AttrGenAIInputTokens:  "1",
				telemetry.AttrGenAIOutputTokens: "8",
			}, awaitSpan(""), gateSpan(telemetry.GateCommitTimeout, frames, bytes))))
	// A gate timeout that committed is not a failure, but the trace is kept.
	root.attrs[telemetry.AttrTimedOut] = "true"
	checkTrace(t, h, r, path, root)
}

// TestSpanTreeMidStreamCut: a stream cut after commit is an interrupted
// request; the hop says why (error.type, hopgate.stream.end) and reports no
// usage. X-Hopgate-Path left with the status line at commit ("a:ok"); only
// the trace can tell the end of the story ("a:cut").
func TestSpanTreeMidStreamCut(t *testing.T) {
	h := gwtest.New(t, twoChannels("m|cut=3", "m", ""), "a", "b")
	r := h.Post(chat(true))
	if !strings.Contains(r.Body, "upstream_stream_interrupted") {
		t.Fatalf("no in-band interruption: %s", r.Body)
	}
	path := "a:cut"
	checkTrace(t, h, r, "a:ok",
		serverSpan(path, telemetry.OutcomeInterrupted, 200, true,
			dispatchSpan(path, telemetry.OutcomeInterrupted, 1, true,
				hopSpan("a", "r-a", "m|cut=3", 0, telemetry.HopRetryable, "error: cut", attrs{
					"http.response.status_code": "200",
					telemetry.AttrStreamEnd:     "interrupted",
					telemetry.AttrErrorType:     telemetry.ErrTypeStreamInterrupted,
				}, awaitSpan(""), gateSpan(telemetry.GateCommitContent, 1, 245)))))
}

// TestSpanTreeDeadlineDegraded: the chain deadline ends the in-flight hop
// (kept in the path as "a:deadline") and the reply is the degraded-reply
// span under dispatch; both the error and the 200 message mode.
func TestSpanTreeDeadlineDegraded(t *testing.T) {
	for _, tc := range []struct {
		mode, outcome, code string
		status              int
	}{
		{"error", telemetry.OutcomeDeadline, "engine_overloaded", http.StatusServiceUnavailable},
		{"message", telemetry.OutcomeDegraded, "engine_overloaded", http.StatusOK},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			h := gwtest.New(t, twoChannels("m|no-headers", "m",
				"    policy: {chain_deadline: 5s, degraded_reply: {mode: "+tc.mode+", message: busy}}\n"), "a", "b")
			done := h.Async(chat(true))
			h.WaitAttempts("a", "m|no-headers", 1)
			h.WaitTimers(2) // chain deadline and header timeout
			h.Clock.Advance(5 * time.Second)
			r := testkit.Recv(t, done, "the reply")
			if r.Status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.Status, tc.status, r.Body)
			}
			path := "a:deadline"
			checkTrace(t, h, r, path,
				serverSpan(path, tc.outcome, tc.status, true,
					dispatchSpan(path, tc.outcome, 1, false,
						hopSpan("a", "r-a", "m|no-headers", 0, telemetry.HopRetryable, "error: deadline", attrs{
							telemetry.AttrErrorType: "deadline",
						}, awaitSpan(`error: Post "http://127.0.0.1:PORT/v1/chat/completions": chain deadline exceeded before an answer was committed`)),
						degradedSpan("chain_deadline", tc.mode, tc.code))))
		})
	}
}
