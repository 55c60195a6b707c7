package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Why: issue 23 is judged by the verdicts of the "Over the bare proxy"
// table. Each row must say met at its line and missed just past it,
// including the ratio rows whose two-decimal display shows the line
// itself (0.899 prints as 0.90×).
func TestOwnTargetsVerdicts(t *testing.T) {
	rps := func(n int) []sample { return []sample{{ok: n, elapsed: time.Second}} }
	lat := func(us int) []sample {
		return []sample{{ok: 1, lat: []time.Duration{time.Duration(us) * time.Microsecond}}}
	}
	build := func(sampled, exported, streams, p50, ttft int, idle float64) *results {
		complete := newMatrix(attackMode{workers: 32}, wlComplete, nil)
		complete.by["proxy"] = rps(10000)
		complete.by["hopgate"] = rps(exported)
		complete.by["hopgate-"+tracingHealthy10] = rps(sampled)
		stream := newMatrix(attackMode{workers: 32}, wlStream, nil)
		stream.by["proxy"], stream.by["hopgate"] = rps(10000), rps(streams)
		latency := newMatrix(attackMode{rate: 1000}, wlComplete, nil)
		latency.by["proxy"], latency.by["hopgate"] = lat(400), lat(400+p50)
		first := newMatrix(attackMode{workers: 4}, wlStream, nil)
		first.by["proxy"], first.by["hopgate"] = lat(500), lat(500+ttft)
		return &results{
			opts:       options{rate: 1000},
			throughput: map[string]*matrix{wlComplete.name: complete, wlStream.name: stream},
			latency:    map[string]*matrix{wlComplete.name: latency},
			ttft:       first,
			idle: map[string]idleResult{
				"proxy":   {perStreamKiB: 56},
				"hopgate": {perStreamKiB: 56 + idle},
			},
		}
	}
	rows := []string{"`healthy_sample_ratio: 0.1`", "every trace exported (completion-1KB)",
		"every trace exported (stream-50-frames)", "hopgate's own p50", "time to first token", "per idle stream"}
	for _, tc := range []struct {
		name string
		r    *results
		want string
	}{
		{"at the lines", build(9000, 8500, 8500, 100, 300, 8), "met"},
		{"past the lines", build(8990, 8490, 8490, 101, 301, 8.1), "**missed**"},
	} {
		var b strings.Builder
		tc.r.renderOwnTargets(func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) })
		for _, row := range rows {
			line := ""
			for l := range strings.Lines(b.String()) {
				if strings.Contains(l, row) {
					line = l
				}
			}
			if !strings.HasSuffix(strings.TrimSpace(line), "| "+tc.want+" |") {
				t.Errorf("%s: row %q is %q, want %s", tc.name, row, strings.TrimSpace(line), tc.want)
			}
		}
	}
}
