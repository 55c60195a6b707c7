// Package retryafter reads the Retry-After header (RFC 9110 §10.2.3), for
// the gateway's hops (an upstream asking to be left alone) and for the
// trace exporter (a collector asking the same).
//
// It owns the parsing and the bounds only; what a pause means is the
// caller's.
package retryafter

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Parse returns the pause v asks for, seen at now: delay-seconds or an
// HTTP date. Absent, unreadable, zero, negative or past values are 0;
// anything over limit is limit, so one header can neither go negative nor
// hold a caller for days.
func Parse(v string, now time.Time, limit time.Duration) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		if n > int64(limit/time.Second) {
			return limit
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, limit)
		}
	}
	return 0
}
