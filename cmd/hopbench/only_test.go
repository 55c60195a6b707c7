package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// -only names a phase that can run alone; anything else is refused at
// once, before any process starts.
func TestOnlyFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		only string
		err  string
	}{
		// why: the realtime row alone is the quick before/after measurement.
		{[]string{"-only", "realtime"}, onlyRealtime, ""},
		// why: no flag is the whole run.
		{nil, "", ""},
		// why: a typo must not silently run the whole ten-minute benchmark.
		{[]string{"-only", "realtim"}, "", `unknown -only phase "realtim"`},
	} {
		o, err := parseFlags(tc.args, func(string) string { return "" })
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: error %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || o.only != tc.only {
			t.Errorf("%v: only %q, %v", tc.args, o.only, err)
		}
	}
}

// The tracing-variants paragraph describes only the variants that ran:
// -only streams runs hopgate-off alone, and its report must not explain a
// hopgate-healthy10 column it does not have.
func TestTracingProseNamesOnlyVariantsThatRan(t *testing.T) {
	targets := []string{"direct", "proxy", "hopgate", "hopgate-" + tracingOff}
	r := &results{opts: options{workers: 32}, throughput: map[string]*matrix{}}
	for _, wl := range []workload{wlComplete, wlStream, wlBurst} {
		mx := newMatrix(attackMode{workers: 32}, wl, targets)
		for _, tg := range targets {
			mx.by[tg] = []sample{{requests: 100, ok: 100, elapsed: time.Second}}
		}
		r.throughput[wl.name] = mx
	}
	var out strings.Builder
	r.renderThroughput(func(format string, args ...any) { fmt.Fprintf(&out, format+"\n", args...) })
	got := out.String()
	if strings.Contains(got, "hopgate-"+tracingHealthy10) {
		t.Errorf("report explains hopgate-%s, which did not run:\n%s", tracingHealthy10, got)
	}
	if !strings.Contains(got, "*hopgate-"+tracingOff+"*: `OTEL_TRACES_SAMPLER=always_off`") {
		t.Errorf("report does not explain hopgate-%s:\n%s", tracingOff, got)
	}
	if !strings.Contains(got, "1 more hopgate process,") {
		t.Errorf("report miscounts the variants:\n%s", got)
	}
}
