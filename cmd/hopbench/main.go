package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	if role := os.Getenv(envRole); role != "" {
		if err := runRole(role, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "hopbench "+role+":", err)
			os.Exit(1)
		}
		return
	}
	o, err := parseFlags(os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	o.log = os.Stderr
	if _, err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "hopbench:", err)
		os.Exit(1)
	}
}

// options of one benchmark run.
type options struct {
	out         string        // report path ("" or "-": stdout)
	duration    time.Duration // per target per round
	rounds      int
	rate        int    // open-loop rate for latency
	workers     uint64 // closed-loop concurrency for throughput
	ttftWorkers int
	idle        int // idle streams for the memory test
	micro       bool
	benchtime   string
	peers       []string
	profileDir  string
	root        string // module root (micro-benchmarks)
	quick       bool
	seed        uint64        // shuffles the order of targets in each round
	settle      time.Duration // idle time before each turn
	only        string        // run this phase alone (only.go); "": the whole run
	log         io.Writer
}

func parseFlags(args []string, getenv func(string) string) (options, error) {
	fs := flag.NewFlagSet("hopbench", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.out, "out", "docs/benchmarks.md", `report path ("-" for stdout)`)
	fs.DurationVar(&o.duration, "duration", 1500*time.Millisecond, "length of one target's turn in a round")
	fs.IntVar(&o.rounds, "rounds", 5, "rounds per measurement (targets alternate within a round)")
	fs.IntVar(&o.rate, "rate", 1000, "open-loop request rate for the latency measurement (req/s)")
	workers := fs.Uint64("workers", 32, "closed-loop concurrency for the throughput measurement")
	fs.IntVar(&o.ttftWorkers, "ttft-workers", 4, "concurrent streams for the time-to-first-token measurement")
	fs.IntVar(&o.idle, "idle", 1000, "idle streams for the memory measurement")
	fs.BoolVar(&o.micro, "micro", true, "run the Go micro-benchmarks")
	fs.StringVar(&o.benchtime, "benchtime", "300ms", "go test -benchtime for the micro-benchmarks")
	fs.StringVar(&o.profileDir, "profile", "", "directory for CPU and allocation profiles of hopgate under load")
	peers := fs.String("peers", getenv("BENCH_PEERS"), "comma-separated peer gateways to include (portkey); default $BENCH_PEERS")
	fs.BoolVar(&o.quick, "quick", false, "smoke test: tiny durations and counts, no micro-benchmarks")
	fs.DurationVar(&o.settle, "settle", 250*time.Millisecond, "idle time before each turn, so the previous target's leftovers (GC, span export) do not run in it")
	fs.StringVar(&o.only, "only", "", "run one phase alone and write its section: "+onlyRealtime+", "+onlyLimits+" or "+onlyStreams)
	fs.Uint64Var(&o.seed, "seed", 0, "seed of each round's target order (0: from the clock; the report gives it)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.workers = *workers
	for p := range strings.SplitSeq(*peers, ",") {
		if p = strings.TrimSpace(p); p != "" {
			if p != peerPortkey {
				return o, fmt.Errorf("unknown peer %q (known: %s)", p, peerPortkey)
			}
			o.peers = append(o.peers, p)
		}
	}
	if o.quick {
		o.duration, o.rounds, o.rate, o.workers, o.idle, o.micro = 300*time.Millisecond, 1, 200, 8, 50, false
		o.ttftWorkers, o.settle = 2, 0
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	if o.only != "" && o.only != onlyRealtime && o.only != onlyLimits && o.only != onlyStreams {
		return o, fmt.Errorf("unknown -only phase %q (known: %s, %s, %s)", o.only, onlyRealtime, onlyLimits, onlyStreams)
	}
	if o.rounds < 1 || o.duration <= 0 || o.rate < 1 || o.workers < 1 || o.idle < 1 {
		return o, errors.New("rounds, duration, rate, workers and idle must be positive")
	}
	return o, nil
}

// results is everything a run measured; report.go renders it.
type results struct {
	opts       options
	facts      machineFacts
	targets    []string           // in round order
	latency    map[string]*matrix // by workload name
	throughput map[string]*matrix // by workload name
	ttft       *matrix            // streams
	failRate   *matrix            // failover cases at the fixed rate
	failMax    *matrix            // failover cases at fixed concurrency
	skipHits   int64              // upstream round trips to the open channel during skip turns
	fail1Hits  int64              // round trips to the 503 channel during fail1 turns
	fail1Reqs  int64              // fail1 requests answered
	idle       map[string]idleResult
	// tlsThroughput and tlsLatency measure the bare proxy and hopgate
	// against the TLS upstreams (targets targetProxyH1 …); tlsConns is what
	// each target's turns cost the upstream in connections and requests.
	tlsThroughput map[string]*matrix // by workload name
	tlsLatency    *matrix            // completions at the fixed rate
	tlsConns      map[string]tlsStats
	export        exportStats
	calibration   map[string]sample // fast upstream vs cmd/fakeupstream
	realtime      *rtResults        // the realtime row (realtime.go)
	// attrib is the limiter's attribution turns (attrib.go), by target.
	attrib   map[string]*attribution
	micro    microResult
	profiles []string
	notes    []string
	elapsed  time.Duration
}

// matrix holds one sample per target per round.
type matrix struct {
	mode    attackMode
	wl      workload
	targets []string
	by      map[string][]sample
}

func newMatrix(m attackMode, wl workload, targets []string) *matrix {
	return &matrix{mode: m, wl: wl, targets: targets, by: map[string][]sample{}}
}

// exportStats is what reached the OTLP sink from the measured gateway.
type exportStats struct {
	sink             sinkStats
	hopgateRequests  int64
	metricsScrapes   int
	metricsBytes     int64
	metricsScrapeErr string
	batchSink        sinkStats // the batch variant's own sink
	batchRequests    int64
	batchFailed      int64 // of batchRequests; not in batchExpected
	batchExpected    int64 // spans its successful requests make (spansCompletion, spansStream)
}

// Spans of one healthy request on the straight path (DESIGN §5): server,
// dispatch, hop and await headers, plus the stream gate for a stream.
const (
	spansCompletion = 4
	spansStream     = 5
)

// Targets of the TLS rounds: the bare proxy and hopgate, each to the
// upstream offering HTTP/1.1 only and to the one offering HTTP/2.
const (
	targetProxyH1   = "proxy/h1"
	targetHopgateH1 = "hopgate/h1"
	targetProxyH2   = "proxy/h2"
	targetHopgateH2 = "hopgate/h2"
)

// targetTranslating is the measured hopgate serving an OpenAI client from
// an Anthropic channel (model bench-anthropic): it runs in the plain
// throughput and time-to-first-token rounds next to *hopgate*, whose
// channel answers in OpenAI's own format (pass-through).
const targetTranslating = "translating"

// world is the running benchmark environment.
type world struct {
	o        options
	pki      *benchPKI
	up       *child
	proxy    *child
	proxyH1  *child // the bare proxy to the TLS upstreams
	proxyH2  *child
	gw       *child
	peers    []*peer
	floors   []*floor // nginx and HAProxy (floor.go)
	sink     *otlpSink
	sinkAddr string
	sinkStop func()
	targets  []target
	hopgate  target
	// tlsTargets are the TLS rounds' targets (targetProxyH1 …);
	// translating is the measured hopgate on its Anthropic channel.
	tlsTargets  []target
	translating target
	// translatingResponses: the same on /v1/responses (responses.go).
	translatingResponses target
	passthroughResponses target // the Responses client on the OpenAI channel (responses_upstream.go)
	// variants: hopgate differing in one setting (throughput and completion
	// latency rounds), and their processes.
	variants    []target
	variantGWs  []*child
	client      *http.Client
	hgReqs      int64 // requests sent to the measured gateway
	batchSink   *otlpSink
	batchReqs   int64 // requests sent to the batch variant
	batchFailed int64
	batchSpans  int64 // spans the successful ones make

	peerErrors []string   // first error line each peer logged, and the bare proxy's last
	order      *rand.Rand // shuffles each round's targets (seeded by o.seed)

	scrapeMu    sync.Mutex // the measured gateway's scrapes (scrapeDuring)
	scrapes     int
	scrapeBytes int64
	scrapeErr   string
}

func (w *world) logf(format string, args ...any) {
	fmt.Fprintf(w.o.log, "hopbench: "+format+"\n", args...)
}

func run(ctx context.Context, o options) (*results, error) {
	if o.log == nil {
		o.log = io.Discard
	}
	if o.only != "" {
		return runOnly(o)
	}
	began := time.Now()
	if o.root == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		if o.root, err = moduleRoot(wd); err != nil && o.micro {
			return nil, err
		}
	}
	res := &results{opts: o, facts: readFacts(), latency: map[string]*matrix{}, throughput: map[string]*matrix{},
		idle: map[string]idleResult{}, calibration: map[string]sample{}, tlsThroughput: map[string]*matrix{},
		tlsConns: map[string]tlsStats{}}
	w := &world{o: o, sink: newOTLPSink(), batchSink: newOTLPSink(), client: streamClient(),
		order: rand.New(rand.NewPCG(o.seed, 0))}
	defer w.close()
	removePKI, err := w.makePKI()
	if err != nil {
		return nil, err
	}
	defer removePKI()
	if err := w.start(); err != nil {
		return nil, err
	}
	for _, t := range w.targets {
		res.targets = append(res.targets, t.name)
	}
	for _, p := range w.peers {
		if p.note != "" {
			res.notes = append(res.notes, p.note)
		}
	}
	for _, f := range w.floors {
		if f.note != "" {
			res.notes = append(res.notes, f.note)
		}
	}

	if err := w.prime(); err != nil {
		return nil, err
	}
	w.logf("warm-up")
	warm := append(w.targets[:len(w.targets):len(w.targets)], w.variants...)
	for _, t := range append(warm, w.translating, w.translatingResponses, w.passthroughResponses) {
		for _, wl := range []workload{wlComplete, wlStream} {
			w.count(t, wl, attack(t, wl, attackMode{workers: o.workers}, o.duration/3))
		}
	}

	rateMode := attackMode{rate: o.rate}
	maxMode := attackMode{workers: o.workers}
	for _, wl := range []workload{wlComplete, wlStream} {
		w.logf("latency at %s, %s", rateMode, wl.name)
		ts := w.targets
		if wl == wlComplete {
			// The latency targets are on completions: the variants show how
			// much of hopgate's added latency is trace export.
			ts = append(ts[:len(ts):len(ts)], w.variants...)
		}
		res.latency[wl.name] = w.rounds(ts, wl, rateMode, nil)
	}
	for _, wl := range []workload{wlComplete, wlStream, wlBurst} {
		w.logf("throughput at %s, %s", maxMode, wl.name)
		ts := append(w.targets[:len(w.targets):len(w.targets)], w.variants...)
		if wl.burst {
			// The burst rows compare the relays; the translating paths'
			// upstream has no burst stream.
			res.throughput[wl.name] = w.rounds(ts, wl, maxMode, nil)
			continue
		}
		res.throughput[wl.name] = w.rounds(append(ts, w.translating, w.translatingResponses, w.passthroughResponses), wl, maxMode, func(round int, t target, d time.Duration) func() {
			if o.profileDir == "" || round != 0 || t.pprof == "" {
				return nil
			}
			return w.profile(t, wl.name, d, &res.profiles)
		})
	}
	if lt, ok := w.variant(targetLimited); ok {
		w.logf("limiter attribution: %s and hopgate under CPU and allocation profiles, %s", targetLimited, wlComplete.name)
		res.attrib = w.attribute([]target{w.hopgate, lt}, wlComplete, maxMode)
	}
	// The variants' part is over: stopping them flushes their span queues
	// and leaves the later phases the CPU and memory they held.
	w.stopVariants()

	// Warmed here, not with the others: their idle connections would have
	// outlived the transport's IdleConnTimeout (90 s) by now, and the first
	// round would pay handshakes the others do not.
	w.logf("upstreams over TLS: warm-up")
	for _, t := range w.tlsTargets {
		for _, wl := range []workload{wlComplete, wlStream} {
			w.count(t, wl, attack(t, wl, maxMode, o.duration/3))
		}
	}
	w.logf("upstreams over TLS: latency at %s, %s", rateMode, wlComplete.name)
	res.tlsLatency = w.rounds(w.tlsTargets, wlComplete, rateMode, w.countTLS(res))
	for _, wl := range []workload{wlComplete, wlStream} {
		w.logf("upstreams over TLS: throughput at %s, %s", maxMode, wl.name)
		res.tlsThroughput[wl.name] = w.rounds(w.tlsTargets, wl, maxMode, w.countTLS(res))
	}

	w.logf("time to first token, %d concurrent streams", o.ttftWorkers)
	ttftTargets := append(w.targets[:len(w.targets):len(w.targets)], w.translating, w.translatingResponses)
	res.ttft = newMatrix(attackMode{workers: uint64(o.ttftWorkers)}, wlStream, append(slices.Clone(res.targets), targetTranslating, targetTranslatingResponses))
	for range o.rounds {
		for _, t := range w.shuffled(ttftTargets) {
			time.Sleep(o.settle)
			scraped := w.scrapeDuring(t, o.duration)
			s := ttft(w.client, t, o.ttftWorkers, o.duration)
			scraped()
			w.count(t, wlStream, s)
			res.ttft.by[t.name] = append(res.ttft.by[t.name], s)
		}
	}

	if err := w.failover(res, rateMode, maxMode); err != nil {
		return nil, err
	}
	w.calibrate(res, maxMode)
	w.scrapeMu.Lock()
	res.export.metricsScrapes, res.export.metricsBytes, res.export.metricsScrapeErr = w.scrapes, w.scrapeBytes, w.scrapeErr
	w.scrapeMu.Unlock()
	// Stopping the gateway flushes its span queue: only then does the sink
	// hold everything the measured requests exported.
	w.gw.stop()
	w.gw = nil
	time.Sleep(200 * time.Millisecond)
	res.export.sink = w.sink.snapshot()
	res.export.hopgateRequests = w.hgReqs
	res.export.batchSink = w.batchSink.snapshot()
	res.export.batchRequests = w.batchReqs
	res.export.batchExpected = w.batchSpans
	res.export.batchFailed = w.batchFailed

	w.logf("memory: %d idle streams per gateway (fresh processes)", o.idle)
	if err := w.idleTests(res); err != nil {
		return nil, err
	}
	w.logf("realtime sessions")
	if err := w.realtime(res); err != nil {
		return nil, err
	}
	w.close()
	res.notes = append(res.notes, w.peerErrors...)

	if o.micro {
		w.logf("Go micro-benchmarks")
		res.micro = runMicro(ctx, o.root, o.benchtime, o.log)
	}
	res.elapsed = time.Since(began)
	if err := writeReport(o.out, res); err != nil {
		return nil, err
	}
	w.logf("done in %s: %s", res.elapsed.Round(time.Second), o.out)
	return res, nil
}

// start launches the upstream, the sink, the proxy, hopgate and the peers.
func (w *world) start() error {
	var err error
	sinkSrv, sinkAddr, err := serveLoopback(w.sink)
	if err != nil {
		return err
	}
	w.sinkAddr, w.sinkStop = sinkAddr, func() { sinkSrv.Close() }
	if w.up, err = startRole(roleUpstream, w.pki.upstreamEnv()...); err != nil {
		return err
	}
	upAddr := w.up.addrs["upstream"]
	if w.proxy, err = startRole(roleProxy, envUpstream+"="+upAddr); err != nil {
		return err
	}
	if w.proxyH1, err = startRole(roleProxy, envUpstream+"=https://"+w.up.addrs["upstream-h1"], w.pki.trustEnv()); err != nil {
		return err
	}
	if w.proxyH2, err = startRole(roleProxy, envUpstream+"=https://"+w.up.addrs["upstream-h2"], w.pki.trustEnv()); err != nil {
		return err
	}
	if w.gw, err = w.startGateway(); err != nil {
		return err
	}
	direct := target{name: "direct", url: "http://" + upAddr + "/v1/chat/completions", header: baseHeader(), model: modelBench, pid: w.up.pid()}
	proxy := target{name: "proxy", url: "http://" + w.proxy.addrs["main"] + "/v1/chat/completions", header: baseHeader(), model: modelBench, pid: w.proxy.pid()}
	w.hopgate = target{name: "hopgate", url: "http://" + w.gw.addrs["main"] + "/v1/chat/completions", header: baseHeader(), model: modelBench,
		pid: w.gw.pid(), admin: w.gw.addrs["admin"], pprof: w.gw.addrs["pprof"]}
	w.targets = []target{direct, proxy, w.hopgate}
	w.startFloors()
	w.translating = w.hopgate
	w.translating.name, w.translating.model = targetTranslating, modelAnthropic
	w.translatingResponses = responsesTarget(w.translating)
	w.passthroughResponses = responsesTarget(w.hopgate)
	w.passthroughResponses.name = targetPassthroughResponses
	hgH1, hgH2 := w.hopgate, w.hopgate
	hgH1.name, hgH1.model = targetHopgateH1, modelH1
	hgH2.name, hgH2.model = targetHopgateH2, modelH2
	w.tlsTargets = []target{
		{name: targetProxyH1, url: "http://" + w.proxyH1.addrs["main"] + "/v1/chat/completions", header: baseHeader(), model: modelBench, pid: w.proxyH1.pid()},
		hgH1,
		{name: targetProxyH2, url: "http://" + w.proxyH2.addrs["main"] + "/v1/chat/completions", header: baseHeader(), model: modelBench, pid: w.proxyH2.pid()},
		hgH2,
	}
	// The variants export to a sink of their own: the export table counts
	// the measured gateway's spans only.
	vSrv, vAddr, err := serveLoopback(newOTLPSink())
	if err != nil {
		return err
	}
	sinkStop := w.sinkStop
	// The batch variant exports every trace: it gets a sink of its own, so
	// the report can say whether its spans all arrived.
	bSrv, bAddr, err := serveLoopback(w.batchSink)
	if err != nil {
		return err
	}
	w.sinkStop = func() { sinkStop(); vSrv.Close(); bSrv.Close() }
	for _, v := range []string{tracingHealthy10, tracingOff, tracingBatch128, tracingGOGC200, tracingSDKExport} {
		// The same config as the measured gateway (TLS channels included).
		env := append(w.gatewayEnv(), envOTLP+"=http://"+vAddr, envTracing+"="+v)
		switch v {
		case tracingBatch128:
			env = append(append(w.gatewayEnv(), envOTLP+"=http://"+bAddr, envTracing+"="+v), batch128Env...)
		case tracingGOGC200:
			env = append(env, gogc200Env)
		}
		gw, err := startRole(roleGateway, env...)
		if err != nil {
			return err
		}
		w.variantGWs = append(w.variantGWs, gw)
		w.variants = append(w.variants, target{name: "hopgate-" + v, url: "http://" + gw.addrs["main"] + "/v1/chat/completions",
			header: baseHeader(), model: modelBench, pid: gw.pid(), admin: gw.addrs["admin"], pprof: gw.addrs["pprof"]})
	}
	if err := w.startLimited(append(w.gatewayEnv(), envOTLP+"=http://"+vAddr)); err != nil {
		return err
	}
	for _, name := range w.o.peers {
		p := startPeer(name, upAddr, w.o.log)
		w.peers = append(w.peers, p)
		if p.child != nil {
			w.targets = append(w.targets, p.target)
		}
	}
	for _, f := range w.floors {
		if f.child == nil {
			continue
		}
		w.tlsTargets = append(w.tlsTargets, target{name: f.name + "/h1", url: "http://" + f.tlsH1 + "/v1/chat/completions",
			header: baseHeader(), model: modelBench, pid: f.child.pid()})
		if f.tlsH2 != "" {
			w.tlsTargets = append(w.tlsTargets, target{name: f.name + "/h2", url: "http://" + f.tlsH2 + "/v1/chat/completions",
				header: baseHeader(), model: modelBench, pid: f.child.pid()})
		}
	}
	w.logf("upstream %s, proxy %s, hopgate %s, OTLP sink %s", upAddr, w.proxy.addrs["main"], w.gw.addrs["main"], sinkAddr)
	return nil
}

// startFloors starts nginx and HAProxy in front of the upstreams and adds
// their plaintext targets (their TLS ones join the TLS rounds in start).
func (w *world) startFloors() {
	up := floorUpstreams{plain: w.up.addrs["upstream"], tlsH1: w.up.addrs["upstream-h1"], tlsH2: w.up.addrs["upstream-h2"], caFile: w.pki.caFile}
	for _, name := range []string{floorNginx, floorHAProxy} {
		f := startFloor(name, up, os.Getenv, w.o.log)
		w.floors = append(w.floors, f)
		if f.child != nil {
			w.targets = append(w.targets, target{name: name, url: "http://" + f.plain + "/v1/chat/completions",
				header: baseHeader(), model: modelBench, pid: f.child.pid()})
		}
	}
}

func (w *world) startGateway() (*child, error) {
	return startRole(roleGateway, append(w.gatewayEnv(), envOTLP+"=http://"+w.sinkAddr)...)
}

// gatewayEnv is what every hopgate process gets: where the upstreams are,
// and the CA of the TLS ones to trust.
func (w *world) gatewayEnv() []string {
	return []string{envUpstream + "=" + w.up.addrs["upstream"], envUpstreamH1 + "=" + w.up.addrs["upstream-h1"],
		envUpstreamH2 + "=" + w.up.addrs["upstream-h2"], envRealtime + "=" + w.up.addrs["realtime"], w.pki.trustEnv()}
}

// countTLS returns a rounds hook adding what each TLS turn cost the
// upstream (connections accepted, requests by protocol) to res.tlsConns.
func (w *world) countTLS(res *results) func(int, target, time.Duration) func() {
	return func(_ int, t target, _ time.Duration) func() {
		pick := func(st upstreamStats) tlsStats {
			if strings.HasSuffix(t.name, "/h2") {
				return st.TLSH2
			}
			return st.TLSH1
		}
		before, err := w.upstreamStats()
		if err != nil {
			res.notes = append(res.notes, "TLS connection counts: "+err.Error())
			return nil
		}
		return func() {
			after, err := w.upstreamStats()
			if err != nil {
				res.notes = append(res.notes, "TLS connection counts: "+err.Error())
				return
			}
			d, acc := pick(after).sub(pick(before)), res.tlsConns[t.name]
			res.tlsConns[t.name] = tlsStats{Conns: acc.Conns + d.Conns, HTTP1: acc.HTTP1 + d.HTTP1, HTTP2: acc.HTTP2 + d.HTTP2}
		}
	}
}

func (w *world) close() {
	for _, p := range w.peers {
		if e := p.firstError(); e != "" {
			w.peerErrors = append(w.peerErrors, fmt.Sprintf("%s logged: %s", p.name, e))
		}
	}
	for _, p := range []struct {
		c    *child
		name string
	}{{w.proxy, "the bare proxy"}, {w.proxyH1, "the bare proxy to the TLS upstream (HTTP/1.1)"}, {w.proxyH2, "the bare proxy to the TLS upstream (HTTP/2)"}} {
		if p.c == nil {
			continue
		}
		// ReverseProxy logs why it cut a response: the notes should say
		// why the baseline failed requests, not only that it did.
		if n, l := linesWith(p.c.stderr.String(), "proxy: "); n > 0 {
			w.peerErrors = append(w.peerErrors, fmt.Sprintf(
				"%s logged at least %d errors over the whole run, warm-up included (its log is kept to the last 8 KiB); the last: %s", p.name, n, l))
		}
	}
	w.stopVariants()
	for _, c := range []**child{&w.gw, &w.proxy, &w.proxyH1, &w.proxyH2, &w.up} {
		if *c != nil {
			(*c).stop()
			*c = nil
		}
	}
	for _, p := range w.peers {
		p.stop()
	}
	w.peers = nil
	for _, f := range w.floors {
		if f.child != nil {
			if n, l := floorErrors(f.child.stderr.String()); n > 0 {
				w.peerErrors = append(w.peerErrors, fmt.Sprintf("%s logged %d errors over the whole run (its log is kept to the last 8 KiB); the last: %s", f.name, n, l))
			}
		}
		f.stop()
	}
	w.floors = nil
	if w.sinkStop != nil {
		w.sinkStop()
		w.sinkStop = nil
	}
}

// linesWith counts the lines of s containing sub and returns the last one,
// trimmed.
func linesWith(s, sub string) (n int, last string) {
	for line := range strings.SplitSeq(s, "\n") {
		if strings.Contains(line, sub) {
			n, last = n+1, strings.TrimSpace(line)
		}
	}
	return n, last
}

// stopVariants stops the variant gateways, which flushes their span queues.
func (w *world) stopVariants() {
	for _, c := range w.variantGWs {
		c.stop()
	}
	w.variantGWs = nil
}

// count remembers how many requests reached the gateways whose exports are
// counted: the measured one and the batch variant.
func (w *world) count(t target, wl workload, s sample) {
	switch {
	case t.url == w.hopgate.url:
		w.hgReqs += int64(s.requests)
	case t.name == "hopgate-"+tracingBatch128:
		w.batchReqs += int64(s.requests)
		per := int64(spansCompletion)
		if wl.stream {
			per = spansStream
		}
		w.batchSpans += per * int64(s.ok)
		w.batchFailed += int64(s.requests - s.ok)
	}
}

// shuffled is ts in a new random order: each round runs its targets in
// its own order, so no target always follows the same neighbour or holds
// the same place in a round (machine noise that drifts within a round
// then spreads over all targets instead of biasing one). Pairs stay within
// a round: every target still runs once per round.
func (w *world) shuffled(ts []target) []target {
	out := slices.Clone(ts)
	w.order.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// rounds measures every target once per round, o.rounds times, each round
// in its own order (shuffled).
// hook, when set, may start something alongside a turn (a profile).
func (w *world) rounds(ts []target, wl workload, m attackMode, hook func(round int, t target, d time.Duration) func()) *matrix {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.name
	}
	mx := newMatrix(m, wl, names)
	for r := range w.o.rounds {
		for _, t := range w.shuffled(ts) {
			time.Sleep(w.o.settle)
			var wait func()
			if hook != nil {
				wait = hook(r, t, w.o.duration)
			}
			scraped := w.scrapeDuring(t, w.o.duration)
			cpu0, cpuErr := int64(0), error(nil)
			var io0 sysIO
			ioErr := error(nil)
			if t.pid > 0 {
				cpu0, cpuErr = cpuNS(t.pid)
				io0, ioErr = readSysIO(t.pid)
			}
			s := attack(t, wl, m, w.o.duration)
			if t.pid > 0 && cpuErr == nil {
				if cpu1, err := cpuNS(t.pid); err == nil {
					s.cpu = time.Duration(cpu1 - cpu0)
				}
			}
			if t.pid > 0 && ioErr == nil {
				if io1, err := readSysIO(t.pid); err == nil {
					s.sys = sysIO{io1.reads - io0.reads, io1.writes - io0.writes}
				}
			}
			scraped()
			if wait != nil {
				wait()
			}
			w.count(t, wl, s)
			mx.by[t.name] = append(mx.by[t.name], s)
		}
	}
	return mx
}

// prime opens the dead channel (its first failure opens it for 24 h) and
// checks every model answers.
func (w *world) prime() error {
	for _, m := range []string{modelSkip, modelBench, modelFail1, modelAnthropic, modelH1, modelH2} {
		t := w.hopgate
		t.model = m
		s := attack(t, wlComplete, attackMode{rate: 1}, time.Second)
		w.count(t, wlComplete, s)
		if s.ok == 0 {
			return fmt.Errorf("hopgate does not answer model %q: %v", m, s.errors)
		}
	}
	st, err := w.upstreamStats()
	if err != nil {
		return err
	}
	if st.S503 < 2 {
		return fmt.Errorf("priming: expected the 503 channels to be tried, upstream saw %d", st.S503)
	}
	return nil
}

// failover measures the failover paths on hopgate only: a request whose
// cheapest channel is open (L1 skip), one whose cheapest channel answers
// 503 (one failed hop), and the plain path to the same second channel.
func (w *world) failover(res *results, rateMode, maxMode attackMode) error {
	mk := func(name, model string) target {
		t := w.hopgate
		t.name, t.model = name, model
		return t
	}
	ts := []target{mk("straight", modelBench), mk("L1-skip", modelSkip), mk("failed-hop", modelFail1)}
	names := []string{"straight", "L1-skip", "failed-hop"}
	res.failRate = newMatrix(rateMode, wlComplete, names)
	res.failMax = newMatrix(maxMode, wlComplete, names)
	for _, mx := range []*matrix{res.failRate, res.failMax} {
		w.logf("failover at %s", mx.mode)
		for range w.o.rounds {
			for _, t := range w.shuffled(ts) {
				time.Sleep(w.o.settle)
				before, err := w.upstreamStats()
				if err != nil {
					return err
				}
				scraped := w.scrapeDuring(t, w.o.duration)
				s := attack(t, wlComplete, mx.mode, w.o.duration)
				scraped()
				after, err := w.upstreamStats()
				if err != nil {
					return err
				}
				w.count(t, wlComplete, s)
				mx.by[t.name] = append(mx.by[t.name], s)
				switch t.model {
				case modelSkip:
					res.skipHits += after.S503 - before.S503
				case modelFail1:
					res.fail1Hits += after.S503 - before.S503
					res.fail1Reqs += int64(s.ok)
				}
			}
		}
	}
	return nil
}

// calibrate compares the fast upstream with cmd/fakeupstream, direct, to
// show the upstream is not the bottleneck of the direct row.
func (w *world) calibrate(res *results, m attackMode) {
	w.logf("calibration: fast upstream vs cmd/fakeupstream")
	fast := target{name: "fast upstream", url: "http://" + w.up.addrs["upstream"] + "/v1/chat/completions", header: baseHeader(), model: modelBench}
	fake := target{name: "cmd/fakeupstream", url: "http://" + w.up.addrs["fakeupstream"] + "/v1/chat/completions", header: baseHeader(), model: "bench|tokens=150"}
	for _, t := range []target{fast, fake} {
		res.calibration[t.name] = attack(t, wlComplete, m, w.o.duration)
	}
}

func (w *world) upstreamStats() (upstreamStats, error) {
	var st upstreamStats
	resp, err := control.Get("http://" + w.up.addrs["upstream"] + "/_stats")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// scrapeDuring scrapes t's /metrics once, halfway through a turn of
// length d starting now, when t is a hopgate (metrics on, as Prometheus
// would). Every hopgate process is scraped in its own turns only, so a
// collection's CPU lands in the turn of the gateway that pays it and in no
// other target's. wait returns when the scrape is done.
func (w *world) scrapeDuring(t target, d time.Duration) (wait func()) {
	if t.admin == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(d / 2)
		n, err := get("http://" + t.admin + "/metrics")
		if t.admin != w.hopgate.admin {
			return // only the measured gateway's scrapes are reported
		}
		w.scrapeMu.Lock()
		defer w.scrapeMu.Unlock()
		if err != nil {
			w.scrapeErr = err.Error()
			return
		}
		w.scrapes++
		w.scrapeBytes += int64(n)
	}()
	return func() { <-done }
}

func get(url string) (int, error) {
	resp, err := control.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return len(b), err
}

var gaugeRE = regexp.MustCompile(`(?m)^(go_goroutines|go_memstats_heap_inuse_bytes) ([0-9.e+]+)$`)

// runtimeGauges reads goroutines and heap in use from a gateway's /metrics.
func runtimeGauges(admin string) func() (float64, float64) {
	return func() (float64, float64) {
		resp, err := control.Get("http://" + admin + "/metrics")
		if err != nil {
			return 0, 0
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var g, h float64
		for _, m := range gaugeRE.FindAllSubmatch(b, -1) {
			v, _ := strconv.ParseFloat(string(m[2]), 64)
			if string(m[1]) == "go_goroutines" {
				g = v
			} else {
				h = v
			}
		}
		return g, h
	}
}

// idleTests measures memory per idle stream on fresh processes, so heap
// grown by the load phases does not hide (or inflate) the streams' cost.
func (w *world) idleTests(res *results) error {
	upAddr := w.up.addrs["upstream"]
	stallURL := func(addr string) string { return "http://" + addr + "/stall/v1/chat/completions" }
	proxy, err := startRole(roleProxy, envUpstream+"="+upAddr)
	if err != nil {
		return err
	}
	res.idle["proxy"] = idleStreams(target{name: "proxy", url: stallURL(proxy.addrs["main"]), header: baseHeader(), model: modelBench, pid: proxy.pid()}, w.o.idle, nil, nil)
	proxy.stop()
	gw, err := w.startGateway()
	if err != nil {
		return err
	}
	var heapProfile func()
	if w.o.profileDir != "" {
		heapProfile = func() {
			for _, f := range []struct{ url, file string }{
				{"http://" + gw.addrs["pprof"] + "/debug/pprof/heap", "hopgate-heap-idle.pprof"},
				{"http://" + gw.addrs["pprof"] + "/debug/pprof/goroutine", "hopgate-goroutine-idle.pprof"},
				{"http://" + gw.addrs["admin"] + "/metrics", "hopgate-metrics-idle.txt"},
			} {
				path := filepath.Join(w.o.profileDir, f.file)
				if err := fetch(f.url, path); err == nil {
					res.profiles = append(res.profiles, path)
				}
			}
		}
	}
	res.idle["hopgate"] = idleStreams(target{name: "hopgate", url: "http://" + gw.addrs["main"] + "/v1/chat/completions",
		header: baseHeader(), model: modelStall, pid: gw.pid()}, w.o.idle, runtimeGauges(gw.addrs["admin"]), heapProfile)
	gw.stop()
	// The GOGC variant trades memory for CPU: its side of the trade.
	gw, err = startRole(roleGateway, append(w.gatewayEnv(), envOTLP+"=http://"+w.sinkAddr, envTracing+"="+tracingGOGC200, gogc200Env)...)
	if err != nil {
		return err
	}
	name := "hopgate-" + tracingGOGC200
	res.idle[name] = idleStreams(target{name: name, url: "http://" + gw.addrs["main"] + "/v1/chat/completions",
		header: baseHeader(), model: modelStall, pid: gw.pid()}, w.o.idle, runtimeGauges(gw.addrs["admin"]), nil)
	gw.stop()
	for _, name := range w.o.peers {
		p := startPeer(name, upAddr, w.o.log)
		if p.child == nil {
			continue
		}
		t := p.target
		t.header = p.stallHeader
		res.idle[t.name] = idleStreams(t, w.o.idle, nil, nil)
		p.stop()
	}
	return nil
}

// profile captures a CPU profile of hopgate target t for d, starting now, and an
// allocation profile when it ends. It returns a wait function.
func (w *world) profile(t target, wl string, d time.Duration, files *[]string) func() {
	base := "http://" + t.pprof + "/debug/pprof/"
	done := make(chan struct{})
	go func() {
		defer close(done)
		secs := max(1, int(d/time.Second))
		cpu := filepath.Join(w.o.profileDir, t.name+"-cpu-"+wl+".pprof")
		if err := fetch(base+"profile?seconds="+strconv.Itoa(secs), cpu); err != nil {
			w.logf("cpu profile: %v", err)
			return
		}
		*files = append(*files, cpu)
		allocs := filepath.Join(w.o.profileDir, t.name+"-allocs-"+wl+".pprof")
		if err := fetch(base+"allocs", allocs); err == nil {
			*files = append(*files, allocs)
		}
	}()
	return func() { <-done }
}

func fetch(url, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	resp, err := control.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// control is the client of the harness's own requests (stats, scrapes,
// profiles): bounded, so a gateway that stops answering fails the run
// instead of hanging it. The longest is a CPU profile of one turn.
var control = &http.Client{Timeout: time.Minute}
