package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Phases -only can run alone.
const (
	onlyRealtime = "realtime"
	onlyLimits   = "limits"
	onlyStreams  = "streams"
)

// runOnly runs one phase of the benchmark by itself, with just the
// processes it needs (the upstream, the OTLP sink, its relays), and
// writes that phase's section of the report: a quick before/after
// measurement of one row, without the whole run's ten minutes. With
// -profile, the realtime phase also saves the gateway's goroutine and
// heap profiles while its idle sessions are open.
func runOnly(o options) (*results, error) {
	began := time.Now()
	res := &results{opts: o, facts: readFacts()}
	w := &world{o: o, sink: newOTLPSink(), batchSink: newOTLPSink(), client: streamClient()}
	defer w.close()
	removePKI, err := w.makePKI()
	if err != nil {
		return nil, err
	}
	defer removePKI()
	sinkSrv, sinkAddr, err := serveLoopback(w.sink)
	if err != nil {
		return nil, err
	}
	w.sinkAddr, w.sinkStop = sinkAddr, func() { sinkSrv.Close() }
	if w.up, err = startRole(roleUpstream, w.pki.upstreamEnv()...); err != nil {
		return nil, err
	}
	w.order = rand.New(rand.NewPCG(o.seed, 0))
	render := res.renderRealtime
	switch o.only {
	case onlyLimits:
		if err := w.onlyLimits(res); err != nil {
			return nil, err
		}
		render = func(p printer) { res.renderLimiterTarget(p); res.renderAttribution(p) }
	case onlyStreams:
		if err := w.onlyStreams(res); err != nil {
			return nil, err
		}
		render = func(p printer) { res.renderFloorTargets(p); res.renderThroughput(p); res.renderCPU(p) }
	default:
		w.logf("realtime sessions only")
		if err := w.realtime(res); err != nil {
			return nil, err
		}
	}
	res.elapsed = time.Since(began)
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("<!-- hopbench -only %s, %s, seed %d, %d rounds of %s, %d idle sessions -->", o.only, res.elapsed.Round(time.Second), o.seed, o.rounds, o.duration, o.idle)
	p("")
	render(p)
	if err := writeOut(o.out, b.String()); err != nil {
		return nil, err
	}
	w.logf("done in %s: %s", res.elapsed.Round(time.Second), o.out)
	return res, nil
}

// writeOut writes a report to path ("" or "-": stdout).
func writeOut(path, s string) error {
	if path == "" || path == "-" {
		_, err := io.WriteString(os.Stdout, s)
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

// saveProfiles fetches the goroutine (debug=1: stacks grouped) and heap
// profiles of a process's pprof listener into dir, named by prefix.
func saveProfiles(dir, pprofAddr, prefix string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range []struct{ path, file string }{
		{"/debug/pprof/goroutine?debug=1", prefix + "-goroutines.txt"},
		{"/debug/pprof/heap?gc=1", prefix + "-heap.pb.gz"},
	} {
		resp, err := http.Get("http://" + pprofAddr + p.path)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, p.file), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// goRuntime is what a process's Go runtime holds: goroutines, and heap
// and stacks in use (KiB).
type goRuntime struct{ goroutines, heapKiB, stackKiB float64 }

func (a goRuntime) sub(b goRuntime) goRuntime {
	return goRuntime{a.goroutines - b.goroutines, a.heapKiB - b.heapKiB, a.stackKiB - b.stackKiB}
}

func (a goRuntime) div(n float64) goRuntime {
	return goRuntime{a.goroutines / n, a.heapKiB / n, a.stackKiB / n}
}

// rtstatsPath serves a process's goRuntime on its pprof listener (every
// role serving http.DefaultServeMux): the realtime row compares the
// relays' goroutines, heap and stacks per idle session, not only RSS.
const rtstatsPath = "/debug/rtstats"

func init() {
	http.HandleFunc(rtstatsPath, func(w http.ResponseWriter, _ *http.Request) {
		runtime.GC() // heap in use without the garbage of the sessions' opening
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		_ = json.NewEncoder(w).Encode(map[string]float64{"goroutines": float64(runtime.NumGoroutine()),
			"heap_kib": float64(m.HeapInuse) / 1024, "stack_kib": float64(m.StackInuse) / 1024})
	})
}

// readGoRuntime reads the goRuntime of the process whose pprof listener
// is at addr.
func readGoRuntime(addr string) (goRuntime, error) {
	resp, err := http.Get("http://" + addr + rtstatsPath)
	if err != nil {
		return goRuntime{}, err
	}
	defer resp.Body.Close()
	var v map[string]float64
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return goRuntime{}, err
	}
	return goRuntime{v["goroutines"], v["heap_kib"], v["stack_kib"]}, nil
}

// makePKI makes the run's TLS certificates in a temporary directory; the
// returned func removes it.
func (w *world) makePKI() (func(), error) {
	dir, err := os.MkdirTemp("", "hopbench-tls-")
	if err != nil {
		return nil, err
	}
	if w.pki, err = newBenchPKI(dir); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	return func() { os.RemoveAll(dir) }, nil
}

// onlyLimits runs the limiter's attribution turns alone: *hopgate* and
// the in-process *limited* gateway, warmed, then alternating under their
// profiles (attrib.go).
func (w *world) onlyLimits(res *results) error {
	var err error
	if w.gw, err = w.startGateway(); err != nil {
		return err
	}
	w.hopgate = target{name: "hopgate", url: "http://" + w.gw.addrs["main"] + "/v1/chat/completions", header: baseHeader(), model: modelBench,
		pid: w.gw.pid(), admin: w.gw.addrs["admin"], pprof: w.gw.addrs["pprof"]}
	gw, err := startRole(roleGateway, append(w.gatewayEnv(), envOTLP+"=http://"+w.sinkAddr, envLimits+"=memory")...)
	if err != nil {
		return err
	}
	w.addLimited(targetLimited, gw)
	lt, _ := w.variant(targetLimited)
	mode := attackMode{workers: w.o.workers}
	w.logf("limiter attribution only: warm-up")
	for _, t := range []target{w.hopgate, lt} {
		w.count(t, wlComplete, attack(t, wlComplete, mode, w.o.duration))
	}
	w.logf("limiter attribution: %d rounds", w.o.rounds)
	res.attrib = w.attribute([]target{w.hopgate, lt}, wlComplete, mode)
	return nil
}

// onlyStreams runs the throughput rounds of issue 34's rows alone
// (completions, per-frame and burst streams) on the bare proxy, *hopgate*
// and *hopgate-off*: a quick A/B of a change to the request or stream
// path, in the same harness and with the same ratios as the whole run.
// With -profile, round 0 saves each gateway's CPU and allocation profiles
// of every workload, bursts included.
func (w *world) onlyStreams(res *results) error {
	var err error
	upAddr := w.up.addrs["upstream"]
	if w.proxy, err = startRole(roleProxy, envUpstream+"="+upAddr); err != nil {
		return err
	}
	if w.gw, err = w.startGateway(); err != nil {
		return err
	}
	w.hopgate = target{name: "hopgate", url: "http://" + w.gw.addrs["main"] + "/v1/chat/completions", header: baseHeader(), model: modelBench,
		pid: w.gw.pid(), admin: w.gw.addrs["admin"], pprof: w.gw.addrs["pprof"]}
	off, err := startRole(roleGateway, append(w.gatewayEnv(), envOTLP+"=http://"+w.sinkAddr, envTracing+"="+tracingOff)...)
	if err != nil {
		return err
	}
	w.variantGWs = append(w.variantGWs, off)
	w.variants = []target{{name: "hopgate-" + tracingOff, url: "http://" + off.addrs["main"] + "/v1/chat/completions",
		header: baseHeader(), model: modelBench, pid: off.pid(), admin: off.addrs["admin"], pprof: off.addrs["pprof"]}}
	w.targets = []target{
		{name: "direct", url: "http://" + upAddr + "/v1/chat/completions", header: baseHeader(), model: modelBench, pid: w.up.pid()},
		{name: "proxy", url: "http://" + w.proxy.addrs["main"] + "/v1/chat/completions", header: baseHeader(), model: modelBench,
			pid: w.proxy.pid(), pprof: w.proxy.addrs["pprof"]},
		w.hopgate,
	}
	for _, t := range w.targets {
		res.targets = append(res.targets, t.name)
	}
	ts := append(w.targets[:len(w.targets):len(w.targets)], w.variants...)
	mode := attackMode{workers: w.o.workers}
	w.logf("streams only: warm-up")
	for _, t := range ts {
		for _, wl := range []workload{wlComplete, wlStream, wlBurst} {
			w.count(t, wl, attack(t, wl, mode, w.o.duration/3))
		}
	}
	res.throughput = map[string]*matrix{}
	for _, wl := range []workload{wlComplete, wlStream, wlBurst} {
		w.logf("throughput at %s, %s", mode, wl.name)
		res.throughput[wl.name] = w.rounds(ts, wl, mode, func(round int, t target, d time.Duration) func() {
			if w.o.profileDir == "" || round != 0 || t.pprof == "" {
				return nil
			}
			return w.profile(t, wl.name, d, &res.profiles)
		})
	}
	return nil
}

// renderCPU gives each relay's process CPU per request in the throughput
// rounds, and hopgate's over the proxy's paired by round: the load
// generator shares the cores, so a change's cost shows here more steadily
// than in req/s. The whole run renders it after its throughput table,
// -only streams after its own.
func (r *results) renderCPU(p printer) {
	p("Process CPU per request in the same rounds (µs, medians of rounds):")
	p("")
	p("| workload | proxy | hopgate | hopgate-%s | hopgate / proxy | hopgate − proxy |", tracingOff)
	p("| --- | ---: | ---: | ---: | ---: | ---: |")
	for _, wl := range []workload{wlComplete, wlStream, wlBurst} {
		mx := r.throughput[wl.name]
		if mx == nil {
			continue
		}
		p("| %s | %s | %s | %s | %s%s | %s%s |", wl.name, fmtUS(median(each(mx.by["proxy"], cpuPerReq))),
			fmtUS(median(each(mx.by["hopgate"], cpuPerReq))), fmtUS(median(each(mx.by["hopgate-"+tracingOff], cpuPerReq))),
			fmtRatio(ratio(mx, "hopgate", "proxy", cpuPerReq)), ratioRounds(mx, "hopgate", "proxy", cpuPerReq),
			fmtSignedUS(added(mx, "hopgate", "proxy", cpuPerReq)), addedRounds(mx, "hopgate", "proxy", cpuPerReq))
	}
	p("")
	p("Read and write system calls per request in the same rounds (/proc/PID/io, medians of rounds; sockets, the")
	p("span export and the log line included):")
	p("")
	p("| workload | proxy reads | proxy writes | hopgate reads | hopgate writes | hopgate-%s reads | hopgate-%s writes |", tracingOff, tracingOff)
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, wl := range []workload{wlComplete, wlStream, wlBurst} {
		mx := r.throughput[wl.name]
		if mx == nil {
			continue
		}
		row := "| " + wl.name + " |"
		for _, t := range []string{"proxy", "hopgate", "hopgate-" + tracingOff} {
			row += " " + fmtCalls(med(mx, t, readsPerReq)) + " | " + fmtCalls(med(mx, t, writesPerReq)) + " |"
		}
		p("%s", row)
	}
	p("")
}

func fmtCalls(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
