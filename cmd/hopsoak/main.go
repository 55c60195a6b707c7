package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
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
	fs.IntVar(&o.MaxInFlight, "max-in-flight", 64, "requests in flight beyond which new ones are shed")
	fs.Uint64Var(&o.Seed, "seed", 0, "random seed (0: time-based)")
	fs.Int64Var(&o.MaxResponseBody, "max-response-body", 16<<20, "bound on a buffered upstream body (bytes)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
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
	fmt.Fprintf(&b, "soak: %v of traffic, %d requests (%d streaming, %d slow clients, %d disconnects, %d shed), %d upstream hops\n",
		r.Duration.Round(time.Second), r.Requests, r.Streaming, r.SlowClients, r.Disconnects, r.Shed, r.Hops)
	fmt.Fprintf(&b, "faults: %d fault changes; hops that met a fault: %s\n", r.FaultChanges, kv(r.FaultsInjected))
	fmt.Fprintf(&b, "client outcomes: %s\n", kv(r.Outcomes))
	fmt.Fprintf(&b, "metric outcomes: %s\n", kv(r.MetricOutcomes))
	fmt.Fprintf(&b, "failovers: %d; paths checked against root spans: %d; found in /admin/failovers: %d\n",
		r.Failovers, r.PathsChecked, r.FailoverLogHits)
	fmt.Fprintf(&b, "latency: p50 %v, p99 %v, max %v\n", r.LatencyP50.Round(time.Millisecond), r.LatencyP99.Round(time.Millisecond), r.LatencyMax.Round(time.Millisecond))
	fmt.Fprintf(&b, "resources: RSS %d MiB before, peak %d MiB, %d MiB after drain; live heap %d MiB before, %d MiB after; peak goroutines %d, leaked %d; fds %d before, %d after; gateway error logs %d\n",
		r.RSSBefore>>20, r.PeakRSS>>20, r.RSSAfter>>20, r.HeapBefore>>20, r.HeapAfter>>20, r.PeakGoroutines, r.GoroutinesAfter, r.FDsBefore, r.FDsAfter, r.ErrorLogs)
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
