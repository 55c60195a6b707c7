package telemetry

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// scrape fetches MetricsHandler output with the given Accept header.
func scrape(t *testing.T, tel *Telemetry, accept string) string {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d", rec.Code)
	}
	body, _ := io.ReadAll(rec.Body)
	return string(body)
}

type family struct {
	typ    string
	labels map[string]bool
}

// parseText reads the Prometheus text format (0.0.4): family names and types
// from # TYPE lines, label names from samples (minus histogram "le").
func parseText(t *testing.T, body string) map[string]*family {
	t.Helper()
	fams := map[string]*family{}
	for line := range strings.Lines(body) {
		line = strings.TrimSpace(line)
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(f, " ")
			fams[name] = &family{typ: typ, labels: map[string]bool{}}
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, hasLabels := strings.Cut(line, "{")
		if !hasLabels {
			continue
		}
		fam := fams[name]
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if fam == nil {
				fam = fams[strings.TrimSuffix(name, suffix)]
			}
		}
		if fam == nil {
			t.Fatalf("sample without family: %q", line)
		}
		labels, _, _ := strings.Cut(rest, "}")
		for kv := range strings.SplitSeq(labels, ",") {
			k, _, _ := strings.Cut(kv, "=")
			if k != "le" && k != "" {
				fam.labels[k] = true
			}
		}
	}
	return fams
}

func recordEverything(ctx context.Context, m *Metrics) {
	m.ObserveBreakers(func() []BreakerObservation {
		return []BreakerObservation{{Channel: "a", ChannelRegion: "us-east-1", State: 2}}
	})
	m.BreakerTransition(ctx, "a", "us-east-1", "closed", "open")
	m.BreakerSkip(ctx, "a", "us-east-1", "gpt")
	m.Hop(ctx, "a", "us-east-1", "gpt", OperationChat, HopRetryable, 1500*time.Millisecond)
	m.Request(ctx, "gpt", OperationChat, OutcomeFailoverOK)
	m.GateDecision(ctx, "b", "gpt", GateCommitContent, 300*time.Millisecond)
	m.HeaderTimeout(ctx, "a", "gpt")
	m.ChainExceeded(ctx, "gpt")
	m.Degraded(ctx, "gpt", OutcomeDeadline)
	m.Cost(ctx, "b", "gpt", 0.25)
	m.MalformedFrame(ctx, "b", "gpt")
	m.StreamInterrupted(ctx, "b", "gpt")
	m.GenAI(ctx, OperationChat, "openai", "gpt", "gpt-2025", "", 2*time.Second, 10, 20)
	m.GenAI(ctx, OperationChat, "openai", "gpt", "", "503", time.Second, 0, 0)
	m.ObserveEarlyWarning(func() []EarlyWarningObservation {
		return []EarlyWarningObservation{{Channel: "a", ChannelRegion: "us-east-1", Demoted: true}, {Channel: "b", ChannelRegion: "eu-west-1"}}
	})
	m.EarlyWarningDemotion(ctx, "a", "us-east-1", "header_latency")
	m.EarlyWarningReordered(ctx, "a", "gpt")
	m.EarlyWarningPremium(ctx, "a", "gpt", 0.5)
	m.EarlyWarningPremium(ctx, "a", "gpt", 0) // served without usage: a request, no dollars
	m.ObserveOverload(func() OverloadObservation {
		return OverloadObservation{BudgetUsed: 1 << 20, BudgetLimit: 256 << 20, InFlight: 7, Streams: 3}
	})
	m.Shed(ctx, "budget")
}

// The contract of DESIGN.md §5: every metric name and label set exactly as
// Prometheus sees it. Dashboards and alerts break if one drifts.
func TestMetricNamesAndLabels(t *testing.T) {
	tel, err := Setup(context.Background(), Options{
		Region: "eu-west-1", HealthyRatio: 1, Getenv: func(string) string { return "" },
		SpanExporter: newConsoleExporter(io.Discard), // enables the tail sampler and its metric
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	recordEverything(context.Background(), tel.Metrics)

	body := scrape(t, tel, "")
	fams := parseText(t, body)
	hop := []string{"region", "channel", "channel_region", "model", "operation", "outcome"}
	gate := []string{"region", "channel", "model", "decision"}
	chanModel := []string{"region", "channel", "model"}
	genai := []string{"region", LabelGenAIOperation, LabelGenAIProvider, LabelGenAIRequestModel, LabelGenAIResponseModel}
	want := map[string]struct {
		typ    string
		labels []string
	}{
		MetricBreakerState:       {"gauge", []string{"region", "channel", "channel_region"}},
		MetricBreakerTransitions: {"counter", []string{"region", "channel", "channel_region", "from", "to"}},
		MetricBreakerSkips:       {"counter", []string{"region", "channel", "channel_region", "model"}},
		MetricHops:               {"counter", hop},
		MetricHopDuration:        {"histogram", hop},
		MetricRequests:           {"counter", []string{"region", "model", "operation", "outcome"}},
		MetricGateDecisions:      {"counter", gate},
		MetricGateWait:           {"histogram", gate},
		MetricHeaderTimeouts:     {"counter", chanModel},
		MetricChainExceeded:      {"counter", []string{"region", "model"}},
		MetricDegradedReplies:    {"counter", []string{"region", "model", "reason"}},
		MetricCost:               {"counter", chanModel},
		MetricMalformedFrames:    {"counter", chanModel},
		MetricStreamInterrupted:  {"counter", chanModel},
		MetricTraceDecisions:     {"counter", []string{"region", "decision"}},
		// Early warning (DESIGN.md §12).
		MetricEarlyWarningDemoted:         {"gauge", []string{"region", "channel", "channel_region"}},
		MetricEarlyWarningDemotions:       {"counter", []string{"region", "channel", "channel_region", "reason"}},
		MetricEarlyWarningReordered:       {"counter", chanModel},
		MetricEarlyWarningPremiumRequests: {"counter", chanModel},
		MetricEarlyWarningPremium:         {"counter", chanModel},
		PromGenAIDuration:                 {"histogram", append(slices.Clone(genai), LabelErrorType)},
		PromGenAITokenUsage:               {"histogram", append(slices.Clone(genai), LabelGenAITokenType)},
		// Overload protection (DESIGN.md §13; docs/config.md names them).
		MetricBudgetUsed:  {"gauge", []string{"region"}},
		MetricBudgetLimit: {"gauge", []string{"region"}},
		MetricInFlight:    {"gauge", []string{"region"}},
		MetricStreamsOpen: {"gauge", []string{"region"}},
		MetricShed:        {"counter", []string{"region", LabelShedReason}},
	}
	for name, w := range want {
		f := fams[name]
		if f == nil {
			t.Errorf("missing metric %s", name)
			continue
		}
		if f.typ != w.typ {
			t.Errorf("%s: type %s, want %s", name, f.typ, w.typ)
		}
		got := slices.Sorted(maps.Keys(f.labels))
		if exp := slices.Sorted(slices.Values(w.labels)); !slices.Equal(got, exp) {
			t.Errorf("%s: labels %v, want %v", name, got, exp)
		}
	}
	// Nothing else in our namespaces: a stray name is a contract change too.
	for name := range fams {
		if (strings.HasPrefix(name, "hopgate_") || strings.HasPrefix(name, "gen_ai_")) && want[name].typ == "" {
			t.Errorf("unexpected metric %s", name)
		}
	}
	if strings.Contains(body, "otel_scope_") {
		t.Error("otel_scope_* labels leak into the series")
	}
	for _, must := range []string{
		`hopgate_cost_total{channel="b",model="gpt",region="eu-west-1"} 0.25`,
		`hopgate_breaker_state{channel="a",channel_region="us-east-1",region="eu-west-1"} 2`,
		`hopgate_early_warning_demoted{channel="a",channel_region="us-east-1",region="eu-west-1"} 1`,
		`hopgate_early_warning_demoted{channel="b",channel_region="eu-west-1",region="eu-west-1"} 0`,
		`hopgate_early_warning_premium_requests_total{channel="a",model="gpt",region="eu-west-1"} 2`,
		`hopgate_early_warning_premium_total{channel="a",model="gpt",region="eu-west-1"} 0.5`,
		`hopgate_buffer_budget_used_bytes{region="eu-west-1"} 1.048576e+06`,
		`hopgate_requests_in_flight{region="eu-west-1"} 7`,
		`hopgate_streams_open{region="eu-west-1"} 3`,
		`hopgate_shed_requests_total{reason="budget",region="eu-west-1"} 1`,
		`hopgate_shed_requests_total{reason="in_flight",region="eu-west-1"} 0`, // every reason from the start
		`hopgate_shed_requests_total{reason="streams",region="eu-west-1"} 0`,
		`hopgate_hop_duration_seconds_bucket{channel="a",channel_region="us-east-1",model="gpt",operation="chat",outcome="retryable",region="eu-west-1",le="2"} 1`,
		`hopgate_hop_duration_seconds_bucket{channel="a",channel_region="us-east-1",model="gpt",operation="chat",outcome="retryable",region="eu-west-1",le="300"} 1`,
		"go_goroutines", "target_info",
	} {
		if !strings.Contains(body, must) {
			t.Errorf("scrape lacks %q", must)
		}
	}
	if t.Failed() {
		t.Log(body)
	}
}

// ObserveBreakers replaces the callback on config reload: removed channels
// disappear from the gauge instead of lingering.
func TestObserveBreakersReplaces(t *testing.T) {
	tel := Noop()
	defer tel.Shutdown(context.Background())
	tel.Metrics.ObserveBreakers(func() []BreakerObservation { return []BreakerObservation{{Channel: "old"}} })
	tel.Metrics.ObserveBreakers(func() []BreakerObservation { return []BreakerObservation{{Channel: "new", State: 1}} })
	body := scrape(t, tel, "")
	if strings.Contains(body, `channel="old"`) || !strings.Contains(body, `hopgate_breaker_state{channel="new",channel_region="",region=""} 1`) {
		t.Fatalf("breaker gauge not replaced:\n%s", grep(body, "hopgate_breaker_state"))
	}
}

func grep(body, substr string) string {
	var out []string
	for line := range strings.Lines(body) {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}

const openMetrics = "application/openmetrics-text; version=1.0.0; charset=utf-8"

// Hop latency links to its trace: the exemplar with trace_id must reach the
// OpenMetrics output, or the dashboard's exemplar links are dead.
func TestHopExemplarCarriesTraceID(t *testing.T) {
	tel := Noop()
	defer tel.Shutdown(context.Background())
	ctx, span := tel.Tracer.Start(context.Background(), "chat m")
	tel.Metrics.Hop(ctx, "a", "eu", "gpt", OperationChat, HopOK, 2*time.Second)
	span.End()
	id := span.SpanContext().TraceID().String()
	body := scrape(t, tel, openMetrics)
	lines := grep(body, "hopgate_hop_duration_seconds_bucket")
	exemplar := grep(lines, " # {")
	if !strings.Contains(exemplar, `le="2.0"} 1 # {`) || !strings.Contains(exemplar, `trace_id="`+id+`"`) ||
		!strings.Contains(exemplar, `span_id="`+span.SpanContext().SpanID().String()+`"`) {
		t.Fatalf("no exemplar with trace_id %s:\n%s", id, lines)
	}
}

// With a healthy ratio below 1 an ok hop's exemplar would point at a trace
// the tail sampler may drop; a failed hop's trace is always kept.
func TestExemplarOnlyForKeptTraces(t *testing.T) {
	tel := setupTest(t, Options{HealthyRatio: 0})
	okCtx, okSpan := tel.Tracer.Start(context.Background(), "ok hop")
	tel.Metrics.Hop(okCtx, "a", "eu", "gpt", OperationChat, HopOK, time.Second)
	okSpan.End()
	badCtx, badSpan := tel.Tracer.Start(context.Background(), "bad hop")
	tel.Metrics.Hop(badCtx, "b", "eu", "gpt", OperationChat, HopRetryable, time.Second)
	badSpan.End()

	lines := grep(scrape(t, tel, openMetrics), "hopgate_hop_duration_seconds_bucket")
	if strings.Contains(lines, okSpan.SpanContext().TraceID().String()) {
		t.Errorf("exemplar for a healthy trace dropped at ratio 0:\n%s", lines)
	}
	if !strings.Contains(lines, badSpan.SpanContext().TraceID().String()) {
		t.Errorf("no exemplar for the failed hop's trace:\n%s", lines)
	}
}

// A nil *Metrics is a valid no-op, so callers need no guards in tests.
func TestNilMetrics(t *testing.T) {
	var m *Metrics
	recordEverything(context.Background(), m)
}

func BenchmarkHop(b *testing.B) {
	tel := Noop()
	defer tel.Shutdown(context.Background())
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled}))
	b.ReportAllocs()
	for b.Loop() {
		tel.Metrics.Hop(ctx, "a", "eu", "gpt", OperationChat, HopOK, time.Second)
	}
}

// BenchmarkGenAI: the per-request GenAI metrics (duration and both token
// counts) reuse cached attribute sets, so recording them does not allocate.
func BenchmarkGenAI(b *testing.B) {
	tel := Noop()
	defer tel.Shutdown(context.Background())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		tel.Metrics.GenAI(ctx, OperationChat, "openai", "gpt", "gpt-2026", "", time.Second, 12, 34)
		tel.Metrics.Cost(ctx, "a", "gpt", 0.001)
		tel.Metrics.Request(ctx, "gpt", "chat", "ok")
	}
}

// TestAttrCacheBounded: gen_ai.response.model comes from the upstream, so a
// provider inventing a model name per answer must not grow the attribute
// cache without bound; past the bound the labels are still recorded.
func TestAttrCacheBounded(t *testing.T) {
	tel := Noop()
	defer tel.Shutdown(context.Background())
	for i := range maxCachedAttrs + 100 {
		tel.Metrics.GenAI(context.Background(), OperationChat, "p", "m", fmt.Sprint("resp-", i), "", time.Second, 0, 0)
	}
	if n := tel.Metrics.attrs.n.Load(); n > maxCachedAttrs {
		t.Fatalf("%d cached attribute sets, bound %d", n, maxCachedAttrs)
	}
}
