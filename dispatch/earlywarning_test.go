package dispatch_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hopgate/hopgate/dispatch/earlywarning"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// earlyWarningYAML: "a" (cheap) and "b" (dear) with early warning on and a
// count breaker of 5: with error_fraction 0.5, three errors in the window
// (and 4 hops) demote "a" while its breaker is still closed.
const earlyWarningYAML = `
policy:
  breaker: {failures: 5}
  early_warning: {enabled: true, min_samples: 4, for: 0s, error_fraction: 0.5, window: 30s, cooldown: 2m}
`

// metricsText scrapes the gateway's /metrics.
func metricsText(h *gwtest.Gateway) string {
	rec := httptest.NewRecorder()
	h.Tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

// The request path end to end: errors demote the cheap channel before its
// breaker opens; the next request tries the dear one first and says so in
// the failover path, on the dispatch span and in the metrics, premium
// included; and the demoted channel is never skipped: when the dear one
// fails it still serves, last.
func TestEarlyWarningReordersTheChain(t *testing.T) {
	h := gwtest.New(t, twoChannels("m", "m", earlyWarningYAML), "a", "b")
	if err := h.Ups["a"].SetFault("m", "503-times=3"); err != nil {
		t.Fatal(err)
	}
	// Judgements are reused for earlywarning.EvalInterval: the clock moves
	// a second between requests, as traffic would.
	for i, want := range []string{"a:503 -> b:ok", "a:503 -> b:ok", "a:503 -> b:ok", "a:ok"} {
		h.Clock.Advance(time.Second)
		if r := h.Post(chat(false)); r.Status != 200 || r.Header.Get("X-Hopgate-Path") != want {
			t.Fatalf("request %d: %d %q, want %q", i, r.Status, r.Header.Get("X-Hopgate-Path"), want)
		}
	}
	if br := h.Engine.Breakers().All(); len(br) == 0 || br[0].Name() != "a" || br[0].State().String() != "closed" {
		t.Fatalf("a's breaker must still be closed: three failures of five")
	}

	h.Clock.Advance(time.Second)
	r := h.Post(chat(false))
	if p := r.Header.Get("X-Hopgate-Path"); r.Status != 200 || p != "a:demoted -> b:ok" {
		t.Fatalf("after the evidence: %d %q, want a:demoted -> b:ok", r.Status, p)
	}
	if d := h.Engine.Warnings().Lookup("a"); d == nil || d.State() != earlywarning.Demoted {
		t.Fatalf("a is not demoted")
	}
	var event bool
	for _, s := range h.Trace(r.Header.Get("X-Request-Id")) {
		for _, ev := range s.Events {
			if ev.Name != telemetry.EventEarlyWarning {
				continue
			}
			attrs := map[string]string{}
			for _, kv := range ev.Attributes {
				attrs[string(kv.Key)] = kv.Value.Emit()
			}
			if !strings.HasPrefix(s.Name, telemetry.SpanDispatch) || attrs[telemetry.AttrChannel] != "a" ||
				attrs[telemetry.AttrEarlyWarningReason] != earlywarning.ReasonErrorRate || attrs[telemetry.AttrEarlyWarningUntil] == "" {
				t.Errorf("event on %q: %v", s.Name, attrs)
			}
			event = true
		}
	}
	if !event {
		t.Error("no early-warning event in the trace of the reordered request")
	}
	text := metricsText(h)
	for _, want := range []string{
		`hopgate_early_warning_reordered_total{channel="a",model="m",region="test-1"} 1`,
		`hopgate_early_warning_premium_requests_total{channel="a",model="m",region="test-1"} 1`,
		`hopgate_early_warning_premium_total{channel="a",model="m",region="test-1"}`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	// The dear channel fails: the demoted one still serves, last.
	if err := h.Ups["b"].SetFault("m", "503-once"); err != nil {
		t.Fatal(err)
	}
	h.Clock.Advance(time.Second)
	if r := h.Post(chat(false)); r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:demoted -> b:503 -> a:ok" {
		t.Fatalf("dear channel failing: %d %q, want a:demoted -> b:503 -> a:ok", r.Status, r.Header.Get("X-Hopgate-Path"))
	}

	// After the cooldown the channel is back in its place, on probation.
	h.Clock.Advance(2 * time.Minute)
	if r := h.Post(chat(false)); r.Header.Get("X-Hopgate-Path") != "a:ok" {
		t.Fatalf("after the cooldown: %q, want a:ok", r.Header.Get("X-Hopgate-Path"))
	}
	if s := h.Engine.Warnings().Lookup("a").State(); s != earlywarning.Probation {
		t.Fatalf("state after the cooldown = %v, want probation", s)
	}
}

// Every hop feeds its channel's detector: header latency for every
// answer, time to first token for streams, outcomes for the error rate —
// an error inside a stream after its first token included.
func TestEveryHopFeedsTheDetector(t *testing.T) {
	h := gwtest.New(t, twoChannels("m", "m", earlyWarningYAML), "a", "b")
	for _, stream := range []bool{false, true, true} {
		if r := h.Post(chat(stream)); r.Status != 200 {
			t.Fatalf("status %d", r.Status)
		}
	}
	if err := h.Ups["a"].SetFault("m", "stream-error-after=2"); err != nil {
		t.Fatal(err)
	}
	if r := h.Post(chat(true)); r.Status != 200 || !strings.Contains(r.Body, "upstream_stream_interrupted") {
		t.Fatalf("a stream cut by an error frame: %d %s", r.Status, r.Body)
	}
	h.Clock.Advance(time.Second)
	s := h.Engine.Warnings().Lookup("a").Snapshot()
	if s.Header.Samples != 4 || s.FirstToken.Samples != 3 || s.Hops != 4 || s.Errors != 1 || s.InFlight != 0 {
		t.Fatalf("snapshot = %+v, want 4 header samples, 3 first tokens, 4 hops of which 1 error", s)
	}
	if b := h.Engine.Warnings().Lookup("b").Snapshot(); b.Hops != 0 || b.Header.Samples != 0 {
		t.Fatalf("b never served, yet its detector has %+v", b)
	}
}
