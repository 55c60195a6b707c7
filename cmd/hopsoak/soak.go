package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/gateway"
	"github.com/hopgate/hopgate/telemetry"
)

// Options bound a soak run.
type Options struct {
	Duration    time.Duration // traffic duration; the run stops by itself
	Rate        float64       // requests started per second (open loop)
	MaxInFlight int           // requests beyond it are shed, not queued; default 64
	Seed        uint64        // random seed; 0 = time-based
	// MaxResponseBody bounds buffered upstream bodies (gateway.Options);
	// default 16 MiB, below the engine default of 64 MiB (docs/reliability.md).
	MaxResponseBody int64
	// RequestDeadline is the client's deadline per request; default 15 s.
	RequestDeadline time.Duration
	// RSSSlack is how far above the start RSS the drained process may stay;
	// default 96 MiB.
	RSSSlack int64
	Progress io.Writer // a line every 10 s; nil: none
}

// Report is what a run observed. Violations empty means the soak passed.
type Report struct {
	Duration        time.Duration  `json:"duration"`
	Requests        int            `json:"requests"`
	Streaming       int            `json:"streaming"`
	SlowClients     int            `json:"slow_clients"`
	Disconnects     int            `json:"disconnects"`
	Shed            int            `json:"shed"`
	FaultChanges    int            `json:"fault_changes"`
	FaultsInjected  map[string]int `json:"faults_injected"` // hops that met a fault, by kind
	Hops            int64          `json:"upstream_hops"`
	Outcomes        map[string]int `json:"client_outcomes"` // what clients saw
	MetricOutcomes  map[string]int `json:"metric_outcomes"` // hopgate_requests_total
	Failovers       int            `json:"failovers"`       // requests with a multi-step path
	PathsChecked    int            `json:"paths_checked"`   // header path == root span path
	FailoverLogHits int            `json:"failover_log_hits"`
	LatencyP50      time.Duration  `json:"latency_p50"`
	LatencyP99      time.Duration  `json:"latency_p99"`
	LatencyMax      time.Duration  `json:"latency_max"`
	PeakRSS         int64          `json:"peak_rss_bytes"`
	RSSBefore       int64          `json:"rss_before_bytes"`
	RSSAfter        int64          `json:"rss_after_bytes"`
	HeapBefore      uint64         `json:"heap_before_bytes"` // live Go heap after a GC
	HeapAfter       uint64         `json:"heap_after_bytes"`
	PeakGoroutines  int            `json:"peak_goroutines"`
	GoroutinesAfter int            `json:"leaked_goroutines"`
	FDsBefore       int            `json:"fds_before"`
	FDsAfter        int            `json:"fds_after"`
	ErrorLogs       int64          `json:"error_logs"`
	Violations      []string       `json:"violations"`
	violationKinds  map[string]int // violations per kind (samples are capped)
}

func (r *Report) violate(kind, format string, args ...any) {
	if r.violationKinds == nil {
		r.violationKinds = map[string]int{}
	}
	r.violationKinds[kind]++
	if r.violationKinds[kind] <= 5 {
		r.Violations = append(r.Violations, kind+": "+fmt.Sprintf(format, args...))
	} else if r.violationKinds[kind] == 6 {
		r.Violations = append(r.Violations, kind+": (further ones not listed)")
	}
}

// faults are the fault words injected at random; every fault kind of the
// fakeupstream grammar but reject-prefill (no prefill here) and flap (a
// dedicated channel flaps for the whole run).
var faults = []string{
	"429", "429:ra=1", "500", "502", "503", "504", "529", "401", "403", "408",
	"400", "422", "context-length", "content-filter",
	"reset", "no-headers", "short-body",
	"slow-first-token=3s", "stream-error", "stream-error-event", "cut=4", "tool-calls|cut=2",
	"stall=3s", "malformed", "no-done", "error-body", "bad-json",
	"endless-frame", "endless-body", "redirect", "frame-delay=150ms",
}

// models and their chains over channels c1..c5; c5 flaps all run long.
var models = []struct {
	name  string
	chain []string
}{
	{"chat", []string{"c1", "c2", "c3"}},
	{"code", []string{"c2", "c3", "c4"}},
	{"bulk", []string{"c3", "c4", "c1"}},
	{"flaky", []string{"c5", "c1", "c4"}},
}

const flapFault = "flap=4s/10s"

func upstreamName(model, ch string) string {
	n := model + "@" + ch
	if ch == "c5" {
		n += "|" + flapFault
	}
	return n
}

func soakConfig(listen, admin string, urls map[string]string, logSize int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `listen: %s
admin_listen: %s
region: soak-1
auth: {mode: none}
telemetry: {failover_log_size: %d}
policy:
  header_timeout: 2s
  stream_gate: {timeout: 2s, on_timeout: failover}
  stream_idle_timeout: 2s
  chain_deadline: 6s
  retry_after_max: 1s
  breaker: {mode: count, window: 20s, failures: 3, cooldown: 3s}
channels:
`, listen, admin, logSize)
	for _, ch := range []string{"c1", "c2", "c3", "c4", "c5"} {
		fmt.Fprintf(&b, "  - {id: %s, base_url: %q, region: r-%s}\n", ch, urls[ch], ch)
	}
	b.WriteString("models:\n")
	for _, m := range models {
		fmt.Fprintf(&b, "  - name: %s\n    chain:\n", m.name)
		for i, ch := range m.chain {
			fmt.Fprintf(&b, "      - {channel: %s, upstream_model: %q, price: {input: %d, output: %d}}\n", ch, upstreamName(m.name, ch), i+1, i+1)
		}
	}
	return b.String()
}

// rootSpans keeps, per trace, the root SERVER span's failover path and
// outcome: all the soak needs, so a long run does not hold every span.
type rootSpans struct {
	mu sync.Mutex
	m  map[string][2]string
}

func (r *rootSpans) ExportSpans(_ context.Context, spans []trace.ReadOnlySpan) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range spans {
		if s.SpanKind() != oteltrace.SpanKindServer {
			continue
		}
		var path, outcome string
		for _, a := range s.Attributes() {
			switch string(a.Key) {
			case telemetry.AttrFailoverPath:
				path = a.Value.AsString()
			case telemetry.AttrOutcome:
				outcome = a.Value.AsString()
			}
		}
		r.m[s.SpanContext().TraceID().String()] = [2]string{path, outcome}
	}
	return nil
}

func (r *rootSpans) Shutdown(context.Context) error { return nil }

func (r *rootSpans) get(id string) ([2]string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.m[id]
	return v, ok
}

// errorCounter counts ERROR log lines of the gateway.
type errorCounter struct {
	slog.Handler
	n *atomic.Int64
}

func (h errorCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.n.Add(1)
	}
	return nil
}
func (h errorCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h errorCounter) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h errorCounter) WithGroup(string) slog.Handler                { return h }

// result is one request as the client saw it.
type result struct {
	id, path    string
	status      int
	stream      bool
	left        bool // the client disconnected mid-stream on purpose
	outcome     string
	latency     time.Duration
	deadlineHit bool
	err         string
}

// Run executes one soak.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 64
	}
	if o.MaxResponseBody <= 0 {
		o.MaxResponseBody = 16 << 20
	}
	if o.RequestDeadline <= 0 {
		o.RequestDeadline = 15 * time.Second
	}
	if o.RSSSlack <= 0 {
		o.RSSSlack = 96 << 20
	}
	if o.Rate <= 0 {
		o.Rate = 20
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	rep := &Report{FaultsInjected: map[string]int{}, Outcomes: map[string]int{}, MetricOutcomes: map[string]int{}}
	ignore := goleak.IgnoreCurrent()
	rep.FDsBefore = countFDs()
	rep.RSSBefore = rss()
	rep.HeapBefore = liveHeap()

	// Upstreams.
	var faultMu sync.Mutex
	var hops atomic.Int64
	onRequest := func(r upstream.Request) {
		hops.Add(1)
		f, err := upstream.ParseFault(r.Effective)
		if err != nil || f.Kind == upstream.KindNone || f.Kind == upstream.KindFlap {
			return
		}
		kind := f.Kind.String()
		if f.Kind == upstream.KindStatus {
			kind = strconv.Itoa(f.Status)
		}
		faultMu.Lock()
		rep.FaultsInjected[kind]++
		faultMu.Unlock()
	}
	ups := map[string]*upstream.Server{}
	srvs := map[string]*httptest.Server{}
	urls := map[string]string{}
	for _, ch := range []string{"c1", "c2", "c3", "c4", "c5"} {
		u := upstream.New(upstream.Options{Name: ch, LogLimit: 1, OnRequest: onRequest})
		var h http.Handler = u
		if ch == "c5" {
			h = countStatus(u, http.StatusServiceUnavailable, func() {
				faultMu.Lock()
				rep.FaultsInjected["flap(503)"]++
				faultMu.Unlock()
			})
		}
		s := httptest.NewServer(h)
		ups[ch], srvs[ch], urls[ch] = u, s, s.URL+"/v1"
	}
	closeUps := func() {
		for ch := range ups {
			ups[ch].Close()
			srvs[ch].Close()
		}
	}

	// Gateway.
	listen, admin, err := freeAddrs()
	if err != nil {
		closeUps()
		return nil, err
	}
	logSize := int(min(o.Rate*o.Duration.Seconds()*1.5+1000, 200000))
	cfg, err := config.Parse([]byte(soakConfig(listen, admin, urls, logSize)), nil)
	if err != nil {
		closeUps()
		return nil, fmt.Errorf("soak config: %w", err)
	}
	spans := &rootSpans{m: map[string][2]string{}}
	tel, err := telemetry.Setup(ctx, telemetry.Options{
		Region: cfg.Region, HealthyRatio: 1, FailoverLogSize: cfg.Telemetry.FailoverLogSize,
		SpanExporter: spans, Getenv: func(string) string { return "" },
	})
	if err != nil {
		closeUps()
		return nil, err
	}
	var errLogs atomic.Int64
	gw, err := gateway.Start(ctx, cfg, gateway.Options{
		Version: "soak", Telemetry: tel, Logger: slog.New(errorCounter{n: &errLogs}),
		DrainTimeout: 10 * time.Second, MaxResponseBody: o.MaxResponseBody,
	})
	if err != nil {
		closeUps()
		_ = tel.Shutdown(ctx)
		return nil, err
	}

	// Sampler: peak RSS and goroutines.
	sampleStop := make(chan struct{})
	sampleDone := make(chan struct{})
	var peakRSS atomic.Int64
	var peakG atomic.Int64
	go func() {
		defer close(sampleDone)
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for {
			if v := rss(); v > peakRSS.Load() {
				peakRSS.Store(v)
			}
			if g := int64(runtime.NumGoroutine()); g > peakG.Load() {
				peakG.Store(g)
			}
			select {
			case <-sampleStop:
				return
			case <-tk.C:
			}
		}
	}()

	// Fault injector: every 250 ms one (channel, upstream model) of a
	// non-flapping channel gets a random fault, or is healed.
	type target struct{ ch, name string }
	var targets []target
	for _, m := range models {
		for _, ch := range m.chain {
			if ch != "c5" {
				targets = append(targets, target{ch, upstreamName(m.name, ch)})
			}
		}
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	var rngMu sync.Mutex
	rnd := func() float64 { rngMu.Lock(); defer rngMu.Unlock(); return rng.Float64() }
	rndN := func(n int) int { rngMu.Lock(); defer rngMu.Unlock(); return rng.IntN(n) }
	injStop := make(chan struct{})
	injDone := make(chan struct{})
	go func() {
		defer close(injDone)
		tk := time.NewTicker(250 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-injStop:
				return
			case <-tk.C:
			}
			t := targets[rndN(len(targets))]
			f := ""
			if rnd() < 0.45 {
				f = faults[rndN(len(faults))]
			}
			if err := ups[t.ch].SetFault(t.name, f); err == nil {
				rep.FaultChanges++
			}
		}
	}()

	// Traffic.
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConns: o.MaxInFlight, MaxIdleConnsPerHost: o.MaxInFlight, IdleConnTimeout: 30 * time.Second,
		DisableCompression: true,
	}}
	var (
		resMu   sync.Mutex
		results []result
		wg      sync.WaitGroup
		inFl    atomic.Int64
	)
	base := "http://" + gw.Addr() + "/v1/chat/completions"
	start := time.Now()
	end := start.Add(o.Duration)
	interval := time.Duration(float64(time.Second) / o.Rate)
	tk := time.NewTicker(interval)
	lastProgress := start
	for now := time.Now(); now.Before(end) && ctx.Err() == nil; now = time.Now() {
		select {
		case <-ctx.Done():
		case <-tk.C:
		}
		if inFl.Load() >= int64(o.MaxInFlight) {
			rep.Shed++
			continue
		}
		m := models[rndN(len(models))].name
		stream := rnd() < 0.5
		slow := stream && rnd() < 0.15
		leave := stream && !slow && rnd() < 0.08
		inFl.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer inFl.Add(-1)
			r := doRequest(client, base, m, stream, slow, leave, o.RequestDeadline)
			resMu.Lock()
			results = append(results, r)
			resMu.Unlock()
		}()
		rep.Requests++
		if stream {
			rep.Streaming++
		}
		if slow {
			rep.SlowClients++
		}
		if leave {
			rep.Disconnects++
		}
		if time.Since(lastProgress) >= 10*time.Second {
			lastProgress = time.Now()
			fmt.Fprintf(progress, "soak: %v elapsed, %d requests, in flight %d, rss %d MiB, goroutines %d\n",
				time.Since(start).Round(time.Second), rep.Requests, inFl.Load(), rss()>>20, runtime.NumGoroutine())
		}
	}
	tk.Stop()
	rep.Duration = time.Since(start)
	close(injStop)
	<-injDone
	wg.Wait()
	rep.Hops = hops.Load()

	// Per-request checks and client-observed outcomes.
	adminBase := "http://" + gw.AdminAddr()
	_ = tel.TracerProvider.ForceFlush(ctx)
	var lat []time.Duration
	unknown := 0
	sure := map[string]int{}
	for _, r := range results {
		lat = append(lat, r.latency)
		if r.deadlineHit {
			rep.violate("deadline", "request %s (%s) outlived its %v deadline", r.id, r.path, o.RequestDeadline)
		}
		if r.err != "" {
			rep.violate("client", "%s (id %s, path %s)", r.err, r.id, r.path)
		}
		if r.left {
			unknown++
			rep.Outcomes["client_left"]++
			continue
		}
		if r.outcome == "" {
			continue
		}
		rep.Outcomes[r.outcome]++
		sure[r.outcome]++
		if strings.Count(r.path, telemetry.PathArrow) > 0 {
			rep.Failovers++
		}
		// The trace: root span path equals what the client was told.
		sp, ok := spans.get(r.id)
		if !ok {
			rep.violate("trace", "no root span for request %s", r.id)
			continue
		}
		want := r.path
		if r.outcome == "interrupted" {
			// X-Hopgate-Path was sent at commit ("c1:ok"); the trace ends
			// with what happened later ("c1:cut").
			want = strings.TrimSuffix(want, ":ok") + ":cut"
		}
		if sp[0] != want {
			rep.violate("path", "request %s: header path %q, root span path %q (outcome %s)", r.id, r.path, sp[0], r.outcome)
		} else {
			rep.PathsChecked++
		}
		if sp[1] != r.outcome {
			rep.violate("outcome", "request %s: client saw %s, span says %s (path %q)", r.id, r.outcome, sp[1], sp[0])
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if n := len(lat); n > 0 {
		rep.LatencyP50, rep.LatencyP99, rep.LatencyMax = lat[n/2], lat[n*99/100], lat[n-1]
	}

	// Failover log: every failover the clients saw is there, same path.
	if entries, err := failoverLog(client, adminBase); err != nil {
		rep.violate("admin", "failovers: %v", err)
	} else {
		for _, r := range results {
			if r.left || r.outcome == "" || (!strings.Contains(r.path, telemetry.PathArrow) && r.outcome == "ok") {
				continue
			}
			p, ok := entries[r.id]
			sp, _ := spans.get(r.id)
			if !ok {
				rep.violate("failover_log", "request %s (%s, %q) missing from /admin/failovers", r.id, r.outcome, r.path)
				continue
			}
			if p != sp[0] {
				rep.violate("failover_log", "request %s: log path %q, span path %q", r.id, p, sp[0])
				continue
			}
			rep.FailoverLogHits++
		}
	}

	// Metrics equal what clients saw. Handlers may still be finishing the
	// requests whose clients left, so poll until the total settles.
	deadline := time.Now().Add(10 * time.Second)
	for {
		rep.MetricOutcomes, err = requestMetrics(client, adminBase)
		total := 0
		for _, v := range rep.MetricOutcomes {
			total += v
		}
		if err != nil || total >= len(results) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling a condition
	}
	if err != nil {
		rep.violate("metrics", "scrape: %v", err)
	}
	checkMetrics(rep, sure, unknown, len(results))

	// Drain and look for leftovers.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	if err := gw.Shutdown(sctx); err != nil {
		rep.violate("drain", "gateway shutdown: %v", err)
	}
	closeUps()
	_ = tel.Shutdown(sctx)
	client.CloseIdleConnections()
	close(sampleStop)
	<-sampleDone
	rep.PeakRSS, rep.PeakGoroutines = peakRSS.Load(), int(peakG.Load())
	rep.ErrorLogs = errLogs.Load()
	if err := goleak.Find(ignore); err != nil {
		rep.GoroutinesAfter = strings.Count(err.Error(), "Goroutine ")
		rep.violate("goroutines", "left after drain: %v", firstLines(err.Error(), 30))
	}
	for i := 0; ; i++ {
		rep.FDsAfter = countFDs()
		if rep.FDsAfter <= rep.FDsBefore || i == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling: closed sockets leave the table asynchronously
	}
	if rep.FDsAfter > rep.FDsBefore {
		rep.violate("fds", "%d file descriptors before, %d after drain", rep.FDsBefore, rep.FDsAfter)
	}
	rep.HeapAfter = liveHeap()
	debug.FreeOSMemory()
	rep.RSSAfter = rss()
	switch {
	case raceEnabled:
		// Race shadow memory stays mapped: judge the Go heap instead.
		if rep.HeapAfter > rep.HeapBefore+uint64(o.RSSSlack) {
			rep.violate("heap", "live heap %d MiB after drain, %d MiB before (slack %d MiB)", rep.HeapAfter>>20, rep.HeapBefore>>20, o.RSSSlack>>20)
		}
	case rep.RSSAfter > rep.RSSBefore+o.RSSSlack:
		rep.violate("rss", "RSS %d MiB after drain, %d MiB before (slack %d MiB)", rep.RSSAfter>>20, rep.RSSBefore>>20, o.RSSSlack>>20)
	}
	return rep, nil
}

// checkMetrics: hopgate_requests_total by outcome equals the client view.
// Clients that left on purpose cannot know how their request ended, so
// those are allowed to land in any outcome.
func checkMetrics(rep *Report, sure map[string]int, unknown, total int) {
	mt := 0
	for _, v := range rep.MetricOutcomes {
		mt += v
	}
	if mt != total {
		rep.violate("metrics", "hopgate_requests_total sums to %d, clients sent %d", mt, total)
	}
	seen := map[string]bool{}
	for k := range sure {
		seen[k] = true
	}
	for k := range rep.MetricOutcomes {
		seen[k] = true
	}
	extra := 0
	for k := range seen {
		m, s := rep.MetricOutcomes[k], sure[k]
		if m < s || m > s+unknown {
			rep.violate("metrics", "outcome %s: metric %d, clients saw %d (+ up to %d that left)", k, m, s, unknown)
		}
		extra += m - s
	}
	if extra != unknown {
		rep.violate("metrics", "%d metric outcomes unaccounted for, %d clients left", extra, unknown)
	}
}

var outcomeRe = regexp.MustCompile(`^hopgate_requests_total\{.*outcome="([^"]+)".*\} ([0-9.e+]+)`)

func requestMetrics(c *http.Client, admin string) (map[string]int, error) {
	resp, err := c.Get(admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := outcomeRe.FindStringSubmatch(sc.Text()); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			out[m[1]] += int(v)
		}
	}
	return out, sc.Err()
}

func failoverLog(c *http.Client, admin string) (map[string]string, error) {
	resp, err := c.Get(admin + "/admin/failovers")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var entries []telemetry.FailoverEntry
	if err := json.NewDecoder(resp.Body).Decode(&entries); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range entries {
		out[e.TraceID] = e.Path
	}
	return out, nil
}

// doRequest sends one request and classifies what came back.
func doRequest(c *http.Client, url, model string, stream, slow, leave bool, deadline time.Duration) (r result) {
	r.stream = stream
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	defer func() { r.latency = time.Since(start) }()
	body := fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":"soak"}]}`, model, stream)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		r.deadlineHit = errors.Is(ctx.Err(), context.DeadlineExceeded)
		r.err = "transport: " + err.Error()
		return r
	}
	defer resp.Body.Close()
	r.status, r.id, r.path = resp.StatusCode, resp.Header.Get("X-Request-Id"), resp.Header.Get("X-Hopgate-Path")
	if len(r.id) != 32 {
		r.err = fmt.Sprintf("status %d without a trace id in X-Request-Id (%q)", r.status, r.id)
	}
	steps := strings.Count(r.path, telemetry.PathArrow) + 1
	okOutcome := "ok"
	if steps > 1 {
		okOutcome = "failover_ok"
	}
	if resp.StatusCode == 200 && stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		br := bufio.NewReader(resp.Body)
		var last string
		finish, done := false, false
		for {
			line, err := br.ReadString('\n')
			if d, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "data: "); ok {
				last = d
				if d == "[DONE]" {
					done = true
				} else if strings.Contains(d, `"finish_reason":"`) {
					finish = true
				}
				if leave {
					r.left = true
					return r // the client goes away mid-stream
				}
			}
			if err != nil {
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					r.deadlineHit = true
					return r
				}
				if !errors.Is(err, io.EOF) {
					r.err = "stream read: " + err.Error()
					return r
				}
				break
			}
			if slow {
				time.Sleep(25 * time.Millisecond) // the slow reader
			}
		}
		switch {
		case done && finish:
			r.outcome = okOutcome
		case !done && strings.Contains(last, `"code":"upstream_stream_interrupted"`):
			r.outcome = "interrupted"
		default:
			r.err = fmt.Sprintf("200 stream neither complete nor ended by an error frame (finish=%v done=%v last=%.120q)", finish, done, last)
		}
		return r
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.deadlineHit = errors.Is(ctx.Err(), context.DeadlineExceeded)
		r.err = "body read: " + err.Error()
		return r
	}
	var v struct {
		Choices []json.RawMessage `json:"choices"`
		Error   *struct {
			Code any `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		r.err = fmt.Sprintf("status %d, body not JSON: %.120q", resp.StatusCode, b)
		return r
	}
	switch {
	case resp.StatusCode == 200 && len(v.Choices) > 0:
		r.outcome = okOutcome
	case resp.StatusCode != 200 && v.Error != nil:
		switch fmt.Sprint(v.Error.Code) {
		case "all_channels_failed":
			r.outcome = "exhausted"
		case "engine_overloaded":
			r.outcome = "deadline"
		default:
			r.outcome = "final_error"
		}
	default:
		r.err = fmt.Sprintf("status %d, unexpected body %.120q", resp.StatusCode, b)
	}
	return r
}

// countStatus calls hit for every response of h with the given status.
func countStatus(h http.Handler, status int, hit func()) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		if sw.status == status {
			hit()
		}
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(s int) {
	if w.status == 0 {
		w.status = s
	}
	w.ResponseWriter.WriteHeader(s)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func freeAddrs() (string, string, error) {
	var out [2]string
	for i := range out {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", "", err
		}
		out[i] = ln.Addr().String()
		defer ln.Close()
	}
	return out[0], out[1], nil
}

// liveHeap is the Go heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// rss is the resident set size from /proc/self/status (0 elsewhere).
func rss() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func countFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

func firstLines(s string, n int) string {
	ls := strings.SplitN(s, "\n", n+1)
	if len(ls) > n {
		ls = ls[:n]
	}
	return strings.Join(ls, "\n")
}
