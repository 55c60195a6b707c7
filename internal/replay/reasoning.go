package replay

import (
	"bytes"
	"fmt"
)

// reasoning writes down why the defaults are what they are, with the
// sweep's numbers. A variant missing from the sweep (it has the default
// value) reads as the defaults.
func (r *Report) reasoning(b *bytes.Buffer) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	def := r.totals(&r.Variants[0])
	t := func(param, value string) totals {
		if v := r.variant(param, value); v != nil {
			return r.totals(v)
		}
		return def
	}
	timed := func(x totals) int { return x.timedOut }
	cost := func(minutes float64) string { return usd(minutes * 60 * 2 * PremiumPerRequest) }

	f20, f30, f60 := t("for", "20s"), t("for", "30s"), t("for", "1m0s")
	w("- **`for: 40s`.** How long the evidence lasts is what tells a blip from an incident: for its first seconds a blip looks exactly like the start of a ramp. "+
		"`for: 20s` and less demote on the 30 s blip (false alarms: %d); `30s` clears it by a few seconds only, so a slightly longer blip would not; "+
		"`40s` leaves a margin (the evidence of a blip lasts about as long as the blip, so a blip shorter than `for` does not demote) at the price of %d timed-out requests against %d with `30s` (and %d with `1m`). "+
		"The price of waiting shows in the sudden outage: the rate breaker opened %s into it, before the evidence could have lasted 40 s, "+
		"so early warning adds little there. That is the breaker's incident; early warning is for the slow ones.\n",
		f20.falseAlarms, timed(def), timed(f30), timed(f60), secs(r.OutageOpened))

	m5, m20 := t("min_samples", "5"), t("min_samples", "20")
	m10 := t("min_samples", "10")
	w("- **`min_samples: 5`.** The first judgement, and the judgement of a channel back on probation, wait for this many samples; "+
		"10 gives %d timed-out requests (p99 sum %s), 20 gives %d, against %d (%s) for 5. "+
		"Noise in a 5-sample window has to persist for the whole `for` to matter, and the noisy day shows none. "+
		"With a 30 s window, a channel needs a request every 6 s to be judged at all.\n",
		timed(m10), secs(m10.p99), timed(m20), timed(m5), secs(m5.p99))

	w10, w60 := t("window", "10s"), t("window", "1m0s")
	w("- **`window: 30s`.** 10 s gives %d timed-out requests, 1 m %d: the window matters little next to `for`. 30 s keeps channels with little traffic judgeable "+
		"(`min_samples` within the window) and smooths single slow requests.\n", timed(w10), timed(w60))

	l2, l4, l6 := t("latency_multiple", "2"), t("latency_multiple", "4"), t("latency_multiple", "6")
	w("- **`latency_multiple: 3`.** A higher multiple sees a ramp later: %d timed-out requests with 4, %d with 6, against %d with 3. 2 gives %d, but sits close to what a noisy provider "+
		"does on an ordinary day (here its p99 is about 6 times its median; the majority rule keeps a heavy tail from counting).\n",
		timed(l4), timed(l6), timed(def), timed(l2))

	c1, c5 := t("cooldown", "1m0s"), t("cooldown", "5m0s")
	w("- **`cooldown: 2m`, `probation: 2m`.** Every return of a channel that is still bad costs a few requests (probation judges fresh evidence), "+
		"so a longer cooldown saves some: %d timed-out requests with 5 m and %d with 1 m, against %d with 2 m. But every false alarm costs one cooldown of traffic on the pricier channel — "+
		"at 2 requests per second here, %s for 2 m and %s for 5 m — and the cooldown doubles anyway each time a channel fails its probation (up to 8 times). "+
		"2 m is twice the breaker's own cooldown.\n", timed(c5), timed(c1), timed(def), cost(2), cost(5))

	e25, e75 := t("error_fraction", "0.25"), t("error_fraction", "0.75")
	w("- **`error_fraction: 0.5`.** These scenarios fail by timeouts (caught as latency first) or by 429s with Retry-After (which the breaker honours at once), "+
		"so the fraction barely matters here (%d timed-out requests with 0.25, %d with 0.75, %d with 0.5). Half the rate breaker's 25 %% — 12.5 %% of hops failing over the window — "+
		"is early enough to matter and far from the 2 %% of an ordinary day.\n", timed(e25), timed(e75), timed(def))
	w("- **`baseline: 10m`** is not swept: it must hold enough healthy history that an incident does not become its own baseline (windows judged bad are kept out of it) " +
		"and short enough to follow a provider's daily drift.\n\n")

	r.windowTable(b)
	w("## Limits\n\n")
	w("- One seed, one traffic level (2 requests per second), a two-entry chain whose fallback never misbehaves. " +
		"The guard against demoting when every channel of a chain is slow is not exercised here (the fallback gets no traffic to compare); the detector's unit and property tests cover it.\n")
	w("- The false-alarm count follows the issue's definition literally. In ramp-then-failure the first demotion comes minutes before any breaker would open — longer than its cooldown — " +
		"so it counts as a false alarm although the incident is real.\n")
	w("- window-fill has one window kind (requests), fixed one-minute windows and a provider that states its window on every answer, 429s included. " +
		"A provider that states a window only on some answers keeps its last stated one until it resets; one whose window slides reads fuller than a fixed one near its end, " +
		"so the same threshold demotes it a little earlier. The gateway's own traffic is about a tenth of what fills the window here, so the window moves by about 11 requests between two of its answers; " +
		"where the gateway's share is larger the window moves less between them, and a threshold closer to 1 still sees it before it is full.\n")
	w("- Early warning moves traffic, it never refuses it: a demoted channel still serves when the others fail, and when it is the last healthy channel of a chain it keeps its place.\n")
}
