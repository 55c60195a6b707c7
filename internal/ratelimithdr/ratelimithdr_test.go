package ratelimithdr

import (
	"net/http"
	"testing"
	"time"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// Why: each provider's own spelling is read, with its reset form: OpenAI's
// durations relative to the answer, Anthropic's RFC 3339 times; a broken
// value leaves its window unset instead of inventing one.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    map[string]string
		kind Kind
		want Window
	}{
		{"openai requests", map[string]string{"x-ratelimit-limit-requests": "500", "x-ratelimit-remaining-requests": "499", "x-ratelimit-reset-requests": "120ms"},
			Requests, Window{Set: true, Limit: 500, Remaining: 499, ResetAt: now.Add(120 * time.Millisecond)}},
		{"openai tokens 6m0s", map[string]string{"x-ratelimit-limit-tokens": "30000", "x-ratelimit-remaining-tokens": "3000", "x-ratelimit-reset-tokens": "6m0s"},
			Tokens, Window{Set: true, Limit: 30000, Remaining: 3000, ResetAt: now.Add(6 * time.Minute)}},
		{"openai fractional seconds", map[string]string{"x-ratelimit-limit-tokens": "10", "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1m1.5s"},
			Tokens, Window{Set: true, Limit: 10, Remaining: 0, ResetAt: now.Add(61500 * time.Millisecond)}},
		{"anthropic input tokens", map[string]string{"anthropic-ratelimit-input-tokens-limit": "40000", "anthropic-ratelimit-input-tokens-remaining": "39000",
			"anthropic-ratelimit-input-tokens-reset": "2026-12-01T12:00:30Z"}, InputTokens, Window{Set: true, Limit: 40000, Remaining: 39000, ResetAt: now.Add(30 * time.Second)}},
		{"bad reset keeps the window", map[string]string{"x-ratelimit-limit-requests": "5", "x-ratelimit-remaining-requests": "1", "x-ratelimit-reset-requests": "soon"},
			Requests, Window{Set: true, Limit: 5, Remaining: 1}},
		{"remaining above limit is clamped", map[string]string{"x-ratelimit-limit-requests": "5", "x-ratelimit-remaining-requests": "9"},
			Requests, Window{Set: true, Limit: 5, Remaining: 5}},
		{"negative remaining is no window", map[string]string{"x-ratelimit-limit-requests": "5", "x-ratelimit-remaining-requests": "-1"}, Requests, Window{}},
		{"limit without remaining", map[string]string{"x-ratelimit-limit-requests": "5"}, Requests, Window{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.h {
				h.Set(k, v)
			}
			var ws Windows
			Parse(h, now, &ws)
			if got := ws[tc.kind]; got != tc.want {
				t.Fatalf("%s: %+v, want %+v", tc.kind, got, tc.want)
			}
		})
	}
	if u := (Window{Set: true, Limit: 100, Remaining: 10}).Utilization(); u != 0.9 {
		t.Fatalf("utilization %v", u)
	}
}

func benchHeader() http.Header {
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", "10000")
	h.Set("x-ratelimit-remaining-requests", "9999")
	h.Set("x-ratelimit-reset-requests", "6ms")
	h.Set("x-ratelimit-limit-tokens", "30000000")
	h.Set("x-ratelimit-remaining-tokens", "29999000")
	h.Set("x-ratelimit-reset-tokens", "6m0s")
	h.Set("Content-Type", "application/json")
	return h
}

// Why: Parse runs on every upstream answer: it must not allocate, on good
// values or on garbage.
func TestParseAllocatesNothing(t *testing.T) {
	for _, h := range []http.Header{benchHeader(), {"X-Ratelimit-Limit-Requests": {"x"}, "X-Ratelimit-Remaining-Requests": {"1"},
		"Anthropic-Ratelimit-Tokens-Limit": {"5"}, "Anthropic-Ratelimit-Tokens-Remaining": {"1"}, "Anthropic-Ratelimit-Tokens-Reset": {"2026-12-01T12:00:30Z"}}} {
		var ws Windows
		if n := testing.AllocsPerRun(100, func() { Parse(h, now, &ws) }); n != 0 {
			t.Fatalf("Parse allocated %v times per answer", n)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	h := benchHeader()
	var ws Windows
	b.ReportAllocs()
	for b.Loop() {
		Parse(h, now, &ws)
	}
}

// FuzzParse: whatever an upstream sends, Parse neither panics nor states a
// window whose remaining exceeds its limit or whose utilization leaves [0, 1].
func FuzzParse(f *testing.F) {
	f.Add("500", "499", "6m0s", "2026-12-01T12:00:30Z")
	f.Add("1", "0", "1.5s", "x")
	f.Add("", "-1", "99999999999h", "")
	f.Fuzz(func(t *testing.T, limit, remaining, reset, at string) {
		h := http.Header{
			"X-Ratelimit-Limit-Tokens": {limit}, "X-Ratelimit-Remaining-Tokens": {remaining}, "X-Ratelimit-Reset-Tokens": {reset},
			"Anthropic-Ratelimit-Requests-Limit": {limit}, "Anthropic-Ratelimit-Requests-Remaining": {remaining}, "Anthropic-Ratelimit-Requests-Reset": {at},
		}
		var ws Windows
		Parse(h, now, &ws)
		for k, w := range ws {
			if u := w.Utilization(); w.Remaining > w.Limit || u < 0 || u > 1 || (!w.Set && w != Window{}) {
				t.Fatalf("%s: %+v (utilization %v)", Kind(k), w, u)
			}
			if k == int(Tokens) && w.Set && !w.ResetAt.IsZero() && (w.ResetAt.Before(now) || w.ResetAt.After(now.Add(24*time.Hour))) {
				t.Fatalf("reset %s from %q", w.ResetAt, reset)
			}
		}
	})
}
