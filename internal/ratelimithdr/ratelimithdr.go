// Package ratelimithdr reads the rate-limit windows an upstream states on
// its answers (DESIGN §16): OpenAI's and Azure's (and most compatible
// providers') x-ratelimit-{limit,remaining,reset}-{requests,tokens}, whose
// reset is a duration like 6m0s, 1s or 20ms, and Anthropic's
// anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-
// {limit,remaining,reset}, whose reset is an RFC 3339 time. Parse reads
// the answer's header map in place and allocates nothing on a well-formed
// answer (BenchmarkParse; TestParseAllocatesNothing). Values that do not
// parse leave their window unset: an upstream's bytes never fail a hop.
//
// It only parses: exporting the windows (metrics, /admin, demotion) is for
// its callers.
package ratelimithdr

import (
	"net/http"
	"time"
)

// Kind is what a window counts.
type Kind int

const (
	Requests Kind = iota
	Tokens
	InputTokens  // Anthropic only
	OutputTokens // Anthropic only
	NumKinds
)

var kindNames = [NumKinds]string{"requests", "tokens", "input_tokens", "output_tokens"}

// String is the kind's metric label: requests, tokens, input_tokens,
// output_tokens.
func (k Kind) String() string {
	if k < 0 || k >= NumKinds {
		return "unknown"
	}
	return kindNames[k]
}

// Window is one kind's window as the answer states it.
type Window struct {
	// Set: limit and remaining were both present and valid.
	Set              bool
	Limit, Remaining int64
	// ResetAt is when the window is full again (zero when not stated).
	ResetAt time.Time
}

// Utilization is 1 − remaining/limit, in [0, 1].
func (w Window) Utilization() float64 {
	if !w.Set || w.Limit <= 0 {
		return 0
	}
	u := 1 - float64(w.Remaining)/float64(w.Limit)
	return min(max(u, 0), 1)
}

// Windows are an answer's windows by kind.
type Windows [NumKinds]Window

// Any reports whether the answer stated any window.
func (ws *Windows) Any() bool {
	for _, w := range ws {
		if w.Set {
			return true
		}
	}
	return false
}

// The canonical header keys (http.Header's form), so a lookup allocates
// no key.
var (
	openAIKeys = [2][3]string{
		{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"},
		{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"},
	}
	anthropicKeys = [NumKinds][3]string{
		{"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset"},
		{"Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset"},
		{"Anthropic-Ratelimit-Input-Tokens-Limit", "Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset"},
		{"Anthropic-Ratelimit-Output-Tokens-Limit", "Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset"},
	}
)

// Parse fills ws from h, an answer received at now (OpenAI's resets are
// relative to it). Anthropic's headers win over OpenAI's for the same
// kind (an answer carries one family's).
func Parse(h http.Header, now time.Time, ws *Windows) {
	*ws = Windows{}
	if len(h) == 0 {
		return
	}
	for k := Requests; k <= Tokens; k++ {
		keys := &openAIKeys[k]
		w, ok := window(h, keys)
		if !ok {
			continue
		}
		if d, ok := parseDuration(first(h, keys[2])); ok {
			w.ResetAt = now.Add(d)
		}
		ws[k] = w
	}
	for k := Requests; k < NumKinds; k++ {
		keys := &anthropicKeys[k]
		w, ok := window(h, keys)
		if !ok {
			continue
		}
		if v := first(h, keys[2]); v != "" {
			if t, err := time.Parse(time.RFC3339, v); err == nil {
				w.ResetAt = t
			}
		}
		ws[k] = w
	}
}

func window(h http.Header, keys *[3]string) (Window, bool) {
	l, ok1 := parseCount(first(h, keys[0]))
	r, ok2 := parseCount(first(h, keys[1]))
	if !ok1 || !ok2 {
		return Window{}, false
	}
	return Window{Set: true, Limit: l, Remaining: min(r, l)}, true
}

func first(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// parseCount reads a non-negative decimal integer of at most 18 digits.
func parseCount(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// parseDuration reads OpenAI's resets: a sequence of decimal numbers, each
// with a unit of h, m, s or ms (6m0s, 1s, 20ms, 1.5s, 2h3m). It is written
// here rather than with time.ParseDuration, which allocates its error on
// malformed input (an upstream's bytes, on every answer).
func parseDuration(s string) (time.Duration, bool) {
	if s == "" || len(s) > 32 {
		return 0, false
	}
	var total float64
	for i := 0; i < len(s); {
		start := i
		var v float64
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			v = v*10 + float64(s[i]-'0')
			i++
		}
		if i < len(s) && s[i] == '.' {
			i++
			scale := 0.1
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				v += float64(s[i]-'0') * scale
				scale /= 10
				i++
			}
		}
		if i == start {
			return 0, false
		}
		var unit float64
		switch {
		case i+1 < len(s) && s[i] == 'm' && s[i+1] == 's':
			unit, i = float64(time.Millisecond), i+2
		case i < len(s) && s[i] == 'h':
			unit, i = float64(time.Hour), i+1
		case i < len(s) && s[i] == 'm':
			unit, i = float64(time.Minute), i+1
		case i < len(s) && s[i] == 's':
			unit, i = float64(time.Second), i+1
		default:
			return 0, false
		}
		total += v * unit
	}
	if total > float64(24*time.Hour) {
		return 0, false // no provider window is longer than a day
	}
	return time.Duration(total), true
}
