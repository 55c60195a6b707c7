package replay

import (
	"bytes"
	"fmt"
	"strconv"
)

// The window-fill part of the report: ratelimit_utilization is swept on
// its own scenario (the only one whose provider states a window; every
// other scenario runs the same with any value, so the sweep reuses the
// defaults' runs of those), and its default is the lowest value with no
// false alarm — the earliest warning that does not cry wolf on a busy
// window that never filled.

// windowScenario is the scenario ratelimit_utilization is chosen on.
const windowScenario = "window-fill"

// rateLimitValues are the swept thresholds.
var rateLimitValues = []float64{0.7, 0.8, 0.9, 0.95, 0.98, 1}

// sweepRateLimit runs window-fill at every swept threshold but the
// default's; the other scenarios' summaries are the defaults'.
func sweepRateLimit(def *Variant, run func(Scenario, *Variant) (Summary, error)) ([]Variant, error) {
	sc, _ := ScenarioNamed(windowScenario)
	var out []Variant
	for _, u := range rateLimitValues {
		if u == def.Policy.RateLimitUtilization {
			continue
		}
		v := Variant{Param: "ratelimit_utilization", Value: strconv.FormatFloat(u, 'f', -1, 64), Policy: def.Policy, Summaries: map[string]Summary{}}
		v.Policy.RateLimitUtilization = u
		for name, s := range def.Summaries {
			v.Summaries[name] = s
		}
		s, err := run(sc, &v)
		if err != nil {
			return nil, err
		}
		v.Summaries[windowScenario] = s
		out = append(out, v)
	}
	return out, nil
}

// rateLimitChoice is the lowest swept threshold (the defaults' included)
// with no false alarm on window-fill; 0 when none.
func (r *Report) rateLimitChoice() float64 {
	best := 0.0
	for i := range r.Variants {
		v := &r.Variants[i]
		if v.Param != "" && v.Param != "ratelimit_utilization" {
			continue
		}
		u := v.Policy.RateLimitUtilization
		if v.Summaries[windowScenario].FalseAlarms == 0 && (best == 0 || u < best) {
			best = u
		}
	}
	return best
}

// windowFindings is window-fill's line under the defaults' table.
func (r *Report) windowFindings(b *bytes.Buffer) {
	off, on := r.row(windowScenario, "breakers only"), r.row(windowScenario, "early warning")
	fmt.Fprintf(b, "- **%s**: %d failed hops (429s) instead of %d, %d client errors instead of %d, p99 %s instead of %s, %d demotions (%d false alarms, costing %s); premium %s.\n",
		windowScenario, on.FailedHops, off.FailedHops, on.ClientErrors, off.ClientErrors, secs(on.P99), secs(off.P99),
		on.Demotions, on.FalseAlarms, usd(on.FalseAlarmPremium), usdDelta(on.Premium-off.Premium))
}

// windowTable is the ratelimit_utilization sweep and its reasoning.
func (r *Report) windowTable(b *bytes.Buffer) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("## Choosing `ratelimit_utilization`\n\n")
	w("The rate-limit signal (DESIGN.md §16) demotes a channel whose stated window is at least this full, until the window resets; it needs no samples and no `for` (the provider's own count is not noise). "+
		"It is swept on %s, the only scenario whose provider states its window (the others run the same with any value). "+
		"A **false alarm** here is a window demotion in a window that never filled: the provider refused nothing in it, with early warning or without.\n\n", windowScenario)
	w("| ratelimit_utilization | failed hops (429s) | client errors | p99 | served by `dear` | premium | demotions (false alarms) | false-alarm premium |\n")
	w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	off := r.row(windowScenario, "breakers only")
	w("| breakers only | %d | %d | %s | %d | %s | – | – |\n", off.FailedHops, off.ClientErrors, secs(off.P99), off.OnDear, usd(off.Premium))
	def := r.Defaults.RateLimitUtilization
	for _, u := range rateLimitValues {
		v := &r.Variants[0]
		if u != def {
			if v = r.variant("ratelimit_utilization", strconv.FormatFloat(u, 'f', -1, 64)); v == nil {
				continue
			}
		}
		s := v.Summaries[windowScenario]
		name := strconv.FormatFloat(u, 'f', -1, 64)
		if u == def {
			name = "**" + name + "** (default)"
		}
		fa := fmt.Sprint(s.FalseAlarms)
		if s.FalseAlarms > 0 {
			fa = "**" + fa + "**"
		}
		w("| %s | %d | %d | %s | %d | %s | %d (%s) | %s |\n", name, s.FailedHops, s.ClientErrors, secs(s.P99), s.OnDear, usd(s.Premium), s.Demotions, fa, usd(s.FalseAlarmPremium))
	}
	choice := r.rateLimitChoice()
	w("\nThe bar: the lowest threshold with no false alarm — the earliest warning that does not move traffic off a busy window that would never have refused it. ")
	switch {
	case choice == def:
		w("That is the default, `%s`. ", strconv.FormatFloat(def, 'f', -1, 64))
	default:
		w("**The default (`%s`) is not it (`%s` is): change earlywarning.DefaultRateLimit and regenerate.** ", strconv.FormatFloat(def, 'f', -1, 64), strconv.FormatFloat(choice, 'f', -1, 64))
	}
	w("Lower thresholds demote in the busy minutes that never filled, each costing the rest of its minute on `dear`; higher ones leave fewer requests between the demotion and the full window, " +
		"and with the enterprise tenant at 1,300 requests per minute the window moves by about 11 requests between two of the gateway's, so a threshold close to 1 sees the full window only in the 429 itself.\n\n")
}
