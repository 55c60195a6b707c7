package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// The tenant-limited rows (DESIGN.md §16, issue 33): two more hopgate
// processes, identical to *hopgate* but for a tenant limit on the bench
// key's tenant that never refuses (rpm and tpm at their maximum, 1e9), so
// every request pays the admission and the settle and nothing else
// changes: counters in the process (targetLimited), and in a Redis of its
// own (targetLimitedRedis: one Lua round trip per admission). They run in
// the throughput and completion-latency rounds; the report gives the
// in-process limiter's cost against *hopgate* (the bar: under
// 2 %) and the p50 the Redis round trip adds.

const (
	targetLimited      = "limited"
	targetLimitedRedis = "limited-redis"

	// envLimits selects the gateway's tenant limit: "" none, or the
	// rate_limits.store ("memory", "redis"); envRedisURL is the Redis.
	envLimits   = "HOPBENCH_LIMITS"
	envRedisURL = "HOPBENCH_REDIS_URL"
)

// limitsYAML is the rate_limits block of a gateway whose envLimits is
// store ("" none).
func limitsYAML(store string) string {
	if store == "" {
		return ""
	}
	y := "rate_limits:\n  store: " + store + "\n"
	if store == "redis" {
		y += "  url_env: " + envRedisURL + "\n"
	}
	return y + "  tenants:\n    - {tenant: bench, rpm: 1000000000, tpm: 1000000000}\n"
}

// startLimited starts the two limited gateways (and the Redis of the
// second) as variants of the measured one. Without a redis-server on the
// machine (make redis installs it) the Redis row is left out, with a note.
func (w *world) startLimited(env []string) error {
	gw, err := startRole(roleGateway, append(env, envLimits+"=memory")...)
	if err != nil {
		return err
	}
	w.addLimited(targetLimited, gw)
	stop, url, err := startRedis()
	if err != nil {
		w.logf("no Redis row: %v", err)
		return nil
	}
	sinkStop := w.sinkStop
	w.sinkStop = func() { sinkStop(); stop() } // after the variants stopped: close stops them first
	gw, err = startRole(roleGateway, append(env, envLimits+"=redis", envRedisURL+"="+url)...)
	if err != nil {
		return err
	}
	w.addLimited(targetLimitedRedis, gw)
	return nil
}

func (w *world) addLimited(name string, gw *child) {
	w.variantGWs = append(w.variantGWs, gw)
	w.variants = append(w.variants, target{name: name, url: "http://" + gw.addrs["main"] + "/v1/chat/completions",
		header: baseHeader(), model: modelBench, pid: gw.pid(), admin: gw.addrs["admin"], pprof: gw.addrs["pprof"]})
}

// startRedis runs a throwaway redis-server on a loopback port, nothing
// saved to disk.
func startRedis() (stop func(), url string, err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if _, serr := os.Stat("/usr/bin/redis-server"); serr != nil {
			return nil, "", errors.New("redis-server is not installed (make redis)")
		}
		bin = "/usr/bin/redis-server"
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c, err := startChild("redis", exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no"), false)
	if err != nil {
		return nil, "", err
	}
	if err := waitPort(addr, 10*time.Second, c.done); err != nil {
		c.kill()
		return nil, "", fmt.Errorf("redis-server on %s did not start: %w: %s", addr, err, lastLine([]byte(c.stderr.String())))
	}
	return c.kill, "redis://" + addr + "/0", nil
}

// renderLimits is the tenant-limited rows' verdict: throughput against
// *hopgate* in the same rounds, and the p50 each adds at the fixed rate.
func (r *results) renderLimits(p printer) {
	th, lat := r.throughput[wlComplete.name], r.latency[wlComplete.name]
	if th == nil || len(th.by[targetLimited]) == 0 {
		return
	}
	p("## Tenant rate limits")
	p("")
	p("*%s* and *%s* are *hopgate* with a tenant limit on the bench key's tenant that never refuses", targetLimited, targetLimitedRedis)
	p("(`rate_limits.tenants: [{tenant: bench, rpm: 1e9, tpm: 1e9}]`), so every request pays the")
	p("admission and the settle: counters in the process (`store: memory`), and in a Redis of its own")
	p("on loopback (`store: redis`, one Lua script per admission, one per settle). Same rounds as the")
	p("throughput and latency tables.")
	p("")
	p("| workload | limited / hopgate (req/s) | limited-redis / hopgate (req/s) |")
	p("| --- | ---: | ---: |")
	for _, wl := range []workload{wlComplete, wlStream, wlBurst} {
		mx := r.throughput[wl.name]
		if mx == nil {
			continue
		}
		p("| %s | %s | %s |", wl.name, fmtRatio(ratio(mx, targetLimited, "hopgate", rpsOf)), fmtRatio(ratio(mx, targetLimitedRedis, "hopgate", rpsOf)))
	}
	p("")
	p("CPU time of the gateway process per request (µs; the process's threads' scheduler time during each turn, over its successful requests):")
	p("")
	p("| workload | hopgate | limited | limited / hopgate | limited-redis | limited-redis / hopgate |")
	p("| --- | ---: | ---: | ---: | ---: | ---: |")
	for _, wl := range []workload{wlComplete, wlStream, wlBurst} {
		mx := r.throughput[wl.name]
		if mx == nil {
			continue
		}
		p("| %s | %s | %s | %s%s | %s | %s |", wl.name, fmtUS(median(each(mx.by["hopgate"], cpuPerReq))), fmtUS(median(each(mx.by[targetLimited], cpuPerReq))),
			fmtRatio(ratio(mx, targetLimited, "hopgate", cpuPerReq)), ratioRounds(mx, targetLimited, "hopgate", cpuPerReq),
			fmtUS(median(each(mx.by[targetLimitedRedis], cpuPerReq))), fmtRatio(ratio(mx, targetLimitedRedis, "hopgate", cpuPerReq)))
	}
	p("")
	r.renderAttribution(p)
	// The end-to-end rounds: shown, but their spread is wider than the
	// bar (this machine's two cores run the load generator, the upstream
	// and the gateway; a span export or a GC cycle lands in whichever turn
	// it falls into), so the verdict is the attribution's above.
	cost := ratio(th, targetLimited, "hopgate", cpuPerReq) - 1
	p("End to end, in the throughput rounds: %+.1f %% CPU per completion%s; throughput limited / hopgate %s%s. Rounds spread wider than the 2 %% bar, so these bound nothing either way.",
		100*cost, ratioRounds(th, targetLimited, "hopgate", cpuPerReq),
		fmtRatio(ratio(th, targetLimited, "hopgate", rpsOf)), ratioRounds(th, targetLimited, "hopgate", rpsOf))
	// The limiter's own code, measured alone, against the gateway's CPU
	// per completion in the same run.
	for _, b := range r.micro.benches {
		if b.pkg != "dispatch/ratelimit" || b.name != "BenchmarkAdmit" {
			continue
		}
		if per := median(each(th.by["hopgate"], cpuPerReq)); per > 0 {
			p("The limiter's own code alone (*Go micro-benchmarks* below, BenchmarkAdmit: one admission and its settle, rpm and tpm): %s ns, %.0f B and %.0f allocations per request, %.2f %% of *hopgate*'s %s of CPU per completion.",
				fmtNs(b.nsPerOp), b.bytesPerOp, b.allocsPerOp, 100*b.nsPerOp/(per*1e3), fmtUS(per))
		}
	}
	if lat != nil && len(lat.by[targetLimitedRedis]) > 0 {
		p("Redis limiter: p50 %s vs *hopgate* at %d req/s%s; in-process: %s.",
			fmtSignedUS(added(lat, targetLimitedRedis, "hopgate", p50us)), r.opts.rate,
			addedRounds(lat, targetLimitedRedis, "hopgate", p50us), fmtSignedUS(added(lat, targetLimited, "hopgate", p50us)))
	}
	if lat == nil || len(lat.by[targetLimitedRedis]) == 0 {
		p("No Redis row: redis-server was not found or did not start (`make redis` installs it).")
	}
	p("")
}
