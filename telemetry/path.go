package telemetry

import "strings"

// Step is one entry of a request's failover path: the channel and what
// happened there ("open" for a breaker skip, an HTTP status, "ok",
// "header_timeout", …).
type Step struct{ Channel, Result string }

// FormatPath renders steps as hopgate.failover.path reads:
// "a:open -> b:503 -> c:ok". One allocation: the size is computed first.
func FormatPath(steps []Step) string {
	if len(steps) == 0 {
		return ""
	}
	n := (len(steps) - 1) * len(PathArrow)
	for _, s := range steps {
		n += len(s.Channel) + 1 + len(s.Result)
	}
	var b strings.Builder
	b.Grow(n)
	for i, s := range steps {
		if i > 0 {
			b.WriteString(PathArrow)
		}
		b.WriteString(s.Channel)
		b.WriteByte(':')
		b.WriteString(s.Result)
	}
	return b.String()
}
