package retryafter

import (
	"strconv"
	"testing"
	"time"
)

var raNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// TestParse pins both RFC 9110 forms and the bounds: a header can neither
// go negative nor hold a caller for days.
func TestParse(t *testing.T) {
	cases := map[string]time.Duration{
		"":                              0,
		"7":                             7 * time.Second,
		" 7 ":                           7 * time.Second,
		"0":                             0,
		"-5":                            0,
		"99999999":                      time.Hour,
		"3600":                          time.Hour,
		"3601":                          time.Hour, // one past the limit
		"soon":                          0,
		"Sun, 29 Nov 2026 12:00:30 GMT": 30 * time.Second,
		"Sun, 29 Nov 2026 11:59:00 GMT": 0,         // in the past
		"Mon, 01 Jan 2035 00:00:00 GMT": time.Hour, // years away
	}
	for in, want := range cases {
		if got := Parse(in, raNow, time.Hour); got != want {
			t.Errorf("Parse(%q) = %v, want %v", in, got, want)
		}
	}
}

// FuzzParse: any header an upstream or a collector sends yields a duration
// in [0, limit], never a panic; a plain count of seconds under the limit
// is taken as is.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"7", "-1", "Sun, 29 Nov 2026 12:00:30 GMT", "9223372036854775807", "1e3", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d := Parse(v, raNow, time.Hour)
		if d < 0 || d > time.Hour {
			t.Fatalf("Parse(%q) = %v", v, d)
		}
		if n, err := strconv.Atoi(v); err == nil && n > 0 && n <= 3600 && d != time.Duration(n)*time.Second {
			t.Fatalf("Parse(%q) = %v, want %ds", v, d, n)
		}
	})
}
