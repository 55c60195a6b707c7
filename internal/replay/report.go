package replay

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hopgate/hopgate/dispatch/config"
)

// ReportOptions choose what Generate runs.
type ReportOptions struct {
	// Short runs a shortened replay (2 minutes of warm-up, scenarios at
	// half length, no sweep): what the command's test runs.
	Short bool
	// Sweep varies the defaults one parameter at a time.
	Sweep bool
	Seed  uint64
	// Progress receives a line per run; nil: none.
	Progress io.Writer
}

// Row is one scenario under one policy.
type Row struct {
	Scenario Scenario
	Policy   string // "breakers only" or "early warning"
	Summary  Summary
}

// Variant is one configuration of the sweep and its results per scenario.
type Variant struct {
	Param, Value string // the parameter changed from the defaults ("" for the defaults)
	Policy       config.EarlyWarning
	Summaries    map[string]Summary // by scenario name
}

// Report is a whole replay: the defaults against breakers alone, and the
// sweep around the defaults.
type Report struct {
	Options  ReportOptions
	Defaults config.EarlyWarning
	Rows     []Row
	Variants []Variant
	// DefaultsPass: the defaults meet the report's bar (check); Best is
	// the fewest timed-out requests of a passing configuration.
	DefaultsPass bool
	Best         int
	// OutageOpened is when the cheap channel's breaker first opened in the
	// sudden outage with breakers alone.
	OutageOpened time.Duration
	Elapsed      time.Duration // real time (not in the report: it would differ per run)
	Runs         int
	Virtual      time.Duration // traffic replayed
}

// failureScenarios are where early warning must save callers timeouts;
// quietScenarios where it must not cry wolf.
var (
	failureScenarios = []string{"ramp-then-failure", "sudden-outage"}
	quietScenarios   = []string{"latency-blip", "noisy-healthy"}
)

// Defaults is the built-in early-warning policy, enabled.
func Defaults() config.EarlyWarning {
	e := config.DefaultEarlyWarning()
	e.Enabled = true
	return e
}

// sweep is the one-parameter-at-a-time grid around the defaults.
func sweep(def config.EarlyWarning) []Variant {
	var out []Variant
	add := func(param, value string, f func(*config.EarlyWarning)) {
		e := def
		f(&e)
		if e == def {
			return
		}
		out = append(out, Variant{Param: param, Value: value, Policy: e})
	}
	for _, w := range []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, time.Minute} {
		add("window", w.String(), func(e *config.EarlyWarning) { e.Window = w })
	}
	for _, m := range []float64{2, 3, 4, 6} {
		add("latency_multiple", fmt.Sprint(m), func(e *config.EarlyWarning) { e.LatencyMultiple = m })
	}
	for _, f := range []time.Duration{0, 10 * time.Second, 20 * time.Second, 30 * time.Second, 40 * time.Second, time.Minute} {
		add("for", f.String(), func(e *config.EarlyWarning) { e.For = f })
	}
	for _, n := range []int{5, 10, 20, 40} {
		add("min_samples", fmt.Sprint(n), func(e *config.EarlyWarning) { e.MinSamples = n })
	}
	for _, c := range []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute} {
		add("cooldown", c.String(), func(e *config.EarlyWarning) { e.Cooldown, e.Probation = c, c })
	}
	for _, f := range []float64{0.25, 0.5, 0.75} {
		add("error_fraction", fmt.Sprint(f), func(e *config.EarlyWarning) { e.ErrorFraction = f })
	}
	return out
}

// Generate runs the replay.
func Generate(o ReportOptions) (*Report, error) {
	began := time.Now()
	rep := &Report{Options: o, Defaults: Defaults()}
	run := func(sc Scenario, ew *config.EarlyWarning) (*Result, error) {
		ro := Options{Scenario: sc, EarlyWarning: ew, Seed: o.Seed}
		if o.Short {
			ro.Warmup, ro.Scale = 2*time.Minute, 0.5
		}
		r, err := Run(ro)
		if err != nil {
			return nil, err
		}
		rep.Runs++
		if n := len(r.Records); n > 0 {
			rep.Virtual += time.Duration(n) * 500 * time.Millisecond
		}
		if o.Progress != nil {
			policy := "breakers only"
			if ew != nil {
				policy = "early warning " + ew.String()
			}
			fmt.Fprintf(o.Progress, "%-18s %s: %d requests\n", sc.Name, policy, len(r.Records))
		}
		return r, nil
	}
	base := map[string]*Result{}
	def := rep.Defaults
	defaults := Variant{Policy: def, Summaries: map[string]Summary{}}
	for _, sc := range Scenarios {
		off, err := run(sc, nil)
		if err != nil {
			return nil, err
		}
		on, err := run(sc, &def)
		if err != nil {
			return nil, err
		}
		base[sc.Name] = off
		if sc.Name == "sudden-outage" {
			for _, o := range off.Openings {
				if o.Channel == Cheap && o.At >= 0 {
					rep.OutageOpened = o.At
					break
				}
			}
		}
		so, sw := Summarize(off, nil), Summarize(on, off)
		defaults.Summaries[sc.Name] = sw
		rep.Rows = append(rep.Rows, Row{Scenario: sc, Policy: "breakers only", Summary: so}, Row{Scenario: sc, Policy: "early warning", Summary: sw})
	}
	rep.Variants = append(rep.Variants, defaults)
	if o.Sweep && !o.Short {
		for _, v := range sweep(def) {
			v.Summaries = map[string]Summary{}
			for _, sc := range Scenarios {
				r, err := run(sc, &v.Policy)
				if err != nil {
					return nil, err
				}
				v.Summaries[sc.Name] = Summarize(r, base[sc.Name])
			}
			rep.Variants = append(rep.Variants, v)
		}
		vs, err := sweepRateLimit(&rep.Variants[0], func(sc Scenario, v *Variant) (Summary, error) {
			r, err := run(sc, &v.Policy)
			if err != nil {
				return Summary{}, err
			}
			return Summarize(r, base[sc.Name]), nil
		})
		if err != nil {
			return nil, err
		}
		rep.Variants = append(rep.Variants, vs...)
	}
	rep.check()
	rep.Elapsed = time.Since(began)
	return rep, nil
}

// Tolerance is how far above the best passing configuration's timed-out
// requests the defaults may be: the replay runs one seed, and a few
// requests either way are noise.
const Tolerance = 0.15

// totals is a variant summed over the scenario groups.
type totals struct {
	timedOut     int           // failure scenarios
	p99          time.Duration // failure scenarios, summed
	falseAlarms  int           // quiet scenarios
	falsePremium float64       // quiet scenarios
	demotions    int           // every scenario
	premium      float64       // above breakers alone, every scenario
}

func (r *Report) totals(v *Variant) totals {
	var t totals
	for _, n := range failureScenarios {
		t.timedOut += v.Summaries[n].TimedOut
		t.p99 += v.Summaries[n].P99
	}
	for _, n := range quietScenarios {
		t.falseAlarms += v.Summaries[n].FalseAlarms
		t.falsePremium += v.Summaries[n].FalseAlarmPremium
	}
	for _, sc := range Scenarios {
		s := v.Summaries[sc.Name]
		t.demotions += s.Demotions
		t.premium += s.Premium - r.row(sc.Name, "breakers only").Premium
	}
	return t
}

// passes is the report's bar: no false alarm on the quiet scenarios.
func (t totals) passes() bool { return t.falseAlarms == 0 }

// check decides whether the defaults meet the bar: they pass, and their
// timed-out requests are within Tolerance of the best passing variant's.
func (r *Report) check() {
	best := -1
	for i := range r.Variants {
		if t := r.totals(&r.Variants[i]); t.passes() && (best < 0 || t.timedOut < best) {
			best = t.timedOut
		}
	}
	r.Best = best
	t := r.totals(&r.Variants[0])
	r.DefaultsPass = t.passes() && float64(t.timedOut) <= float64(best)*(1+Tolerance)
	if r.Options.Sweep && !r.Options.Short {
		r.DefaultsPass = r.DefaultsPass && r.rateLimitChoice() == r.Defaults.RateLimitUtilization
	}
}

// variant returns the sweep's variant with param = value, nil if none.
func (r *Report) variant(param, value string) *Variant {
	for i := range r.Variants {
		if v := &r.Variants[i]; v.Param == param && v.Value == value {
			return v
		}
	}
	return nil
}

// scenarioSummary is a scenario's row under a policy.
func (r *Report) row(name, policy string) Summary {
	for _, row := range r.Rows {
		if row.Scenario.Name == name && row.Policy == policy {
			return row.Summary
		}
	}
	return Summary{}
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func usd(x float64) string { return fmt.Sprintf("$%.2f", x) }

// usdDelta is a premium difference: "+$2.39", "−$0.37", "unchanged".
func usdDelta(x float64) string {
	switch {
	case x >= 0.005:
		return "+" + usd(x)
	case x <= -0.005:
		return "−" + usd(-x)
	}
	return "unchanged"
}

// Markdown renders the report.
func (r *Report) Markdown() []byte {
	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	d := r.Defaults
	w("# Early warning: the replay report\n\n")
	w("<!-- Generated by `go run ./cmd/hopreplay`; do not edit. Regenerate after changing the detector, the scenarios or the defaults. -->\n\n")
	w("Early warning (`policy.early_warning`, DESIGN.md §12, [config](config.md#early-warning)) demotes a channel whose latency or error rate turns bad "+
		"before its breaker has to open, or whose stated rate-limit window is nearly full before its first 429: the channel moves to the end of its chains, it is never skipped. It is off by default, and every one of its defaults "+
		"comes from this report: what callers saw and what it cost, for %d incident shapes, with breakers alone and with early warning.\n\n", len(Scenarios))
	if r.Options.Short {
		w("**Short mode** (`-short`): 2 minutes of warm-up, scenarios at half length, no sweep. The committed report is the full run.\n\n")
	}
	w("## How the replay works\n\n")
	w("`go run ./cmd/hopreplay` drives a real gateway — the dispatch engine with its breakers, stream gate, header timeout and early warning — in front of two real fake providers (`cmd/fakeupstream`), through scripted incidents, and writes this file.\n\n")
	w("- **Virtual time.** The gateway's clock and the providers' clock are one virtual clock that moves only from one timer to the next, once everything the last one set off has come to a standstill; gateway and providers talk over an in-memory network. ")
	w("The %d runs below replay %s of traffic in about a minute of one core, and the same seed (%d) makes the same report byte for byte.\n", r.Runs, hours(r.Virtual), r.Options.Seed)
	w("- **Traffic.** Two streaming chat requests per second, steady, for 12 minutes of healthy warm-up (the baseline is 10 minutes), then the scenario. The tables count the requests from the start of the incident on.\n")
	w("- **Chain.** `cheap` ($1 / $4 per 1M tokens in / out), then `dear` ($3 / $12). Only `cheap` misbehaves. Healthy `cheap` sends headers after 0.3 s and its first token 0.2 s later; `dear` after 0.4 s and 0.25 s (each hop ±15 %%).\n")
	w("- **Gateway.** `profile: chat`: the rate breaker (25 %% over 60 s, at least 10 requests, 60 s open), `header_timeout` 8 s, stream gate 8 s with `on_timeout: failover`, `chain_deadline` 12 s.\n")
	w("- **Premium** is costed at a nominal 1,000 input and 250 output tokens per request: $%.3f for each request `dear` serves instead of `cheap`.\n", PremiumPerRequest)
	w("- **False alarm**: a demotion with no opening of the channel's breaker within its cooldown — neither in the run itself nor in the run of the same scenario with breakers alone (a demoted channel gets little traffic, so its own breaker may never see the failures that would have opened it).\n")
	w("- **Timed-out request**: a request one of whose hops waited out a timer (header timeout, gate timeout, stream stall, chain deadline). **Latency** is the time to the first byte of the answer (a stream's first token, or the error), every request from the incident on.\n\n")
	w("## Scenarios\n\n")
	for _, sc := range Scenarios {
		w("- **%s** — %s. %s\n", sc.Name, sc.Title, sc.Story)
	}
	w("\n## Results with the defaults\n\n")
	w("Early warning: `%s`.\n\n", d)
	w("| scenario | policy | failed hops | timed-out requests | client errors | p50 | p99 | served by `dear` | premium | demotions (false alarms) | false-alarm premium |\n")
	w("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, row := range r.Rows {
		s := row.Summary
		dem := "–"
		fa := "–"
		if row.Policy != "breakers only" {
			dem, fa = fmt.Sprintf("%d (%d)", s.Demotions, s.FalseAlarms), usd(s.FalseAlarmPremium)
		}
		w("| %s | %s | %d | %d | %d | %s | %s | %d | %s | %s | %s |\n", row.Scenario.Name, row.Policy, s.FailedHops, s.TimedOut,
			s.ClientErrors, secs(s.P50), secs(s.P99), s.OnDear, usd(s.Premium), dem, fa)
	}
	w("\n")
	r.findings(&b)
	if len(r.Variants) > 1 {
		r.sweepTable(&b)
	}
	return b.Bytes()
}

// findings states what the table says about the defaults.
func (r *Report) findings(b *bytes.Buffer) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("What the table says:\n\n")
	for _, n := range failureScenarios {
		off, on := r.row(n, "breakers only"), r.row(n, "early warning")
		w("- **%s**: %d timed-out requests instead of %d, %d client errors instead of %d, p99 %s instead of %s; premium %s.\n",
			n, on.TimedOut, off.TimedOut, on.ClientErrors, off.ClientErrors, secs(on.P99), secs(off.P99), usdDelta(on.Premium-off.Premium))
	}
	for _, n := range quietScenarios {
		on := r.row(n, "early warning")
		w("- **%s**: %d demotions, %d of them false alarms, costing %s.\n", n, on.Demotions, on.FalseAlarms, usd(on.FalseAlarmPremium))
	}
	off, on := r.row("rate-limit", "breakers only"), r.row("rate-limit", "early warning")
	w("- **rate-limit**: %d failed hops instead of %d, p99 %s instead of %s, %d demotions (%d false alarms); premium %s.\n",
		on.FailedHops, off.FailedHops, secs(on.P99), secs(off.P99), on.Demotions, on.FalseAlarms, usdDelta(on.Premium-off.Premium))
	r.windowFindings(b)
	w("\n")
}

func hours(d time.Duration) string {
	return fmt.Sprintf("%.1f hours", d.Hours())
}

func (r *Report) sweepTable(b *bytes.Buffer) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("## Choosing the defaults\n\n")
	w("Each row changes one parameter from the defaults (cooldown changes probation with it; the baseline stays 10 minutes: the warm-up is 12). ")
	w("Timed-out requests and p99 are summed over the failure scenarios (%s), false alarms and their premium over the quiet ones (%s); the last column is what early warning spent above breakers alone, every scenario.\n\n",
		strings.Join(failureScenarios, ", "), strings.Join(quietScenarios, ", "))
	w("| change | timed-out requests | p99 sum | false alarms | false-alarm premium | demotions | premium over breakers alone |\n")
	w("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	offTimed := 0
	var offP99 time.Duration
	for _, n := range failureScenarios {
		offTimed += r.row(n, "breakers only").TimedOut
		offP99 += r.row(n, "breakers only").P99
	}
	w("| breakers only | %d | %s | – | – | – | – |\n", offTimed, secs(offP99))
	for i := range r.Variants {
		v := &r.Variants[i]
		if v.Param == "ratelimit_utilization" {
			continue // its own table (windowTable)
		}
		name := "**defaults**"
		if v.Param != "" {
			name = fmt.Sprintf("%s = %s", v.Param, v.Value)
		}
		t := r.totals(v)
		fa := fmt.Sprint(t.falseAlarms)
		if !t.passes() {
			fa = "**" + fa + "**"
		}
		w("| %s | %d | %s | %s | %s | %d | %s |\n", name, t.timedOut, secs(t.p99), fa, usd(t.falsePremium), t.demotions, usd(t.premium))
	}
	w("\nThe bar: **no false alarm on the quiet scenarios** (an ordinary day and a blip must cost nothing), and timed-out requests on the failure scenarios within %.0f %% of the best configuration that clears the first part (%d here: the replay runs one seed, and a few requests either way are noise). ",
		Tolerance*100, r.Best)
	if r.DefaultsPass {
		w("The defaults clear it. Among the configurations that do, they were chosen as follows.\n\n")
	} else {
		w("**The defaults do not clear it: change them (earlywarning.Default*, config.DefaultEarlyWarningErrorFraction) and regenerate.**\n\n")
	}
	r.reasoning(b)
}
