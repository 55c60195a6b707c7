package upstream

import (
	"testing"
	"time"
)

// The realtime fault words parse as the package doc says; anything else
// is refused (a typo must not silently serve a healthy session).
func TestParseRTFault(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want rtFault
		ok   bool
	}{
		{"m", rtFault{}, true},
		{"m|rt-refuse", rtFault{kind: "refuse", status: 503}, true},
		{"m|rt-refuse=429", rtFault{kind: "refuse", status: 429}, true},
		{"m|rt-silent", rtFault{kind: "silent"}, true},
		{"m|rt-error", rtFault{kind: "error"}, true},
		{"m|rt-close", rtFault{kind: "close"}, true},
		{"m|rt-drop=2", rtFault{kind: "drop", n: 2}, true},
		{"m|rt-hang=0", rtFault{kind: "hang"}, true},
		{"m|rt-slow=3s", rtFault{kind: "slow", delay: 3 * time.Second}, true},
		{"m|rt-repeat-done", rtFault{kind: "repeat-done"}, true},
		// why: a status that is not an error, a bad count or duration, an unknown word.
		{"m|rt-refuse=200", rtFault{}, false},
		{"m|rt-drop=x", rtFault{}, false},
		{"m|rt-hang", rtFault{}, false},
		{"m|rt-slow=-1s", rtFault{}, false},
		{"m|rt-flap", rtFault{}, false},
	} {
		base, f, ok := parseRTFault(tc.in)
		if ok != tc.ok || (ok && (base != "m" || f != tc.want)) {
			t.Errorf("parseRTFault(%q) = %q, %+v, %v", tc.in, base, f, ok)
		}
	}
}
