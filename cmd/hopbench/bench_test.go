package main

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// TestMain lets the test binary play the child roles, as the command does:
// the harness re-executes os.Executable(), which here is the test binary.
func TestMain(m *testing.M) {
	if os.Getenv(envSpawnTest) != "" {
		spawnAndWait() // proc_end_test.go
	}
	if role := os.Getenv(envRole); role != "" {
		if err := runRole(role, os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString("hopbench " + role + ": " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The whole harness runs in -quick mode so it cannot rot: processes start,
// every target answers correctly, the report renders with every section.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts several processes and loads them for a few seconds")
	}
	out := filepath.Join(t.TempDir(), "benchmarks.md")
	o, err := parseFlags([]string{"-quick", "-out", out}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	o.duration, o.idle = 150*time.Millisecond, 20
	res, err := run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, mx := range res.allMatrices() {
		for _, name := range mx.targets {
			for _, s := range mx.by[name] {
				if s.ok == 0 {
					t.Errorf("%s %s %s: no successful request: %v", mx.wl.name, mx.mode, name, s.errors)
				}
			}
		}
	}
	if res.skipHits != 0 {
		t.Errorf("the open channel saw %d requests during L1-skip turns; want 0", res.skipHits)
	}
	if ir := res.idle["hopgate"]; ir.opened != o.idle {
		t.Errorf("idle streams through hopgate: %d of %d opened (%s)", ir.opened, o.idle, ir.err)
	}
	// Metrics on: the measured gateway is scraped in each of its turns
	// (latency and throughput for 2 workloads, TTFT, 3 failover paths × 2).
	if e := res.export; e.metricsScrapes < 11 || e.metricsScrapeErr != "" {
		t.Errorf("measured gateway scraped %d times (want one per turn, 11), last error %q", e.metricsScrapes, e.metricsScrapeErr)
	}
	if res.export.sink.Spans == 0 {
		t.Error("the OTLP sink received no spans: tracing is not exported")
	}
	// The batch variant's expected span count is exact for its successful
	// requests; at this light load nothing should be dropped (a margin for
	// the exporter's shutdown). A failed request may add a degraded-reply
	// span, so with failures only the lower bound holds.
	e := res.export
	low := float64(e.batchSink.Spans) < 0.95*float64(e.batchExpected)
	high := e.batchFailed == 0 && e.batchSink.Spans > e.batchExpected
	if e.batchRequests == 0 || low || high {
		t.Errorf("batch variant: %d requests (%d failed), %d spans received, %d expected", e.batchRequests, e.batchFailed, e.batchSink.Spans, e.batchExpected)
	}
	// Over TLS, each target's requests reached the upstream over the
	// protocol its row names: hopgate's and the proxy's transport offer
	// HTTP/2, the h1 upstream does not.
	for _, pr := range tlsProtocols {
		for _, name := range []string{pr.proxy, pr.hopgate} {
			st, h2 := res.tlsConns[name], pr.proxy == targetProxyH2
			if n := st.HTTP1 + st.HTTP2; n == 0 || h2 && st.HTTP1 != 0 || !h2 && st.HTTP2 != 0 {
				t.Errorf("%s: the TLS upstream saw %+v", name, st)
			}
		}
	}
	// The floor runs wherever its binaries are (make test installs them):
	// then both proxied every workload, TLS included, and so did the
	// burst stream through every relay.
	floors := []string{}
	for _, f := range []struct{ name, env string }{{floorNginx, envNginxBin}, {floorHAProxy, envHAProxyBin}} {
		if _, err := floorBinary(f.name, f.env, os.Getenv); err == nil {
			floors = append(floors, f.name)
		}
	}
	for _, name := range floors {
		if !slices.Contains(res.targets, name) {
			t.Errorf("%s is installed but did not run: %v", name, res.notes)
		}
		if n := len(res.tlsThroughput[wlStream.name].by[name+"/h1"]); n == 0 {
			t.Errorf("%s/h1 has no TLS stream samples", name)
		}
	}
	// The realtime row: events went through every relay, and every idle
	// session opened through hopgate and the bare relay.
	if rt := res.realtime; rt == nil {
		t.Error("no realtime row")
	} else {
		for _, name := range []string{rtDirect, rtRelay, rtHopgate} {
			if eps := median(rt.eventsPerSec[name]); !(eps > 0) || len(rt.latency[name]) == 0 {
				t.Errorf("realtime %s: %.0f events/s, %d round trips", name, eps, len(rt.latency[name]))
			}
		}
		for _, name := range []string{rtRelay, rtHopgate} {
			if ir := rt.idle[name]; ir.opened != o.idle || ir.err != "" {
				t.Errorf("idle realtime sessions through %s: %d of %d opened (%s)", name, ir.opened, o.idle, ir.err)
			}
		}
		if len(rt.err) > 0 {
			t.Errorf("realtime errors: %v", rt.err)
		}
	}
	// The limiter's verdict comes from profiles of its turns: they must
	// have been taken and read (attrib.go).
	for _, name := range []string{"hopgate", targetLimited} {
		if a := res.attrib[name]; a == nil || a.turns == 0 || a.samples == 0 || a.allocBytes == 0 || a.err != "" {
			t.Errorf("limiter attribution of %s: %+v", name, a)
		}
	}
	if burst := res.throughput[wlBurst.name]; burst == nil || len(burst.by["hopgate"]) == 0 {
		t.Error("no burst-stream samples for hopgate")
	} else {
		// The CPU and system-call table of the full report reads these
		// (renderCPU): every relay of ours must have been counted.
		for _, name := range []string{"proxy", "hopgate", "hopgate-" + tracingOff} {
			if v := med(burst, name, cpuPerReq); math.IsNaN(v) || v <= 0 {
				t.Errorf("burst streams: no CPU per request for %s (%v)", name, v)
			}
			if v := med(burst, name, writesPerReq); math.IsNaN(v) || v <= 0 {
				t.Errorf("burst streams: no writes per request for %s (%v)", name, v)
			}
		}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, section := range []string{"## Targets", "Against the floor (issue 34)", "burst upstream (stream-50-frames-burst)",
		"## Against the floor: nginx and HAProxy", "| stream-50-frames-burst |", "## Throughput", "## Latency", "## Time to first token",
		"## Translating path", "responses / chat", "| translating-responses |", "responses: translating / pass-through", "Target (issue 31): the Responses translation costs no more", "| stream-50-frames | https/h2 |", "upstream over https/h1 (completion-1KB)", "TLS connections accepted",
		"## Failover paths", "## Memory per idle stream", "## Realtime sessions", "memory per idle session ≤ 1.2× the bare relay's", "## Trace export", "## Go micro-benchmarks",
		"Over the bare proxy (the performance round's targets", "more RSS than the proxy per idle stream",
		"`healthy_sample_ratio: 0.1` (completion-1KB)", "time to first token ≤ 300 µs over the proxy",
		"What tracing costs", "Process CPU per request in the same rounds", "| workload | proxy reads | proxy writes |", "## Tenant rate limits", "limited-redis / hopgate (req/s)", "Tenant rate limits (issue 33):", "The limiter's share of the gateway's CPU", "End to end, in the throughput rounds", "Redis limiter: p50", "hopgate-healthy10 / proxy", "hopgate-off / proxy", "hopgate-batch128 / proxy", "hopgate-gogc200 / proxy", "hopgate-sdkexport / proxy"} {
		if !strings.Contains(string(b), section) {
			t.Errorf("report lacks %q", section)
		}
	}
}

func TestParseBench(t *testing.T) {
	out := `goos: linux
pkg: github.com/hopgate/hopgate/internal/sse
BenchmarkReader-2   	  123456	      9876 ns/op	  12.34 MB/s	     16 B/op	       1 allocs/op
pkg: github.com/hopgate/hopgate/dispatch/classify
BenchmarkStatus-2   	1000000000	         0.5120 ns/op	       0 B/op	       0 allocs/op
BenchmarkNoMem      	     100	        42 ns/op
FAIL	github.com/hopgate/hopgate/internal/gate [build failed]
`
	got, failed := parseBench(out)
	want := []microBench{
		{pkg: "internal/sse", name: "BenchmarkReader", nsPerOp: 9876, mbPerS: 12.34, bytesPerOp: 16, allocsPerOp: 1, hasMem: true},
		{pkg: "dispatch/classify", name: "BenchmarkStatus", nsPerOp: 0.512, hasMem: true},
		{pkg: "dispatch/classify", name: "BenchmarkNoMem", nsPerOp: 42},
	}
	// Why: the 0-allocs verdict and the report table read these fields.
	if len(got) != len(want) {
		t.Fatalf("got %d benchmarks, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if len(failed) != 1 || failed[0] != "internal/gate" {
		t.Errorf("failed packages: %v", failed)
	}
}

func TestCountSpans(t *testing.T) {
	msg := func(num protowire.Number, parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = protowire.AppendTag(b, num, protowire.BytesType)
			b = protowire.AppendBytes(b, p)
		}
		return b
	}
	span := []byte{0x0a, 0x01, 0x01} // a span with a trace_id byte
	scope := append(msg(1, []byte("scope")), msg(2, span, span, span)...)
	resource := append(msg(1, []byte("res")), msg(2, scope, scope)...)
	other := protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 7)
	req := append(msg(1, resource, resource), other...)
	for _, tc := range []struct {
		name string
		in   []byte
		want int
		ok   bool
	}{
		// Why: nested repeated messages are all counted, unknown fields skipped.
		{"two resources, two scopes each, three spans each", req, 12, true},
		// Why: an empty export is valid and has no spans.
		{"empty", nil, 0, true},
		// Why: truncated input is reported, not miscounted silently.
		{"truncated", req[:len(req)-5], 0, false},
	} {
		got, ok := countSpans(tc.in)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("%s: got %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestQuantileAndMedian(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		name string
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{"p50 of odd count is the middle", ms(1, 2, 3), 0.5, 2 * time.Millisecond}, // nearest rank
		{"p99 of 100 is the 99th", ms(seq(100)...), 0.99, 99 * time.Millisecond},   // not the max
		{"empty is zero", nil, 0.5, 0},                                             // no panic on a dead target
		{"p100 is the max", ms(5, 6, 7), 1, 7 * time.Millisecond},                  // clamp
		{"tiny p is the min", ms(5, 6, 7), 0.0001, 5 * time.Millisecond},           // clamp low
	} {
		if got := quantile(tc.in, tc.p); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := median([]float64{3, 1, 2, 10}); got != 2.5 {
		t.Errorf("median of even count: got %v, want 2.5", got)
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

// Every round runs every target once, in an order of its own: over rounds,
// each target is seen in first place (a fixed or rotated order would keep
// the same neighbours).
func TestShuffledRounds(t *testing.T) {
	w := &world{order: rand.New(rand.NewPCG(1, 0))}
	ts := []target{{name: "direct"}, {name: "proxy"}, {name: "hopgate"}, {name: "hopgate-off"}}
	first := map[string]int{}
	after := map[string]bool{} // "a>b": b ran right after a
	for range 200 {
		got := w.shuffled(ts)
		names := make([]string, len(got))
		for i, x := range got {
			names[i] = x.name
			if i > 0 {
				after[got[i-1].name+">"+x.name] = true
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"direct", "hopgate", "hopgate-off", "proxy"}) {
			t.Fatalf("round runs %v: not every target once", names)
		}
		first[got[0].name]++
	}
	if len(first) != len(ts) {
		t.Errorf("first places over 200 rounds: %v; want every target", first)
	}
	if len(after) != len(ts)*(len(ts)-1) {
		t.Errorf("%d of %d neighbour pairs seen over 200 rounds", len(after), len(ts)*(len(ts)-1))
	}
}

func TestLinesWith(t *testing.T) {
	n, last := linesWith("x\nproxy: a\nnoise\nproxy: b \n", "proxy: ")
	if n != 2 || last != "proxy: b" {
		t.Fatalf("got %d %q", n, last)
	}
	if n, last := linesWith("", "proxy: "); n != 0 || last != "" {
		t.Fatalf("empty: got %d %q", n, last)
	}
}
