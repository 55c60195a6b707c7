package admin

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/breaker"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/earlywarning"
	"github.com/hopgate/hopgate/telemetry"
)

// failoversShown bounds the failover table of the on-call page (the JSON
// endpoint has the whole log).
const failoversShown = 50

// The error-rate chart's geometry, in SVG viewBox units.
const (
	chartW = 300
	chartH = 60
)

// oncallView is the data of /admin. Its sections follow the Grafana
// failover board (dashboards/failover.go) so the two read as one thing:
// the breaker row, then error rates, then failovers; chains come last.
type oncallView struct {
	Now       time.Time
	Region    string
	Rows      []tileRow
	Failovers []failoverRow
	Chains    []chainRow
	Ring      telemetry.TraceRingStats
	TraceURL  bool
	Threshold string // the 25 % line, as text
	Overload  overloadTile
	Windows   []windowRow // rate-limit windows per channel (windows.go)
}

// overloadTile is the overload protection at a glance (DESIGN.md §13): the
// buffer budget in use and the admission counts against their bounds.
type overloadTile struct {
	State                   string // closed (green) | half-open (yellow, ≥ 70 %) | open (red: shedding)
	Budget                  string // "12 % of 256 MiB"
	InFlight, Streams       int64
	MaxInFlight, MaxStreams int64
	Shedding                string // the bound a new request would be shed at, "" when none
}

// tileRow is one region's breaker row ("Breakers — eu-west-1").
type tileRow struct {
	Region string
	Tiles  []tile
}

// tile is one channel's breaker and its error-rate chart.
type tile struct {
	Channel       string
	ChannelRegion string
	Mode          string
	// State is the tile's colour: closed | half-open | open, or demoted
	// (blue) when the breaker is closed and early warning moved the
	// channel to the end of its chains.
	State    string
	ReopenAt string // open: "12:01:05 UTC"
	ReopenIn string // open: "in 42 s"
	// Early warning: when a demotion ends (or probation, with Probation
	// set) and its evidence.
	DemotedUntil, DemotedIn string
	Probation               bool
	Warning                 string
	Detail                  string // window counters, e.g. "2/3 failures in 5m"
	Rate                    string // rolling 60 s error rate now, "12.5 %" or "no hops"
	Hops                    int64
	Over                    bool // above the 25 % line
	Chart                   chart
}

// chart is a channel's rolling 60 s error rate over the last 15 minutes.
type chart struct {
	Path       string // SVG path of the rate where there was traffic
	ThresholdY int    // y of the 25 % line
	Points     int
}

type failoverRow struct {
	telemetry.FailoverEntry
	Arrows   string // the path with drawn arrows
	InRing   bool   // its trace view exists
	TraceURL string // the operator's trace UI, when configured
}

type chainRow struct {
	Model, Profile, HeaderTimeout, ChainDeadline, StreamIdle string
	Fallbacks                                                string
	Entries                                                  []entryCell
	// Realtime: the model serves realtime sessions; Sessions are open now.
	Realtime bool
	Sessions int64
}

type entryCell struct {
	Channel, Region, UpstreamModel, State string
	PriceIn, PriceOut                     string
	Prefill                               bool
}

// offOr renders a duration that may be off (zero).
func offOr(d time.Duration) string {
	if d <= 0 {
		return "off"
	}
	return short(d)
}

// short renders a config duration as the config file writes it: 240s,
// 5m, 1h30m, 1.5s (not 4m0s).
func short(d time.Duration) string {
	switch {
	case d%time.Second == 0 && d < 10*time.Minute:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0 && d < time.Hour:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.String()
}

func price(p float64) string { return "$" + strconv.FormatFloat(p, 'f', -1, 64) }

func pctText(r float64) string { return strconv.FormatFloat(r*100, 'f', 1, 64) + " %" }

func (s *Server) oncall() oncallView {
	cfg := s.Config()
	now := s.Engine.Clock().Now()
	v := oncallView{Now: now.UTC(), Region: cfg.Region, TraceURL: cfg.Telemetry.TraceURL != "",
		Ring: s.Telemetry.Traces.Stats(), Threshold: pctText(telemetry.ErrorRateThreshold)}

	v.Overload = s.overloadTile()
	row := tileRow{Region: orDash(cfg.Region)}
	for _, ch := range cfg.Channels {
		row.Tiles = append(row.Tiles, s.tile(ch, now))
	}
	v.Rows = []tileRow{row}
	v.Windows = s.windows(cfg, now)

	for i, f := range s.Telemetry.Failovers.List() {
		if i == failoversShown {
			break
		}
		r := failoverRow{FailoverEntry: f, Arrows: arrows(f.Path),
			TraceURL: telemetry.TraceLink(cfg.Telemetry.TraceURL, f.TraceID)}
		if id, err := parseTraceID(f.TraceID); err == nil {
			r.InRing = s.Telemetry.Traces.Get(id) != nil
		}
		v.Failovers = append(v.Failovers, r)
	}

	sessions := s.Engine.Sessions().Open()
	for _, m := range cfg.Models {
		r := chainRow{Model: m.Name, Profile: m.Policy.Profile, HeaderTimeout: offOr(m.Policy.HeaderTimeout),
			ChainDeadline: offOr(m.Policy.ChainDeadline), StreamIdle: offOr(m.Policy.StreamIdleTimeout),
			Fallbacks: strings.Join(m.FallbackModels, ", ")}
		r.Realtime, r.Sessions = slices.Contains(m.Operations, config.OpRealtime), sessions[m.Name]
		for _, e := range m.Chain {
			br := s.Engine.Breakers().Get(e.Channel.ID, dispatch.BreakerPolicy(e.Channel.Breaker))
			r.Entries = append(r.Entries, entryCell{Channel: e.Channel.ID, Region: e.Channel.Region,
				UpstreamModel: e.UpstreamModel, State: tileState(br.State(), s.Engine.Warning(e.Channel)),
				PriceIn: price(e.Price.Input), PriceOut: price(e.Price.Output), Prefill: e.Prefill})
		}
		v.Chains = append(v.Chains, r)
	}
	return v
}

// tileState is a channel's colour: its breaker's state, or demoted when
// the breaker is closed and early warning demoted the channel (a fourth,
// breaker-like state, blue on the page and on the Grafana board).
func tileState(br breaker.State, d *earlywarning.Detector) string {
	if br == breaker.Closed && d != nil && d.State() == earlywarning.Demoted {
		return earlywarning.Demoted.String()
	}
	return br.String()
}

func (s *Server) tile(ch *config.Channel, now time.Time) tile {
	br := s.Engine.Breakers().Get(ch.ID, dispatch.BreakerPolicy(ch.Breaker))
	snap := br.Snapshot()
	t := tile{Channel: ch.ID, ChannelRegion: orDash(ch.Region), Mode: ch.Breaker.Mode, State: snap.State.String()}
	if snap.State == breaker.Open && !snap.ReopenAt.IsZero() {
		t.ReopenAt = snap.ReopenAt.UTC().Format("15:04:05 UTC")
		t.ReopenIn = "in " + short(max(snap.ReopenAt.Sub(now).Round(time.Second), 0))
	}
	if d := s.Engine.Warning(ch); d != nil {
		ew := d.Snapshot()
		switch {
		case ew.State == earlywarning.Demoted || ew.State == earlywarning.Probation:
			t.State = tileState(snap.State, d)
			t.Probation = ew.State == earlywarning.Probation
			t.DemotedUntil = ew.Until.UTC().Format("15:04:05 UTC")
			t.DemotedIn = "in " + short(max(ew.Until.Sub(now).Round(time.Second), 0))
			t.Warning = ew.Reason + ": " + ew.Detail
		case ew.Suspect:
			t.Warning = "early warning: " + ew.Reason + " (watching): " + ew.Detail
		}
	}
	switch {
	case snap.State == breaker.HalfOpen && snap.TrialInFlight:
		t.Detail = "trial request in flight"
	case snap.State == breaker.HalfOpen:
		t.Detail = "next request is the trial"
	case ch.Breaker.Mode == config.BreakerRate:
		t.Detail = fmt.Sprintf("%d errors / %d requests in %s", snap.Errors, snap.Requests, short(ch.Breaker.Window))
	default:
		t.Detail = fmt.Sprintf("%d/%d failures in %s", snap.Failures, ch.Breaker.Failures, short(ch.Breaker.Window))
	}
	series := s.Telemetry.ErrorRates.Series(ch.ID)
	if n := len(series); n > 0 {
		cur := series[n-1]
		t.Hops, t.Over = cur.Hops, cur.Hops > 0 && cur.Rate() > telemetry.ErrorRateThreshold
		t.Rate = "no hops"
		if cur.Hops > 0 {
			t.Rate = pctText(cur.Rate())
		}
		t.Chart = drawChart(series)
	}
	return t
}

// drawChart renders the rate as an SVG path, 0 % at the bottom and 100 %
// at the top (the board's axis), leaving gaps where there were no hops.
func drawChart(series []telemetry.RatePoint) chart {
	c := chart{ThresholdY: chartH - int(telemetry.ErrorRateThreshold*chartH), Points: len(series)}
	var b strings.Builder
	pen := false
	for i, p := range series {
		if p.Hops == 0 {
			pen = false
			continue
		}
		x := 0.0
		if len(series) > 1 {
			x = float64(i) * chartW / float64(len(series)-1)
		}
		y := chartH - p.Rate()*chartH
		cmd := "L"
		if !pen {
			cmd = "M"
		}
		if !pen && (i == len(series)-1 || series[i+1].Hops == 0) {
			// A lone point (traffic in one step only, or only in the
			// current one): a short flat stroke ending at it, so it shows.
			fmt.Fprintf(&b, "M%.1f %.1f ", max(x-4, 0), y)
			cmd = "L"
		}
		fmt.Fprintf(&b, "%s%.1f %.1f ", cmd, x, y)
		pen = true
	}
	c.Path = strings.TrimSpace(b.String())
	return c
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// overloadTile reads the budget and admission now.
func (s *Server) overloadTile() overloadTile {
	b := s.Engine.Budget()
	t := overloadTile{State: "closed", InFlight: s.Admission.InFlight(), Streams: s.Admission.Streams()}
	t.MaxInFlight, t.MaxStreams = s.Admission.Limits()
	share := 0.0
	if l := b.Limit(); l > 0 {
		share = float64(b.Used()) / float64(l)
		t.Budget = pctText(share) + " of " + mib(l)
	} else {
		t.Budget = "unbounded"
	}
	if reason, over := s.Admission.Overloaded(); over {
		t.Shedding = reason
	}
	switch {
	case t.Shedding != "" || share >= telemetry.BudgetFullShare:
		t.State = "open"
	case share >= telemetry.BudgetWarnShare:
		t.State = "half-open"
	}
	return t
}

// mib renders a byte count in MiB.
func mib(n int64) string { return strconv.FormatInt(n>>20, 10) + " MiB" }
