package admin_test

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/admin"
	"github.com/hopgate/hopgate/dispatch/breaker"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/earlywarning"
	"github.com/hopgate/hopgate/dispatch/overload"
	"github.com/hopgate/hopgate/telemetry"
)

const evil = `<script>alert("pwned")</script>`

// pagesFixture is an admin server whose telemetry has a trace ring (no
// exporter: the ring is fed all the same) and a fake clock.
type pagesFixture struct {
	srv   *httptest.Server
	tel   *telemetry.Telemetry
	eng   *dispatch.Engine
	clock *clockwork.FakeClock
	cfg   *config.Config
}

func newPages(t *testing.T, model, traceURL string) *pagesFixture {
	t.Helper()
	y := `
region: eu-west-1
auth: {mode: none}
policy: {breaker: {cooldown: 60s}}
channels:
  - {id: a, base_url: "http://127.0.0.1:1/v1", region: r-a}
  - {id: b, base_url: "http://127.0.0.1:2/v1", region: r-b, breaker: {mode: rate}}
models:
  - name: 'MODEL'
    chain:
      - {channel: b, upstream_model: y, price: {input: 2, output: 2}}
      - {channel: a, upstream_model: x, price: {input: 1, output: 1}}
`
	y = strings.Replace(y, "MODEL", strings.ReplaceAll(model, "'", "''"), 1)
	if traceURL != "" {
		y += "telemetry: {trace_url: '" + traceURL + "'}\n"
	}
	return newPagesFrom(t, y)
}

// newPagesFrom is newPages for a config of the caller's.
func newPagesFrom(t *testing.T, y string) *pagesFixture {
	t.Helper()
	return newPagesLoaded(t, y, nil, nil)
}

// newPagesLoaded is newPagesFrom with the engine's buffer budget b and the
// front door's admission adm (nil: the defaults, none).
func newPagesLoaded(t *testing.T, y string, b *overload.Budget, adm *overload.Admission) *pagesFixture {
	t.Helper()
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	clock := clockwork.NewFakeClockAt(time.Date(2026, 5, 1, 9, 30, 0, 0, time.UTC))
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Getenv: func(string) string { return "" }, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	e := dispatch.New(dispatch.Options{Telemetry: tel, Clock: clock, Budget: b})
	s := &admin.Server{Config: func() *config.Config { return cfg }, Engine: e, Telemetry: tel, Admission: adm}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &pagesFixture{srv: srv, tel: tel, eng: e, clock: clock, cfg: cfg}
}

// failoverTrace records the span tree of DESIGN.md §5 for a request that
// skipped open channel sk, failed on a (200 then an error frame: the gate
// discarded it) and was answered by b, and logs it like the engine does.
// errMsg is the upstream's error message, recorded on the failed hop.
func (f *pagesFixture) failoverTrace(model, errMsg string) string {
	tr := f.tel.TracerProvider.Tracer("test")
	at := func(d time.Duration) trace.SpanStartEventOption {
		return trace.WithTimestamp(f.clock.Now().Add(d))
	}
	end := func(s trace.Span, d time.Duration) { s.End(trace.WithTimestamp(f.clock.Now().Add(d))) }
	ctx, root := tr.Start(context.Background(), telemetry.SpanServer, trace.WithSpanKind(trace.SpanKindServer), at(0))
	dctx, disp := tr.Start(ctx, telemetry.SpanDispatch+" "+model, at(time.Millisecond),
		trace.WithAttributes(attribute.String(telemetry.AttrModel, model)))
	_, skip := tr.Start(dctx, telemetry.SpanBreakerSkip+" sk", at(2*time.Millisecond), trace.WithAttributes(
		attribute.String(telemetry.AttrChannel, "sk"), attribute.String(telemetry.AttrBreakerState, "open")))
	end(skip, 2*time.Millisecond)

	h1ctx, hop1 := tr.Start(dctx, "chat x", trace.WithSpanKind(trace.SpanKindClient), at(3*time.Millisecond),
		trace.WithAttributes(attribute.String(telemetry.AttrChannel, "a"), attribute.Int(telemetry.AttrHopIndex, 0)))
	_, aw1 := tr.Start(h1ctx, telemetry.SpanAwaitHeaders, at(3*time.Millisecond))
	end(aw1, 40*time.Millisecond)
	_, g1 := tr.Start(h1ctx, telemetry.SpanStreamGate, at(40*time.Millisecond))
	g1.SetAttributes(attribute.String(telemetry.AttrGateDecision, telemetry.GateDiscardError))
	g1.SetStatus(codes.Error, telemetry.GateDiscardError)
	end(g1, 60*time.Millisecond)
	hop1.SetAttributes(attribute.String(telemetry.AttrHopOutcome, telemetry.HopRetryable), attribute.String(telemetry.AttrErrorType, "stream_error"))
	hop1.AddEvent("upstream error frame", trace.WithAttributes(attribute.String("message", errMsg)), trace.WithTimestamp(f.clock.Now().Add(55*time.Millisecond)))
	hop1.SetStatus(codes.Error, errMsg)
	end(hop1, 60*time.Millisecond)

	h2ctx, hop2 := tr.Start(dctx, "chat y", trace.WithSpanKind(trace.SpanKindClient), at(61*time.Millisecond),
		trace.WithAttributes(attribute.String(telemetry.AttrChannel, "b"), attribute.Int(telemetry.AttrHopIndex, 1)))
	_, aw2 := tr.Start(h2ctx, telemetry.SpanAwaitHeaders, at(61*time.Millisecond))
	end(aw2, 90*time.Millisecond)
	_, g2 := tr.Start(h2ctx, telemetry.SpanStreamGate, at(90*time.Millisecond))
	g2.SetAttributes(attribute.String(telemetry.AttrGateDecision, telemetry.GateCommitContent))
	end(g2, 95*time.Millisecond)
	hop2.SetAttributes(attribute.String(telemetry.AttrHopOutcome, telemetry.HopOK))
	end(hop2, 200*time.Millisecond)
	end(disp, 200*time.Millisecond)
	path := "sk:open -> a:stream_error -> b:ok"
	root.SetAttributes(attribute.String(telemetry.AttrOutcome, telemetry.OutcomeFailoverOK), attribute.String(telemetry.AttrFailoverPath, path))
	end(root, 201*time.Millisecond)
	id := root.SpanContext().TraceID().String()
	f.tel.Failovers.Add(telemetry.FailoverEntry{Time: f.clock.Now(), Model: model, Path: path, Outcome: telemetry.OutcomeFailoverOK,
		Status: 200, TraceID: id, Attempts: 2})
	return id
}

func (f *pagesFixture) get(t *testing.T, path string) (int, string) {
	t.Helper()
	return get(t, f.srv.URL+path, "")
}

// TestOncallPage: the tiles follow the breakers (green, red with the
// reopen time, yellow), each channel has its error-rate chart with the
// 25 % line, a failover links to its trace view (and to trace_url), and
// an off deadline reads "off".
func TestOncallPage(t *testing.T) {
	f := newPages(t, "gpt", "http://jaeger.example:16686/trace/{trace_id}")
	id := f.failoverTrace("gpt", "upstream overloaded")
	for range 4 {
		f.tel.Metrics.Hop(context.Background(), "a", "r-a", "gpt", "chat", telemetry.HopRetryable, time.Millisecond)
	}
	f.tel.Metrics.Hop(context.Background(), "a", "r-a", "gpt", "chat", telemetry.HopOK, time.Millisecond)

	tileState := regexp.MustCompile(`data-channel="a" data-state="([a-z-]+)"`)
	state := func() string {
		code, body := f.get(t, "/admin")
		if code != 200 {
			t.Fatalf("/admin %d", code)
		}
		m := tileState.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no tile for a:\n%s", body)
		}
		return m[1]
	}
	if s := state(); s != "closed" {
		t.Fatalf("tile a %s before the incident", s)
	}
	br := f.eng.Breakers().Get("a", dispatch.BreakerPolicy(f.cfg.Channel("a").Breaker))
	for range 3 {
		tk, _ := br.Allow()
		br.Done(tk, breaker.Failure)
	}
	_, body := f.get(t, "/admin")
	if s := state(); s != "open" || !strings.Contains(body, "half-open at 09:31:00 UTC (in 60s)") {
		t.Fatalf("tile a %s after three failures:\n%s", s, body)
	}
	f.clock.Advance(time.Minute)
	if s := state(); s != "half-open" {
		t.Fatalf("tile a %s after the cooldown", s)
	}
	tk, _ := br.Allow()
	br.Done(tk, breaker.Success)
	if s := state(); s != "closed" {
		t.Fatalf("tile a %s after the trial", s)
	}

	f.clock.Advance(-time.Minute + 10*time.Second) // back within the hops' window (the fake clock allows it)
	_, body = f.get(t, "/admin")
	for _, want := range []string{
		`<h2>Breakers — eu-west-1</h2>`,
		`<a class="tile closed" href="/admin/traces?channel=a"`,
		`href="/admin/traces/` + id + `"`,
		`href="http://jaeger.example:16686/trace/` + id + `"`,
		`sk:open → a:stream_error → b:ok`,
		`<td class="deadline">off</td>`,
		`class="threshold" x1="0" x2="300" y1="45" y2="45"`,
		`<span class="rate">80.0 %</span>`,
		`class="chart over" data-channel="a"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/admin lacks %s", want)
		}
	}
	// Chains: cheapest first, whatever the file order.
	if i, j := strings.Index(body, `>a</span>`), strings.Index(body, `>b</span>`); i < 0 || j < 0 || i > j {
		t.Errorf("chain not cheapest first (a at %d, b at %d)", i, j)
	}
}

// TestTraceView: the waterfall lists the spans in tree order with the
// failover path on top, the errored hop and the gate decisions marked,
// attributes in <details>, durations to scale.
func TestTraceView(t *testing.T) {
	f := newPages(t, "gpt", "")
	id := f.failoverTrace("gpt", "The engine is overloaded")
	code, body := f.get(t, "/admin/traces/"+strings.ToUpper(id))
	if code != 200 {
		t.Fatalf("trace view %d:\n%s", code, body)
	}
	names := regexp.MustCompile(`data-name="([^"]+)"`).FindAllStringSubmatch(body, -1)
	var got []string
	for _, m := range names {
		got = append(got, m[1])
	}
	want := []string{"POST /v1/chat/completions", "dispatch gpt", "breaker skip sk",
		"chat x", "await headers", "stream gate", "chat y", "await headers", "stream gate"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("span order\n got %q\nwant %q", got, want)
	}
	for _, w := range []string{
		`<div class="path-big mono" title="hopgate.failover.path">sk:open → a:stream_error → b:ok</div>`,
		`<details class="span hop err" id="span-`,
		`<span class="gate-badge discard">gate: discard_error</span>`,
		`<span class="gate-badge commit">gate: commit_content</span>`,
		`<p class="status-msg">error: The engine is overloaded</p>`,
		`<th class="mono">hopgate.hop.outcome</th><td class="mono">retryable</td>`,
		`55.0ms: <b>upstream error frame</b>`,
		`201.0ms`,
	} {
		if !strings.Contains(body, w) {
			t.Errorf("trace view lacks %s", w)
		}
	}
	// To scale: the second hop starts at 61 of 201 ms.
	if !strings.Contains(body, `x="303.4`) {
		t.Error("the second hop's bar is not at 61/201 of the width")
	}

	code, body = f.get(t, "/admin/traces/0123456789abcdef0123456789abcdef")
	if code != 404 || !strings.Contains(body, "is not in this process's trace ring") {
		t.Errorf("unknown trace: %d\n%s", code, body)
	}
	code, body = f.get(t, "/admin/traces/nothex")
	if code != 404 || !strings.Contains(body, "is not a trace id") {
		t.Errorf("invalid id: %d", code)
	}
}

// TestTraceList: /admin/traces lists the ring newest first and filters by
// model, channel and outcome.
func TestTraceList(t *testing.T) {
	f := newPages(t, "gpt", "")
	first := f.failoverTrace("gpt", "x")
	f.clock.Advance(time.Second)
	second := f.failoverTrace("other", "y")
	_, body := f.get(t, "/admin/traces")
	if i, j := strings.Index(body, second), strings.Index(body, first); i < 0 || j < 0 || i > j {
		t.Fatalf("not newest first")
	}
	_, body = f.get(t, "/admin/traces?model=gpt")
	if !strings.Contains(body, first) || strings.Contains(body, second) {
		t.Error("model filter")
	}
	_, body = f.get(t, "/admin/traces?channel=sk&outcome=failover_ok")
	if !strings.Contains(body, first) || !strings.Contains(body, second) {
		t.Error("channel+outcome filter")
	}
	_, body = f.get(t, "/admin/traces?outcome=exhausted")
	if strings.Contains(body, first) || !strings.Contains(body, "No kept trace matches") {
		t.Error("outcome filter")
	}
}

// TestPagesEscapeAttackerText is the XSS test of the issue: a model name
// and an upstream error message carrying <script> render as text on every
// admin page (the status page has its own in package status), and the
// CSP would not run an injected script anyway.
func TestPagesEscapeAttackerText(t *testing.T) {
	f := newPages(t, evil, "")
	id := f.failoverTrace(evil, "upstream said "+evil)
	for _, p := range []string{"/admin", "/admin/traces", "/admin/traces/" + id,
		"/admin/traces?model=" + strings.ReplaceAll(evil, " ", "+"), "/admin/traces/%3Cscript%3Ealert(1)%3C%2Fscript%3E"} {
		code, body := f.get(t, p)
		if code != 200 && code != 404 {
			t.Fatalf("%s: %d", p, code)
		}
		if strings.Contains(body, "<script>alert") {
			t.Errorf("%s renders a raw <script>:\n%s", p, body)
		}
		if !strings.Contains(body, "&lt;script&gt;alert") {
			t.Errorf("%s does not show the text at all", p)
		}
		if n := strings.Count(body, "<script>"); n != 1 {
			t.Errorf("%s has %d script elements, want only the refresh script", p, n)
		}
	}
	req := httptest.NewRequest("GET", "/admin", nil)
	rec := httptest.NewRecorder()
	(&admin.Server{Config: func() *config.Config { return f.cfg }, Engine: f.eng, Telemetry: f.tel}).Handler().ServeHTTP(rec, req)
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'sha256-") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP %q", csp)
	}
}

// TestOncallDemotedTile: early warning's fourth state. A demoted channel
// whose breaker is closed has a blue "demoted" tile saying until when and
// why, its chip in the chains table too, and /admin/breakers carries the
// evidence; after the cooldown the tile is green again, on probation.
func TestOncallDemotedTile(t *testing.T) {
	f := newPagesFrom(t, `
region: eu-west-1
auth: {mode: none}
channels:
  - {id: a, base_url: "http://127.0.0.1:1/v1", region: r-a, early_warning: {enabled: true, min_samples: 2, for: 0s}}
  - {id: b, base_url: "http://127.0.0.1:2/v1", region: r-b}
models:
  - name: gpt
    chain:
      - {channel: a, upstream_model: x, price: {input: 1, output: 1}}
      - {channel: b, upstream_model: y, price: {input: 2, output: 2}}
`)
	d := f.eng.Warning(f.cfg.Channel("a"))
	for range 2 { // count breaker of 3, fraction 0.5: two errors are evidence
		var h earlywarning.Hop
		d.Begin(&h, false)
		h.End(earlywarning.Failure)
	}
	var p earlywarning.Plan
	earlywarning.Order(&p, []earlywarning.Member{{Detector: d, Closed: true}, {Closed: true}})
	if len(p.Moves) != 1 {
		t.Fatalf("a was not demoted: %+v", p)
	}
	_, body := f.get(t, "/admin")
	for _, want := range []string{
		`<a class="tile demoted" href="/admin/traces?channel=a" title="kept traces through a" data-channel="a" data-state="demoted">`,
		`last in its chains until 09:32:00 UTC (in 120s)`,
		`error_rate: 2 errors in 2 hops over the last 30s`,
		`<span class="chip demoted" title="demoted by early warning">a</span>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/admin lacks %s", want)
		}
	}
	_, js := f.get(t, "/admin/breakers")
	if !strings.Contains(js, `"early_warning": {`) || !strings.Contains(js, `"state": "demoted"`) {
		t.Errorf("/admin/breakers lacks a's early warning:\n%s", js)
	}
	f.clock.Advance(2 * time.Minute)
	_, body = f.get(t, "/admin")
	if !strings.Contains(body, `data-channel="a" data-state="closed"`) || !strings.Contains(body, "on probation until 09:34:00 UTC (in 120s)") {
		t.Errorf("after the cooldown the tile must be closed, on probation:\n%s", body)
	}
}

// TestOncallOverloadTile: the overload tile (DESIGN.md §13) reads the
// buffer budget and the admission counts, with the board's colours: green
// below 70 % of the budget, yellow from 70 %, red from 90 % or while a new
// request would be shed.
func TestOncallOverloadTile(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name            string
		limit, used     int64 // budget; limit 0: unbounded
		inFlight, strms int64 // admitted now, of 4 and 2
		state, budget   string
		meta            string
	}{
		{"idle", 100 * mib, 10 * mib, 1, 0, "closed", "10.0 % of 100 MiB", "1/4 in flight · 0/2 streams</div>"},
		{"budget filling", 100 * mib, 75 * mib, 1, 1, "half-open", "75.0 % of 100 MiB", "1/4 in flight · 1/2 streams</div>"},
		{"budget nearly full", 100 * mib, 95 * mib, 1, 1, "open", "95.0 % of 100 MiB", "1/4 in flight · 1/2 streams</div>"},
		{"streams at the bound", 100 * mib, 10 * mib, 2, 2, "open", "10.0 % of 100 MiB", "2/4 in flight · 2/2 streams · shedding new requests (streams)</div>"},
		{"unbounded budget", 0, 0, 0, 0, "closed", "unbounded", "0/4 in flight · 0/2 streams</div>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := overload.NewBudget(tc.limit)
			if !b.Acquire(tc.used) {
				t.Fatalf("budget refused %d bytes", tc.used)
			}
			adm := overload.NewAdmission(4, 2)
			for range tc.inFlight {
				adm.Enter()
			}
			for range tc.strms {
				adm.OpenStream()
			}
			srv := newPagesLoaded(t, `
auth: {mode: none}
channels: [{id: a, base_url: "http://127.0.0.1:1/v1"}]
models: [{name: m, chain: [{channel: a, upstream_model: x}]}]
`, b, adm).srv
			code, body := get(t, srv.URL+"/admin", "")
			if code != 200 {
				t.Fatalf("/admin %d", code)
			}
			for _, want := range []string{
				`<div class="tile ` + tc.state + `" data-overload="` + tc.state + `">`,
				`<div class="tile-state">` + tc.budget + `</div>`,
				`<div class="tile-meta">` + tc.meta,
			} {
				if !strings.Contains(body, want) {
					t.Errorf("/admin lacks %s", want)
				}
			}
			if t.Failed() {
				i := strings.Index(body, "<h2>Overload</h2>")
				t.Log(body[max(i, 0):min(len(body), max(i, 0)+600)])
			}
		})
	}
}
