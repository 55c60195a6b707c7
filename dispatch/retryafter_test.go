package dispatch

import (
	"testing"
	"time"
)

var raNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// TestParseRetryAfter pins both RFC 9110 forms and the bounds: an upstream
// header can neither go negative nor hold a channel out for days.
func TestParseRetryAfter(t *testing.T) {
	cases := map[string]time.Duration{
		"":                              0,
		"7":                             7 * time.Second,
		" 7 ":                           7 * time.Second,
		"0":                             0,
		"-5":                            0,
		"99999999":                      time.Hour,
		"soon":                          0,
		"Sun, 29 Nov 2026 12:00:30 GMT": 30 * time.Second,
		"Sun, 29 Nov 2026 11:59:00 GMT": 0,         // in the past
		"Mon, 01 Jan 2035 00:00:00 GMT": time.Hour, // years away
	}
	for in, want := range cases {
		if got := parseRetryAfter(in, raNow); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

// FuzzParseRetryAfter: any header an upstream sends yields a duration in
// [0, maxRetryAfterHeader], never a panic.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"7", "-1", "Sun, 29 Nov 2026 12:00:30 GMT", "9223372036854775807", "1e3", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if d := parseRetryAfter(v, raNow); d < 0 || d > maxRetryAfterHeader {
			t.Fatalf("parseRetryAfter(%q) = %v", v, d)
		}
	})
}
