package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/dispatch/api"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/gateway"
	"github.com/hopgate/hopgate/telemetry"
)

// Options bound a soak run.
type Options struct {
	Duration time.Duration // traffic duration; the run stops by itself
	Rate     float64       // requests started per second (open loop)
	// MaxInFlight is the soak's own bound: a request due while that many
	// are in flight is not sent (counted as skipped), so that a machine
	// that cannot keep up is reported rather than queued. Default 64.
	MaxInFlight int
	Seed        uint64 // random seed; 0 = time-based
	// MaxResponseBody overrides the bound on one buffered upstream answer
	// (gateway.Options). 0: the config's per-operation bound
	// (overload.max_response_bytes, 16 MiB for chat), as in production.
	MaxResponseBody int64
	// MemoryLimit is applied with debug.SetMemoryLimit before the gateway
	// starts, as hopgate serve sets 90 % of the container limit deploy/k8s
	// passes (HOPGATE_MEMORY_LIMIT), so the gateway's buffer budget follows it; the limit in force before is
	// restored at the end. 0: the limit in force (GOMEMLIMIT, if any).
	MemoryLimit int64
	// RSSCeiling: a peak RSS above it is a violation (the container limit
	// an OOM kill would enforce). 0: DefaultRSSCeiling when a memory limit
	// is in force, else none; < 0: none.
	RSSCeiling int64
	// EndlessShare is the share of injected faults that are endless-body
	// or endless-frame (half each); the rest is drawn from the other fault
	// words. 0: every fault word alike (2 in 31).
	EndlessShare float64
	// BudgetBytes, BudgetFraction, GatewayMaxInFlight and
	// GatewayMaxStreams are the gateway's overload: budget_bytes,
	// budget_fraction, max_in_flight and max_streams. 0: the config
	// defaults (half of GOMEMLIMIT, bounds derived from the budget).
	BudgetBytes, GatewayMaxInFlight, GatewayMaxStreams int64
	BudgetFraction                                     float64
	// FrameDelay is waited by every fake provider between stream frames
	// and between chunks of endless bodies, as a model generates: streams
	// then stay open long enough to meet a stream bound. 0: none.
	FrameDelay time.Duration
	// RequestDeadline is the client's deadline per request; default 15 s.
	RequestDeadline time.Duration
	// RSSSlack is how far above the start RSS the drained process may stay;
	// default 96 MiB.
	RSSSlack int64
	Progress io.Writer // a line every 10 s; nil: none
	// HeapProfile, when set, is where a heap profile (runtime/pprof) is
	// written at the highest RSS, again each time the peak grows by 16 MiB:
	// what holds the memory when the ceiling is near.
	HeapProfile string
	// Wallet sends every request with a tenant's key, so each is reserved
	// and charged against a wallet in a SQLite store, and checks the books
	// after the drain (wallet.go).
	Wallet bool
}

// DefaultRSSCeiling is the peak RSS allowed when a memory limit is in force:
// the memory limit of deploy/k8s/deployment.yaml, where the kernel would
// OOM-kill the pod.
const DefaultRSSCeiling = 512 << 20

// RSSMargin is the share of the ceiling a peak RSS may reach: a pod at
// its limit is one burst from an OOM kill, so the soak wants a margin
// (issue 35: at most 90 % of the ceiling).
const RSSMargin = 0.9

// Report is what a run observed. Violations empty means the soak passed.
type Report struct {
	Duration    time.Duration `json:"duration"`
	Seed        uint64        `json:"seed"`
	Requests    int           `json:"requests"`
	Streaming   int           `json:"streaming"`
	SlowClients int           `json:"slow_clients"`
	Disconnects int           `json:"disconnects"`
	Skipped     int           `json:"skipped"` // not sent: the soak's own MaxInFlight
	Rate        float64       `json:"rate"`    // requests due per second, sent or skipped
	MaxLag      int           `json:"max_lag"` // most requests due and not yet started at a tick
	// Shed counts, by X-Hopgate-Shed reason, the requests hopgate refused
	// at once (503 engine_overloaded with Retry-After); MetricShed is
	// hopgate_shed_requests_total by reason. They must be equal.
	Shed           map[string]int `json:"shed"`
	MetricShed     map[string]int `json:"metric_shed"`
	ShedTraced     int            `json:"shed_traced"` // shed requests whose root span says engine_overloaded
	FaultChanges   int            `json:"fault_changes"`
	FaultsInjected map[string]int `json:"faults_injected"` // hops that met a fault, by kind
	Hops           int64          `json:"upstream_hops"`
	Outcomes       map[string]int `json:"client_outcomes"` // what clients saw
	MetricOutcomes map[string]int `json:"metric_outcomes"` // hopgate_requests_total
	Failovers      int            `json:"failovers"`       // requests with a multi-step path
	// BudgetHops are hops failed at the buffer budget: buffer_budget in
	// the paths of traced requests (hopgate_hops_total counts them as
	// retryable, with the others).
	BudgetHops      int           `json:"budget_hops"`
	PathsChecked    int           `json:"paths_checked"` // header path == root span path
	FailoverLogHits int           `json:"failover_log_hits"`
	LatencyP50      time.Duration `json:"latency_p50"`
	LatencyP99      time.Duration `json:"latency_p99"`
	LatencyMax      time.Duration `json:"latency_max"`
	// PeakRSS is the peak of the traffic (the kernel's high-water mark
	// when it can be reset), the one the ceiling judges; PeakRSSAll goes
	// on through the checks and the drain.
	PeakRSS     int64 `json:"peak_rss_bytes"`
	PeakRSSAll  int64 `json:"peak_rss_all_bytes"`
	MemoryLimit int64 `json:"memory_limit_bytes"` // in force during the run; 0: none
	RSSCeiling  int64 `json:"rss_ceiling_bytes"`  // 0: none
	// The gateway's overload protection: its budget and bounds, and the
	// peaks of its gauges (/metrics, sampled every 500 ms).
	BudgetLimit    int64 `json:"budget_limit_bytes"`
	PeakBudgetUsed int64 `json:"peak_budget_used_bytes"`
	// AtPeak breaks the highest sampled RSS down: what the Go runtime
	// holds, and what else (the binary's pages, non-Go memory).
	AtPeak          memAt  `json:"at_peak"`
	BoundInFlight   int64  `json:"bound_in_flight"`
	BoundStreams    int64  `json:"bound_streams"`
	PeakInFlight    int64  `json:"peak_in_flight"`
	PeakStreams     int64  `json:"peak_streams"`
	RSSBefore       int64  `json:"rss_before_bytes"`
	RSSAfter        int64  `json:"rss_after_bytes"`
	HeapBefore      uint64 `json:"heap_before_bytes"` // live Go heap after a GC
	HeapAfter       uint64 `json:"heap_after_bytes"`
	PeakGoroutines  int    `json:"peak_goroutines"`
	GoroutinesAfter int    `json:"leaked_goroutines"`
	FDsBefore       int    `json:"fds_before"`
	FDsAfter        int    `json:"fds_after"`
	ErrorLogs       int64  `json:"error_logs"`
	// CPU is the process's user+system time during the traffic (gateway,
	// fake providers and clients together): over Duration, the cores used.
	CPU time.Duration `json:"cpu"`
	// LoadBefore and LoadAfter are the machine's 1-minute load average
	// when the traffic starts and ends (the soak shares its cores).
	LoadBefore     float64        `json:"load_before"`
	LoadAfter      float64        `json:"load_after"`
	Cores          int            `json:"cores"`
	Violations     []string       `json:"violations"`
	violationKinds map[string]int // violations per kind (samples are capped)
	// Wallet is what the books said after the drain (-wallet only).
	Wallet *WalletReport `json:"wallet,omitempty"`
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

// pickFault draws a fault word: with share > 0, an endless one (the faults
// that fill a buffer to its bound, what the buffer budget is for) with that
// probability, else one of the others; with share ≤ 0, any word alike.
func pickFault(share float64, rnd func() float64, rndN func(int) int) string {
	if share <= 0 {
		return faults[rndN(len(faults))]
	}
	if rnd() < share {
		return endlessFaults[rndN(len(endlessFaults))]
	}
	for {
		f := faults[rndN(len(faults))]
		if !slices.Contains(endlessFaults, f) {
			return f
		}
	}
}

var endlessFaults = []string{"endless-body", "endless-frame"}

func upstreamName(model, ch string) string {
	n := model + "@" + ch
	if ch == "c5" {
		n += "|" + flapFault
	}
	return n
}

func soakConfig(listen, admin string, urls map[string]string, logSize int, o Options) string {
	fraction := "" // the config's default
	if o.BudgetFraction > 0 {
		fraction = fmt.Sprintf(", budget_fraction: %g", o.BudgetFraction)
	}
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
overload: {budget_bytes: %d, max_in_flight: %d, max_streams: %d%s}
channels:
`, listen, admin, logSize, o.BudgetBytes, o.GatewayMaxInFlight, o.GatewayMaxStreams, fraction)
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

// rootSpans keeps, per trace, the root SERVER span's failover path,
// outcome and error code: all the soak needs, so a long run does not hold
// every span.
type rootSpans struct {
	mu sync.Mutex
	m  map[string]rootSpan
}

type rootSpan struct{ path, outcome, code string }

func (r *rootSpans) ExportSpans(_ context.Context, spans []trace.ReadOnlySpan) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range spans {
		if s.SpanKind() != oteltrace.SpanKindServer {
			continue
		}
		var rs rootSpan
		for _, a := range s.Attributes() {
			switch string(a.Key) {
			case telemetry.AttrFailoverPath:
				rs.path = a.Value.AsString()
			case telemetry.AttrOutcome:
				rs.outcome = a.Value.AsString()
			case telemetry.AttrErrorCode:
				rs.code = a.Value.AsString()
			}
		}
		r.m[s.SpanContext().TraceID().String()] = rs
	}
	return nil
}

func (r *rootSpans) Shutdown(context.Context) error { return nil }

func (r *rootSpans) get(id string) (rootSpan, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.m[id]
	return v, ok
}

// rootSpanWait bounds awaitRootSpans: a root still missing after it is
// reported missing.
const rootSpanWait = 10 * time.Second

// awaitRootSpans flushes the tracer provider until every request whose
// answer came back (not one the client left on purpose) has its root span
// in spans, or rootSpanWait has passed; the checks then report each root
// still missing. A single flush right after the last client returned
// once missed one root of 119 in TestSoakWalletBooks under CI load (a
// streamed failover, its failover log entry present); ten reruns met no
// missing root, and why that flush missed it was not found. A root the
// gateway lost (a dropped span) never arrives, so the bound keeps the
// check as strict; it only stops the check racing the export.
func awaitRootSpans(ctx context.Context, tel *telemetry.Telemetry, spans *rootSpans, results []result) {
	deadline := time.Now().Add(rootSpanWait)
	for {
		_ = tel.TracerProvider.ForceFlush(ctx)
		missing := false
		for _, r := range results {
			if r.left || (r.shed == "" && r.outcome == "") {
				continue
			}
			if _, ok := spans.get(r.id); !ok {
				missing = true
				break
			}
		}
		if !missing || !time.Now().Before(deadline) || ctx.Err() != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// gatewayLog counts ERROR log lines of the gateway and keeps the bounds
// of its "overload protection" line (the bounds derived from the budget
// are in no metric).
type gatewayLog struct {
	errors            *atomic.Int64
	inFlight, streams *atomic.Int64
}

func (h gatewayLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.errors.Add(1)
	}
	if r.Message == "overload protection" {
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "max_in_flight":
				h.inFlight.Store(a.Value.Int64())
			case "max_streams":
				h.streams.Store(a.Value.Int64())
			}
			return true
		})
	}
	return nil
}

// Enabled: Info for the overload line; request lines are dropped in Handle.
func (h gatewayLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h gatewayLog) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h gatewayLog) WithGroup(string) slog.Handler                { return h }

// result is one request as the client saw it.
type result struct {
	id, path    string
	status      int
	stream      bool
	left        bool   // the client disconnected mid-stream on purpose
	shed        string // X-Hopgate-Shed: the reason hopgate shed it
	badShed     string // what a shed reply lacked
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
	rep := &Report{Seed: o.Seed, FaultsInjected: map[string]int{}, Outcomes: map[string]int{}, MetricOutcomes: map[string]int{},
		Shed: map[string]int{}, MetricShed: map[string]int{}}
	// The memory limit first, as GOMEMLIMIT is set before the process
	// starts: the gateway derives its buffer budget from it.
	if o.MemoryLimit > 0 {
		prev := debug.SetMemoryLimit(o.MemoryLimit)
		defer debug.SetMemoryLimit(prev)
	}
	if lim := debug.SetMemoryLimit(-1); lim < math.MaxInt64 {
		rep.MemoryLimit = lim
	}
	switch {
	case o.RSSCeiling > 0:
		rep.RSSCeiling = o.RSSCeiling
	case o.RSSCeiling == 0 && rep.MemoryLimit > 0:
		rep.RSSCeiling = DefaultRSSCeiling
	}
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
		u := upstream.New(upstream.Options{Name: ch, LogLimit: 1, OnRequest: onRequest, FrameDelay: o.FrameDelay})
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
	cfgText := soakConfig(listen, admin, urls, logSize, o)
	var wallet *soakWallet
	if o.Wallet {
		if wallet, err = newSoakWallet(ctx); err != nil {
			closeUps()
			return nil, err
		}
		defer wallet.remove()
		rep.Wallet = &WalletReport{}
		cfgText = strings.Replace(cfgText, "auth: {mode: none}\n", wallet.configYAML(), 1)
	}
	cfg, err := config.Parse([]byte(cfgText), nil)
	if err != nil {
		closeUps()
		return nil, fmt.Errorf("soak config: %w", err)
	}
	spans := &rootSpans{m: map[string]rootSpan{}}
	tel, err := telemetry.Setup(ctx, telemetry.Options{
		Region: cfg.Region, HealthyRatio: 1, FailoverLogSize: cfg.Telemetry.FailoverLogSize,
		SpanExporter: spans, Getenv: func(string) string { return "" },
	})
	if err != nil {
		closeUps()
		return nil, err
	}
	var errLogs, boundInFlight, boundStreams atomic.Int64
	gw, err := gateway.Start(ctx, cfg, gateway.Options{
		Version: "soak", Telemetry: tel,
		Logger:       slog.New(gatewayLog{errors: &errLogs, inFlight: &boundInFlight, streams: &boundStreams}),
		DrainTimeout: 10 * time.Second, MaxResponseBody: o.MaxResponseBody,
	})
	if err != nil {
		closeUps()
		_ = tel.Shutdown(ctx)
		return nil, err
	}

	adminBase := "http://" + gw.AdminAddr()
	scraper := &http.Client{Timeout: 5 * time.Second}

	// Sampler: peak RSS and goroutines; every 500 ms the gateway's
	// overload gauges. The kernel's RSS high-water mark is reset first
	// (clear_refs 5), so a spike between two samples is not missed.
	hwmReset := resetPeakRSS() == nil
	sampleStop := make(chan struct{})
	sampleDone := make(chan struct{})
	var peakRSS, peakG atomic.Int64
	var peakBudget, peakInFl, peakStreams, budgetLimit atomic.Int64
	var atPeak memAt // the sampler's own until sampleDone is closed
	var lastBudget, profiled int64
	raise := func(a *atomic.Int64, v int64) {
		if v > a.Load() {
			a.Store(v)
		}
	}
	go func() {
		defer close(sampleDone)
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for i := 0; ; i++ {
			if v := rss(); v > peakRSS.Load() {
				peakRSS.Store(v)
				atPeak = readMemAt(v, lastBudget)
				if o.HeapProfile != "" && v >= profiled+16<<20 {
					profiled = v
					writeHeapProfile(o.HeapProfile)
				}
			}
			raise(&peakG, int64(runtime.NumGoroutine()))
			if i%5 == 0 {
				if ms, err := scrape(scraper, adminBase); err == nil {
					lastBudget = int64(ms.sum(telemetry.MetricBudgetUsed, "", ""))
					raise(&peakBudget, lastBudget)
					raise(&peakInFl, int64(ms.sum(telemetry.MetricInFlight, "", "")))
					raise(&peakStreams, int64(ms.sum(telemetry.MetricStreamsOpen, "", "")))
					budgetLimit.Store(int64(ms.sum(telemetry.MetricBudgetLimit, "", "")))
				}
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
				f = pickFault(o.EndlessShare, rnd, rndN)
			}
			if err := ups[t.ch].SetFault(t.name, f); err == nil {
				rep.FaultChanges++
			}
		}
	}()

	// Traffic.
	clientTr := &http.Transport{
		MaxIdleConns: o.MaxInFlight, MaxIdleConnsPerHost: o.MaxInFlight, IdleConnTimeout: 30 * time.Second,
		DisableCompression: true,
	}
	client := &http.Client{Transport: clientTr}
	if wallet != nil {
		client.Transport = keyTransport{next: clientTr}
	}
	var (
		resMu   sync.Mutex
		results []result
		wg      sync.WaitGroup
		inFl    atomic.Int64
		shedN   atomic.Int64
	)
	base := "http://" + gw.Addr() + "/v1/chat/completions"
	start := time.Now()
	cpuStart := cpuTime()
	rep.LoadBefore, rep.Cores = loadAvg(), runtime.NumCPU()
	end := start.Add(o.Duration)
	startOne := func() {
		if inFl.Load() >= int64(o.MaxInFlight) {
			rep.Skipped++
			return
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
			if r.shed != "" {
				shedN.Add(1)
			}
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
	}
	// Open loop: every tick starts all the requests due by then (rate ×
	// elapsed), so a late wake-up on a busy machine is caught up, not
	// silently dropped (a ticker drops the ticks it could not deliver);
	// MaxLag says how far behind the generator fell.
	tk := time.NewTicker(max(time.Duration(float64(time.Second)/o.Rate), time.Millisecond))
	lastProgress := start
	sent := 0
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			continue
		case <-tk.C:
		}
		now := time.Now()
		if !now.Before(end) {
			break
		}
		due := int(now.Sub(start).Seconds() * o.Rate)
		rep.MaxLag = max(rep.MaxLag, due-sent)
		for ; sent < due; sent++ {
			startOne()
		}
		if now.Sub(lastProgress) >= 10*time.Second {
			lastProgress = now
			fmt.Fprintf(progress, "soak: %v elapsed, %d requests, %d skipped, %d shed, in flight %d, rss %d MiB (peak %d), budget peak %d MiB, goroutines %d\n",
				now.Sub(start).Round(time.Second), rep.Requests, rep.Skipped, shedN.Load(), inFl.Load(), rss()>>20, peakRSS.Load()>>20,
				peakBudget.Load()>>20, runtime.NumGoroutine())
		}
	}
	tk.Stop()
	rep.Duration = time.Since(start)
	rep.CPU = cpuTime() - cpuStart
	rep.LoadAfter = loadAvg()
	rep.Rate = float64(rep.Requests+rep.Skipped) / rep.Duration.Seconds()
	close(injStop)
	<-injDone
	wg.Wait()
	// The peak of the traffic, before the checks below read the whole
	// failover log (up to 200 000 entries) in one answer.
	rep.PeakRSS = peakRSS.Load()
	if hwmReset {
		rep.PeakRSS = max(rep.PeakRSS, peakRSSMark())
	}
	rep.Hops = hops.Load()

	// Per-request checks and client-observed outcomes, once the root
	// spans the answers name have reached the exporter.
	awaitRootSpans(ctx, tel, spans, results)
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
		if r.shed != "" {
			// Shed at the door: nothing was tried, so no path and no
			// hopgate_requests_total; the trace says engine_overloaded.
			rep.Shed[r.shed]++
			if r.badShed != "" {
				rep.violate("shed", "request %s (shed: %s): %s", r.id, r.shed, r.badShed)
			}
			if sp, ok := spans.get(r.id); !ok || sp.code != "engine_overloaded" {
				rep.violate("trace", "shed request %s: root span found %v, error code %q", r.id, ok, sp.code)
			} else {
				rep.ShedTraced++
			}
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
		if sp.path != want {
			rep.violate("path", "request %s: header path %q, root span path %q (outcome %s)", r.id, r.path, sp.path, r.outcome)
		} else {
			rep.PathsChecked++
		}
		if sp.outcome != r.outcome {
			rep.violate("outcome", "request %s: client saw %s, span says %s (path %q)", r.id, r.outcome, sp.outcome, sp.path)
		}
		// A hop failed at the buffer budget is a failover like any other.
		rep.BudgetHops += strings.Count(sp.path, ":buffer_budget")
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
			if r.left || r.shed != "" || r.outcome == "" || (!strings.Contains(r.path, telemetry.PathArrow) && r.outcome == "ok") {
				continue
			}
			p, ok := entries[r.id]
			sp, _ := spans.get(r.id)
			if !ok {
				rep.violate("failover_log", "request %s (%s, %q) missing from /admin/failovers", r.id, r.outcome, r.path)
				continue
			}
			if p != sp.path {
				rep.violate("failover_log", "request %s: log path %q, span path %q", r.id, p, sp.path)
				continue
			}
			rep.FailoverLogHits++
		}
	}

	// Metrics equal what clients saw: hopgate_requests_total the requests
	// that were admitted, hopgate_shed_requests_total those that were
	// shed. Handlers may still be finishing the requests whose clients
	// left, so poll until the total settles.
	shed := 0
	for _, n := range rep.Shed {
		shed += n
	}
	admitted := len(results) - shed
	var ms metricSet
	deadline := time.Now().Add(10 * time.Second)
	for {
		ms, err = scrape(scraper, adminBase)
		if err != nil || int(ms.sum(telemetry.MetricRequests, "", "")) >= admitted || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling a condition
	}
	if err != nil {
		rep.violate("metrics", "scrape: %v", err)
	}
	rep.MetricOutcomes = ms.by(telemetry.MetricRequests, telemetry.LabelOutcome)
	rep.MetricShed = ms.by(telemetry.MetricShed, telemetry.LabelShedReason)
	checkMetrics(rep, sure, unknown, admitted)
	checkShed(rep)

	// Drain and look for leftovers.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	if err := gw.Shutdown(sctx); err != nil {
		rep.violate("drain", "gateway shutdown: %v", err)
	}
	closeUps()
	_ = tel.Shutdown(sctx)
	client.CloseIdleConnections()
	if wallet != nil {
		wallet.checkBooks(sctx, rep, results)
	}
	close(sampleStop)
	<-sampleDone
	rep.PeakGoroutines = int(peakG.Load())
	rep.PeakRSSAll = peakRSS.Load()
	if hwmReset {
		rep.PeakRSSAll = max(rep.PeakRSSAll, peakRSSMark())
	}
	rep.AtPeak = atPeak
	rep.BudgetLimit, rep.PeakBudgetUsed = budgetLimit.Load(), peakBudget.Load()
	rep.PeakInFlight, rep.PeakStreams = peakInFl.Load(), peakStreams.Load()
	rep.BoundInFlight, rep.BoundStreams = boundInFlight.Load(), boundStreams.Load()
	if margin := int64(float64(rep.RSSCeiling) * RSSMargin); rep.RSSCeiling > 0 && rep.PeakRSS > margin {
		rep.violate("rss_ceiling", "peak RSS %d MiB above %.0f %% of the ceiling of %d MiB (%d MiB; memory limit %d MiB)", rep.PeakRSS>>20, RSSMargin*100, rep.RSSCeiling>>20, margin>>20, rep.MemoryLimit>>20)
	}
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

// checkShed: every request hopgate shed was answered as such (counted by
// reason from X-Hopgate-Shed), and hopgate_shed_requests_total by reason
// equals those counts. A shed request never reaches the engine, so a
// client that leaves mid-stream cannot blur this one.
func checkShed(rep *Report) {
	seen := map[string]bool{}
	for k := range rep.Shed {
		seen[k] = true
	}
	for k := range rep.MetricShed {
		seen[k] = true
	}
	for k := range seen {
		if m, c := rep.MetricShed[k], rep.Shed[k]; m != c {
			rep.violate("shed_metrics", "reason %s: hopgate_shed_requests_total %d, clients were shed %d", k, m, c)
		}
	}
}

// metricSet is one scrape of /metrics: the samples of the Prometheus text
// format, labels kept as written.
type metricSet []metricSample

type metricSample struct {
	name   string
	labels map[string]string
	value  float64
}

// sum adds the samples of name whose label has the value (label "": all).
func (ms metricSet) sum(name, label, value string) float64 {
	var t float64
	for _, s := range ms {
		if s.name == name && (label == "" || s.labels[label] == value) {
			t += s.value
		}
	}
	return t
}

// by sums the samples of name by the value of label.
func (ms metricSet) by(name, label string) map[string]int {
	out := map[string]int{}
	for _, s := range ms {
		if s.name == name {
			out[s.labels[label]] += int(s.value)
		}
	}
	return out
}

func scrape(c *http.Client, admin string) (metricSet, error) {
	resp, err := c.Get(admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: status %d", resp.StatusCode)
	}
	var ms metricSet
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if s, ok := parseSample(sc.Text()); ok {
			ms = append(ms, s)
		}
	}
	return ms, sc.Err()
}

// parseSample reads one line of the Prometheus text format:
// name{label="value",…} value [timestamp]. Comments and lines it cannot
// read are skipped.
func parseSample(line string) (metricSample, bool) {
	if line == "" || line[0] == '#' {
		return metricSample{}, false
	}
	s := metricSample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, false
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, ", ")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			eq := strings.Index(line, `="`)
			if eq <= 0 {
				return s, false
			}
			key := line[:eq]
			line = line[eq+2:]
			var val strings.Builder
			for {
				if line == "" {
					return s, false
				}
				c := line[0]
				line = line[1:]
				if c == '"' {
					break
				}
				if c == '\\' && line != "" {
					c = map[byte]byte{'n': '\n'}[line[0]]
					if c == 0 {
						c = line[0]
					}
					line = line[1:]
				}
				val.WriteByte(c)
			}
			s.labels[key] = val.String()
		}
	}
	f := strings.Fields(line)
	if len(f) == 0 {
		return s, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, false
	}
	s.value = v
	return s, true
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
	case resp.StatusCode != 200 && v.Error != nil && resp.Header.Get(api.ShedHeader) != "":
		// Shed at the door (docs/errors.md): 503 engine_overloaded with
		// Retry-After. The chain deadline's degraded reply is
		// engine_overloaded too, without the header.
		r.shed = resp.Header.Get(api.ShedHeader)
		var bad []string
		if resp.StatusCode != http.StatusServiceUnavailable {
			bad = append(bad, fmt.Sprintf("status %d, not 503", resp.StatusCode))
		}
		if c := fmt.Sprint(v.Error.Code); c != "engine_overloaded" {
			bad = append(bad, fmt.Sprintf("code %q, not engine_overloaded", c))
		}
		if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra <= 0 {
			bad = append(bad, fmt.Sprintf("Retry-After %q", resp.Header.Get("Retry-After")))
		}
		r.badShed = strings.Join(bad, ", ")
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
func rss() int64 { return procStatusBytes("VmRSS:") }

// procStatusBytes reads a "kB" field of /proc/self/status in bytes.
func procStatusBytes(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// resetPeakRSS resets the kernel's RSS high-water mark (VmHWM) of this
// process (Linux ≥ 4.0: "5" to /proc/self/clear_refs).
func resetPeakRSS() error {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSSMark is VmHWM from /proc/self/status: the peak RSS since the
// last reset (0 elsewhere).
func peakRSSMark() int64 { return procStatusBytes("VmHWM:") }

// memAt is the process's memory at one sample.
type memAt struct {
	RSS         int64 `json:"rss_bytes"`
	RSSFile     int64 `json:"rss_file_bytes"`     // of RSS, file-backed pages (the binary's): reclaimable
	GoRuntime   int64 `json:"go_runtime_bytes"`   // mapped by the Go runtime, not released to the OS
	HeapObjects int64 `json:"heap_objects_bytes"` // live objects and garbage not yet swept
	HeapLive    int64 `json:"heap_live_bytes"`    // live heap at the last GC
	Budget      int64 `json:"budget_used_bytes"`  // the gateway's buffer budget in use (last scrape)
}

func readMemAt(rss, budget int64) memAt {
	ss := []metrics.Sample{
		{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"},
	}
	metrics.Read(ss)
	v := func(i int) int64 {
		if ss[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(ss[i].Value.Uint64())
	}
	return memAt{RSS: rss, RSSFile: procStatusBytes("RssFile:"), GoRuntime: v(0) - v(1), HeapObjects: v(2), HeapLive: v(3), Budget: budget}
}

func writeHeapProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	_ = pprof.WriteHeapProfile(f)
}

// loadAvg is the 1-minute load average of the machine (0 elsewhere).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// cpuTime is the user+system time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
