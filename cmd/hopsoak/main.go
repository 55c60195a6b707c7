package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hopsoak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	fs.DurationVar(&o.Duration, "duration", 60*time.Second, "how long to send traffic (the run then drains and stops)")
	fs.Float64Var(&o.Rate, "rate", 40, "requests started per second")
	fs.IntVar(&o.MaxInFlight, "max-in-flight", 64, "the soak's own bound: a request due while this many are in flight is not sent (skipped)")
	fs.Uint64Var(&o.Seed, "seed", 0, "random seed (0: time-based)")
	fs.Var((*byteSize)(&o.MaxResponseBody), "max-response-body", "override the bound on one buffered upstream answer, e.g. 16MiB (0: the config's per-operation overload.max_response_bytes)")
	fs.Var((*byteSize)(&o.MemoryLimit), "memory-limit", "apply this Go memory limit before the gateway starts, as hopgate serve sets 80 % of deploy/k8s's container limit (e.g. 410MiB; 0: GOMEMLIMIT as set, if any); the gateway's buffer budget follows it")
	fs.Var((*byteSize)(&o.RSSCeiling), "rss-ceiling", "a peak RSS above this is a violation (0: 512MiB when a memory limit is in force, else none; -1: none)")
	fs.Float64Var(&o.EndlessShare, "endless-share", 0, "share of injected faults that are endless-body or endless-frame (0: every fault word alike, 2 in 31)")
	fs.Var((*byteSize)(&o.BudgetBytes), "budget", "the gateway's overload.budget_bytes (0: -budget-fraction of the memory limit, else 256MiB)")
	fs.Float64Var(&o.BudgetFraction, "budget-fraction", 0, "the gateway's overload.budget_fraction, its share of the memory limit (0: the config's default, 0.5)")
	fs.Int64Var(&o.GatewayMaxInFlight, "gateway-max-in-flight", 0, "the gateway's overload.max_in_flight (0: derived from the budget)")
	fs.Int64Var(&o.GatewayMaxStreams, "gateway-max-streams", 0, "the gateway's overload.max_streams (0: derived from the budget)")
	fs.DurationVar(&o.FrameDelay, "frame-delay", 0, "every fake provider waits this long between stream frames and endless-body chunks (0: none)")
	fs.StringVar(&o.HeapProfile, "heap-profile", "", "write a heap profile to this file at the highest RSS (rewritten as the peak grows by 16MiB)")
	fs.BoolVar(&o.Wallet, "wallet", false, "charge every request to a tenant's wallet (a SQLite store) and check the books after the drain")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.EndlessShare < 0 || o.EndlessShare > 1 {
		fmt.Fprintln(stderr, "hopsoak: -endless-share must be in [0, 1]")
		return 2
	}
	o.Progress = stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := Run(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "hopsoak:", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		fmt.Fprint(stdout, rep.Text())
	}
	if len(rep.Violations) > 0 {
		return 1
	}
	return 0
}

// Text renders the report for humans (and docs/reliability.md).
func (r *Report) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak: %v of traffic, %d requests at %.1f/s (%d streaming, %d slow clients, %d disconnects; %d skipped at the soak's own in-flight bound; the generator fell behind by %d at most), %d upstream hops\n",
		r.Duration.Round(time.Second), r.Requests, r.Rate, r.Streaming, r.SlowClients, r.Disconnects, r.Skipped, r.MaxLag, r.Hops)
	fmt.Fprintf(&b, "faults: seed %d, %d fault changes; hops that met a fault: %s\n", r.Seed, r.FaultChanges, kv(r.FaultsInjected))
	fmt.Fprintf(&b, "client outcomes: %s\n", kv(r.Outcomes))
	fmt.Fprintf(&b, "metric outcomes: %s\n", kv(r.MetricOutcomes))
	fmt.Fprintf(&b, "shed (503 engine_overloaded, Retry-After): clients %d {%s}, hopgate_shed_requests_total {%s}; %d traced\n",
		total(r.Shed), kv(r.Shed), kv(r.MetricShed), r.ShedTraced)
	fmt.Fprintf(&b, "failovers: %d; paths checked against root spans: %d; found in /admin/failovers: %d\n",
		r.Failovers, r.PathsChecked, r.FailoverLogHits)
	fmt.Fprintf(&b, "overload: buffer budget %s, peak in use %s; bounds %d in flight, %d streams (peaks %d, %d); hops failed at the budget (buffer_budget in paths): %d\n",
		mib(r.BudgetLimit), mib(r.PeakBudgetUsed), r.BoundInFlight, r.BoundStreams, r.PeakInFlight, r.PeakStreams, r.BudgetHops)
	fmt.Fprintf(&b, "memory: limit %s, peak RSS %s during the traffic (%s with the checks and the drain), ceiling %s; at the highest sample, RSS %s: Go runtime %s (heap objects %s, live at the last GC %s), other %s, file-backed %s; budget in use %s\n",
		orNone(r.MemoryLimit), mib(r.PeakRSS), mib(r.PeakRSSAll), orNone(r.RSSCeiling), mib(r.AtPeak.RSS), mib(r.AtPeak.GoRuntime),
		mib(r.AtPeak.HeapObjects), mib(r.AtPeak.HeapLive), mib(r.AtPeak.RSS-r.AtPeak.GoRuntime), mib(r.AtPeak.RSSFile), mib(r.AtPeak.Budget))
	fmt.Fprintf(&b, "cpu: %v user+system during the traffic, %.2f of %d cores on average; machine load average %.1f at the start, %.1f at the end\n",
		r.CPU.Round(time.Second), r.CPU.Seconds()/max(r.Duration.Seconds(), 1e-9), r.Cores, r.LoadBefore, r.LoadAfter)
	fmt.Fprintf(&b, "latency: p50 %v, p99 %v, max %v\n", r.LatencyP50.Round(time.Millisecond), r.LatencyP99.Round(time.Millisecond), r.LatencyMax.Round(time.Millisecond))
	fmt.Fprintf(&b, "resources: RSS %d MiB before, peak %d MiB, %d MiB after drain; live heap %d MiB before, %d MiB after; peak goroutines %d, leaked %d; fds %d before, %d after; gateway error logs %d\n",
		r.RSSBefore>>20, r.PeakRSSAll>>20, r.RSSAfter>>20, r.HeapBefore>>20, r.HeapAfter>>20, r.PeakGoroutines, r.GoroutinesAfter, r.FDsBefore, r.FDsAfter, r.ErrorLogs)
	if r.Wallet != nil {
		b.WriteString(r.Wallet.text())
	}
	if len(r.Violations) == 0 {
		b.WriteString("PASS: no violations\n")
	} else {
		fmt.Fprintf(&b, "FAIL: %d violation line(s):\n", len(r.Violations))
		for _, v := range r.Violations {
			fmt.Fprintf(&b, "  %s\n", v)
		}
	}
	return b.String()
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// mib prints bytes in MiB, with one decimal below 10 MiB.
func mib(n int64) string {
	if n < 10<<20 {
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	}
	return strconv.FormatInt(n>>20, 10) + " MiB"
}

func orNone(n int64) string {
	if n <= 0 {
		return "none"
	}
	return mib(n)
}

// byteSize is a flag value in bytes: a number with an optional KiB, MiB or
// GiB suffix (as GOMEMLIMIT is written).
type byteSize int64

func (s *byteSize) String() string { return strconv.FormatInt(int64(*s), 10) }

func (s *byteSize) Set(v string) error {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return fmt.Errorf("not a size in bytes (e.g. 512MiB): %w", err)
	}
	if n > math.MaxInt64/mult || n < math.MinInt64/mult {
		return errors.New("size out of range")
	}
	*s = byteSize(n * mult)
	return nil
}

func kv(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
