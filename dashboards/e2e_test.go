package dashboards_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hopgate/hopgate/dashboards"
	"github.com/hopgate/hopgate/telemetry"
)

// The board is only as good as its queries against what the gateway really
// exports (DESIGN.md §6). A real Prometheus scrapes a real gateway while the
// cheapest channel of "chat" fails persistently, and every query of the
// generated board — variables first, then each panel target with the
// variables substituted the way Grafana would — must parse and return data
// through Prometheus' HTTP API. Then the incident is read off the board: the
// faulted channel's tile is red (2) while open and its error rate is above
// the 25 % line; healthy channels read 0 on both; after the fault clears and
// the cooldown passes, the tile is green (0) again. Meanwhile early warning
// demotes "drift" (half its requests fail) while its breaker stays closed:
// its tile and its timeline read demoted (3, blue).
func TestFailoverBoardAgainstPrometheus(t *testing.T) {
	bin := prometheusBin(t)
	began := time.Now()

	board, err := dashboards.JSON()
	if err != nil {
		t.Fatal(err)
	}
	queries, err := dashboards.Queries(board)
	if err != nil {
		t.Fatal(err)
	}

	s := startScenario(t)
	// The incident: every request for the cheap channel's model fails.
	if err := s.g.Ups[chCheap].SetFault(upstreamModel, "503"); err != nil {
		t.Fatal(err)
	}
	prom := startPrometheus(t, bin, s.g.Process.AdminAddr())
	s.drive(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("traffic: %s", s.summary())
			t.Logf("gateway log (tail):\n%s", s.log.Tail(20))
			t.Logf("prometheus log (tail):\n%s", prom.log.Tail(20))
		}
	})
	ctx := t.Context()

	scraped(15*time.Second).EventuallyNil(t, func() error {
		return expectValue(ctx, prom, `up{job="hopgate"}`, 1)
	}, "Prometheus scrapes the gateway")

	// Variables, in board order: a later variable's query may use an
	// earlier one (channel uses $region), as in Grafana.
	vars := map[string]string{}
	var panels []dashboards.Query
	for _, q := range queries {
		if !strings.HasPrefix(q.PanelTitle, "variable ") {
			panels = append(panels, q)
			continue
		}
		var values []string
		scraped(15*time.Second).EventuallyNil(t, func() error {
			values, err = variableValues(ctx, prom, dashboards.Substitute(q.Expr, vars))
			return err
		}, q.PanelTitle+" lists values")
		vars[q.RefID] = multiValue(values)
		t.Logf("%s = %v", q.PanelTitle, values)
	}
	wantVars := map[string][]string{
		dashboards.VarRegion:  {gatewayRegion},
		dashboards.VarChannel: {chCheap, chDear, chDrift, chMid, chSlow},
		dashboards.VarModel:   {modelChat, modelChatUS, modelDrift, modelDeadline, modelHang},
	}
	for name, want := range wantVars {
		if got := vars[name]; got != multiValue(want) {
			t.Errorf("variable %s = %s, want %s", name, got, multiValue(want))
		}
	}

	// Every panel query returns data, instant and over a range, with every
	// variable on the values the variable queries listed.
	for _, q := range panels {
		expr := dashboards.Substitute(q.Expr, vars)
		what := fmt.Sprintf("panel %q/%s", q.PanelTitle, q.RefID)
		scraped(30*time.Second).EventuallyNil(t, func() error {
			if err := expectData(prom.query(ctx, expr)); err != nil {
				return fmt.Errorf("instant: %w\n%s", err, expr)
			}
			if !q.Instant {
				if err := expectData(prom.queryRange(ctx, expr, 30*time.Second)); err != nil {
					return fmt.Errorf("range: %w\n%s", err, expr)
				}
			}
			return nil
		}, what+" returns data")
	}
	t.Logf("all %d panel queries returned data after %v", len(panels), time.Since(began).Round(100*time.Millisecond))

	tile := findQuery(t, panels, "$"+dashboards.VarChannel)
	errorRate := findQuery(t, panels, "Error rate per channel (rolling 60 s)")
	// A repeated tile gets one channel; the region keeps all values.
	tileFor := func(ch string) string {
		return dashboards.Substitute(tile.Expr, map[string]string{
			dashboards.VarRegion: vars[dashboards.VarRegion], dashboards.VarChannel: regexp.QuoteMeta(ch),
		})
	}
	rateExpr := dashboards.Substitute(errorRate.Expr, vars)

	scraped(20*time.Second).EventuallyNil(t, func() error {
		return expectValue(ctx, prom, tileFor(chCheap), 2)
	}, "faulted channel's tile is red (2) while open")
	for _, ch := range healthyChannels {
		if err := expectValue(ctx, prom, tileFor(ch), 0); err != nil {
			t.Errorf("healthy channel %s tile during the incident: %v", ch, err)
		}
	}
	// Early warning's fourth state, on the tile and the timeline.
	scraped(20*time.Second).EventuallyNil(t, func() error {
		return expectValue(ctx, prom, tileFor(chDrift), 3)
	}, "the demoted channel's tile is blue (3)")
	timeline := findQuery(t, panels, "Breaker state over time")
	scraped(10*time.Second).EventuallyNil(t, func() error {
		states, err := perChannel(ctx, prom, dashboards.Substitute(timeline.Expr, vars))
		if err != nil {
			return err
		}
		if states[chDrift] != 3 || states[chMid] != 0 {
			return fmt.Errorf("timeline now: %v, want %s demoted (3) and %s closed (0)", states, chDrift, chMid)
		}
		return nil
	}, "the timeline shows the demotion")
	scraped(20*time.Second).EventuallyNil(t, func() error {
		rates, err := perChannel(ctx, prom, rateExpr)
		if err != nil {
			return err
		}
		if r, ok := rates[chCheap]; !ok || !(r > dashboards.ErrorRateThreshold) {
			return fmt.Errorf("%s error rate = %v (present %v), want > %v; all: %v", chCheap, r, ok, dashboards.ErrorRateThreshold, rates)
		}
		for _, ch := range healthyChannels {
			if r, ok := rates[ch]; !ok || r != 0 {
				return fmt.Errorf("healthy %s error rate = %v (present %v), want 0; all: %v", ch, r, ok, rates)
			}
		}
		return nil
	}, "error rates during the fault")

	// The window row: mid's tile shows each kind its answers state.
	window := findQuery(t, panels, "$"+dashboards.VarChannel+" window")
	windowFor := dashboards.Substitute(window.Expr, map[string]string{
		dashboards.VarRegion: vars[dashboards.VarRegion], dashboards.VarChannel: regexp.QuoteMeta(chMid),
	})
	scraped(15*time.Second).EventuallyNil(t, func() error {
		ss, err := prom.query(ctx, windowFor)
		if err != nil {
			return err
		}
		got := map[string]float64{}
		for _, s := range ss {
			if len(s.Values) == 1 {
				got[s.Metric[telemetry.LabelLimitKind]] = s.Values[0]
			}
		}
		if len(got) != 2 || got["requests"] != 0.6 || got["tokens"] != 0.95 {
			return fmt.Errorf("%s's window tile = %v, want requests 0.6 and tokens 0.95", chMid, got)
		}
		return nil
	}, "the window tile shows each kind's utilisation")

	if prom.exemplars {
		hist := fmt.Sprintf(`%s_bucket{%s=%q}`, telemetry.MetricHopDuration, telemetry.LabelRegion, gatewayRegion)
		scraped(15*time.Second).EventuallyNil(t, func() error {
			ex, err := prom.queryExemplars(ctx, hist, time.Minute)
			if err != nil {
				return err
			}
			for _, e := range ex {
				if len(e.Labels["trace_id"]) == 32 {
					t.Logf("%d hop latency exemplars, e.g. trace_id %s", len(ex), e.Labels["trace_id"])
					return nil
				}
			}
			return fmt.Errorf("%d exemplars, none with a 32-hex trace_id: %v", len(ex), ex)
		}, "hop latency exemplars carry trace ids")
	} else {
		// DESIGN.md §5: hop latency carries exemplars; a Prometheus that
		// cannot store them cannot check that, so it is a failure, not a skip.
		t.Error("this Prometheus did not enable exemplar storage (--enable-feature=exemplar-storage): the exemplar check could not run")
	}

	// Recovery: the provider is back. The breaker's trial after the cooldown
	// succeeds, it closes, and the next scrape turns the tile green.
	if err := s.g.Ups[chCheap].SetFault(upstreamModel, ""); err != nil {
		t.Fatal(err)
	}
	recovering := time.Now()
	scraped(cooldown+15*time.Second).EventuallyNil(t, func() error {
		return expectValue(ctx, prom, tileFor(chCheap), 0)
	}, "faulted channel's tile is green (0) after recovery")
	for _, ch := range healthyChannels {
		if err := expectValue(ctx, prom, tileFor(ch), 0); err != nil {
			t.Errorf("healthy channel %s tile after recovery: %v", ch, err)
		}
	}
	t.Logf("tile green %v after the fault cleared; total %v; traffic: %s",
		time.Since(recovering).Round(100*time.Millisecond), time.Since(began).Round(100*time.Millisecond), s.summary())
}

// expectData turns a query result into an error unless it holds at least
// one real number.
func expectData(ss []series, err error) error {
	if err != nil {
		return err
	}
	if len(ss) == 0 {
		return errEmpty
	}
	if !finite(ss) {
		return fmt.Errorf("only NaN/Inf: %v", ss)
	}
	return nil
}

// expectValue requires expr to return exactly one sample equal to want.
func expectValue(ctx context.Context, p *promServer, expr string, want float64) error {
	ss, err := p.query(ctx, expr)
	if err != nil {
		return err
	}
	if len(ss) != 1 || len(ss[0].Values) != 1 {
		return fmt.Errorf("%s: want one sample, got %v", expr, ss)
	}
	if got := ss[0].Values[0]; got != want {
		return fmt.Errorf("%s = %v, want %v", expr, got, want)
	}
	return nil
}

// perChannel runs a query grouped by channel and returns the value of each.
func perChannel(ctx context.Context, p *promServer, expr string) (map[string]float64, error) {
	ss, err := p.query(ctx, expr)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, s := range ss {
		if len(s.Values) == 1 {
			out[s.Metric[telemetry.LabelChannel]] = s.Values[0]
		}
	}
	return out, nil
}

// variableValues runs a substituted variable query (group by (label) (...))
// and returns the sorted values of its single label, as Grafana would list
// them.
func variableValues(ctx context.Context, p *promServer, expr string) ([]string, error) {
	ss, err := p.query(ctx, expr)
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, expr)
	}
	var out []string
	for _, s := range ss {
		if len(s.Metric) != 1 {
			return nil, fmt.Errorf("%s: series %v should carry exactly the variable's label", expr, s.Metric)
		}
		for _, v := range s.Metric {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w\n%s", errEmpty, expr)
	}
	sort.Strings(out)
	return slices.Compact(out), nil
}

// multiValue formats a multi-value selection the way Grafana interpolates it
// into a Prometheus regex matcher: (a|b), each value regex-escaped.
func multiValue(values []string) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = regexp.QuoteMeta(v)
	}
	sort.Strings(quoted)
	return "(" + strings.Join(quoted, "|") + ")"
}

func findQuery(t *testing.T, qs []dashboards.Query, title string) dashboards.Query {
	t.Helper()
	for _, q := range qs {
		if q.PanelTitle == title {
			return q
		}
	}
	t.Fatalf("no panel titled %q on the board: update this test with the board", title)
	return dashboards.Query{}
}
