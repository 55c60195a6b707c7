package main

import (
	"strings"
	"testing"
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
