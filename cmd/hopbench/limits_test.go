package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The limiter's own micro-benchmark: BenchmarkAdmit's time over the
// gateway's CPU per completion in the same run (the verdict is the
// profiles', attrib_test.go).
func TestRenderLimitsDirectCost(t *testing.T) {
	for _, tc := range []struct {
		why   string
		ns    float64
		wants string
	}{
		{"600 ns of 200 µs is 0.30 %", 600, "0.30 % of *hopgate*'s 200 µs of CPU per completion."},
		{"5 µs of 200 µs is 2.50 %", 5000, "2.50 % of *hopgate*'s 200 µs of CPU per completion."},
	} {
		mx := newMatrix(attackMode{workers: 1}, wlComplete, []string{"hopgate", targetLimited})
		for range 3 {
			// 1000 requests in 200 ms of CPU: 200 µs per request.
			s := sample{requests: 1000, ok: 1000, elapsed: time.Second, cpu: 200 * time.Millisecond}
			mx.by["hopgate"] = append(mx.by["hopgate"], s)
			mx.by[targetLimited] = append(mx.by[targetLimited], s)
		}
		r := &results{throughput: map[string]*matrix{wlComplete.name: mx}}
		r.micro.benches = []microBench{{pkg: "dispatch/ratelimit", name: "BenchmarkAdmit", nsPerOp: tc.ns, bytesPerOp: 256, allocsPerOp: 1, hasMem: true}}
		var out strings.Builder
		r.renderLimits(func(format string, args ...any) { fmt.Fprintf(&out, format+"\n", args...) })
		if strings.Contains(out.String(), "((") || strings.Contains(out.String(), "( (") || strings.Contains(out.String(), ":  (") {
			t.Errorf("%s: doubled parentheses:\n%s", tc.why, out.String())
		}
		if !strings.Contains(out.String(), tc.wants) {
			t.Errorf("%s: the report lacks %q:\n%s", tc.why, tc.wants, out.String())
		}
	}
}
