package admin

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/internal/pagekit"
	"github.com/hopgate/hopgate/telemetry"
)

// tracesShown bounds the trace list page.
const tracesShown = 200

func arrows(path string) string { return pagekit.Arrows(path) }

// parseTraceID accepts the 32-hex form of X-Request-Id (any case).
func parseTraceID(s string) (trace.TraceID, error) {
	id, err := trace.TraceIDFromHex(strings.ToLower(s))
	if err != nil || !id.IsValid() {
		return trace.TraceID{}, errors.New("not a trace id: 32 hex characters, not all zero")
	}
	return id, nil
}

// traceListView is the data of /admin/traces.
type traceListView struct {
	Now                     time.Time
	Filter                  telemetry.TraceFilter
	Traces                  []traceSummary
	Ring                    telemetry.TraceRingStats
	Models, Channels        []string // filter choices: what the ring holds and the config names
	Outcomes                []string
	Truncated, TraceURLConf bool
}

type traceSummary struct {
	ID, Model, Outcome, Arrows, Start, Duration, TraceURL string
	Spans                                                 int
	Errors                                                int
}

// traceView is the data of /admin/traces/{id}.
type traceView struct {
	Now                       time.Time
	ID                        string
	TraceURL                  string
	Model, Outcome, Arrows    string
	Start, Duration           string
	Rows                      []spanRow
	Scale                     []tick
	Gate                      []string // every gate decision, in order
	NotFound, Invalid, Exists bool
	Ring                      telemetry.TraceRingStats
}

// spanRow is one waterfall row.
type spanRow struct {
	ID            string // span id, for the <details> id
	Name, Kind    string
	Depth         int
	Indent        int // pixels
	Offset, Width float64
	Start         string // offset from the trace start, "+12 ms"
	Duration      string
	Error         bool
	StatusMessage string
	Gate          string // hopgate.gate.decision
	GateClass     string // commit | discard | timeout
	Badges        []string
	Attrs         []telemetry.Attr
	Events        []eventRow
	Class         string // server | dispatch | skip | hop | await | gate | degraded | other
}

type eventRow struct {
	Offset, Name string
	Attrs        []telemetry.Attr
}

type tick struct {
	X     float64
	Label string
}

// waterfall lays out rec's spans depth-first from the root, children in
// start order, with offsets and widths in per mille of the trace.
func waterfall(rec *telemetry.TraceRecord) ([]spanRow, time.Time, time.Duration) {
	spans := rec.Spans
	if len(spans) == 0 {
		return nil, time.Time{}, 0
	}
	start, end := spans[0].Start, spans[0].End
	byID := make(map[trace.SpanID]int, len(spans))
	for i, s := range spans {
		byID[s.SpanID] = i
		if s.Start.Before(start) {
			start = s.Start
		}
		if s.End.After(end) {
			end = s.End
		}
	}
	total := end.Sub(start)
	children := make(map[int][]int)
	var roots []int
	for i, s := range spans {
		if p, ok := byID[s.ParentID]; ok && s.ParentID.IsValid() && p != i {
			children[p] = append(children[p], i)
		} else {
			roots = append(roots, i)
		}
	}
	byStart := func(ix []int) {
		sort.SliceStable(ix, func(a, b int) bool { return spans[ix[a]].Start.Before(spans[ix[b]].Start) })
	}
	byStart(roots)
	rows := make([]spanRow, 0, len(spans))
	seen := make([]bool, len(spans))
	var walk func(i, depth int)
	walk = func(i, depth int) {
		if seen[i] {
			return
		}
		seen[i] = true
		rows = append(rows, spanRowOf(&spans[i], depth, start, total))
		kids := children[i]
		byStart(kids)
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return rows, start, total
}

func spanRowOf(s *telemetry.SpanRecord, depth int, start time.Time, total time.Duration) spanRow {
	r := spanRow{ID: s.SpanID.String(), Name: s.Name, Kind: s.Kind, Depth: depth, Indent: depth * 16,
		Start: "+" + fmtDur(s.Start.Sub(start)), Duration: fmtDur(s.Duration()),
		Error: s.Error, StatusMessage: s.StatusMessage, Attrs: s.Attrs}
	if total > 0 {
		r.Offset = float64(s.Start.Sub(start)) * 1000 / float64(total)
		r.Width = float64(s.Duration()) * 1000 / float64(total)
	} else {
		r.Width = 1000
	}
	r.Width = max(r.Width, 3) // an instant still shows
	r.Offset = min(r.Offset, 1000-r.Width)
	switch {
	case s.Kind == "server":
		r.Class = "server"
	case strings.HasPrefix(s.Name, telemetry.SpanDispatch):
		r.Class = "dispatch"
	case strings.HasPrefix(s.Name, telemetry.SpanBreakerSkip):
		r.Class = "skip"
	case s.Name == telemetry.SpanAwaitHeaders:
		r.Class = "await"
	case s.Name == telemetry.SpanStreamGate:
		r.Class = "gate"
	case s.Name == telemetry.SpanDegradedReply:
		r.Class = "degraded"
	case s.Kind == "client":
		r.Class = "hop"
	default:
		r.Class = "other"
	}
	if d := s.Attr(telemetry.AttrGateDecision); d != "" {
		r.Gate = d
		switch d {
		case telemetry.GateCommitContent:
			r.GateClass = "commit"
		case telemetry.GateCommitTimeout, telemetry.GateFailoverTimeout:
			r.GateClass = "timeout"
		default:
			r.GateClass = "discard"
		}
	}
	for _, k := range []string{telemetry.AttrChannel, "http.response.status_code", telemetry.AttrErrorType,
		telemetry.AttrHopOutcome, telemetry.AttrBreakerState, telemetry.AttrOutcome, telemetry.AttrDegradedReason} {
		if v := s.Attr(k); v != "" && !slices.Contains(r.Badges, v) {
			r.Badges = append(r.Badges, shortKey(k)+"="+v)
		}
	}
	for _, e := range s.Events {
		r.Events = append(r.Events, eventRow{Offset: "+" + fmtDur(e.Time.Sub(start)), Name: e.Name, Attrs: e.Attrs})
	}
	return r
}

// shortKey drops the namespace of a badge key: "hopgate.hop.outcome" →
// "outcome" (the full key is in the attribute table).
func shortKey(k string) string {
	switch k {
	case "http.response.status_code":
		return "status"
	case telemetry.AttrHopOutcome, telemetry.AttrOutcome:
		return "outcome"
	case telemetry.AttrBreakerState:
		return "breaker"
	case telemetry.AttrDegradedReason:
		return "reason"
	}
	if i := strings.LastIndexByte(k, '.'); i >= 0 {
		return k[i+1:]
	}
	return k
}

// fmtDur renders durations at a useful precision: 850µs, 12.3ms, 1.204s.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) + "s"
}

// scale returns ticks for the waterfall's time axis.
func scale(total time.Duration) []tick {
	if total <= 0 {
		return nil
	}
	ticks := make([]tick, 0, 5)
	for i := range 5 {
		ticks = append(ticks, tick{X: float64(i) * 250, Label: fmtDur(total * time.Duration(i) / 4)})
	}
	return ticks
}

func summarize(rec *telemetry.TraceRecord, traceURL string) traceSummary {
	s := traceSummary{ID: rec.TraceID.String(), Model: rec.Model, Outcome: rec.Outcome, Arrows: arrows(rec.Path),
		Start: rec.Start.UTC().Format("15:04:05.000"), Duration: fmtDur(rec.End.Sub(rec.Start)),
		Spans: len(rec.Spans), TraceURL: telemetry.TraceLink(traceURL, rec.TraceID.String())}
	for _, sp := range rec.Spans {
		if sp.Error {
			s.Errors++
		}
	}
	return s
}

// outcomes lists the request outcomes a trace in the ring can have.
var outcomes = []string{telemetry.OutcomeFailoverOK, telemetry.OutcomeExhausted, telemetry.OutcomeDeadline,
	telemetry.OutcomeDegraded, telemetry.OutcomeInterrupted, telemetry.OutcomeFinalError,
	telemetry.OutcomeCanceled, telemetry.OutcomeOK}

func (s *Server) traceList(f telemetry.TraceFilter) traceListView {
	cfg := s.Config()
	f.Limit = 0
	all := s.Telemetry.Traces.List(telemetry.TraceFilter{})
	v := traceListView{Now: s.Engine.Clock().Now().UTC(), Filter: f, Ring: s.Telemetry.Traces.Stats(),
		Outcomes: outcomes, TraceURLConf: cfg.Telemetry.TraceURL != ""}
	for _, m := range cfg.Models {
		v.Models = append(v.Models, m.Name)
	}
	for _, ch := range cfg.Channels {
		v.Channels = append(v.Channels, ch.ID)
	}
	for _, rec := range all {
		if !slices.Contains(v.Models, rec.Model) && rec.Model != "" {
			v.Models = append(v.Models, rec.Model) // a model removed by a reload
		}
		if !f.Match(rec) {
			continue
		}
		if len(v.Traces) == tracesShown {
			v.Truncated = true
			break
		}
		v.Traces = append(v.Traces, summarize(rec, cfg.Telemetry.TraceURL))
	}
	return v
}

func (s *Server) traceView(raw string) traceView {
	cfg := s.Config()
	v := traceView{Now: s.Engine.Clock().Now().UTC(), ID: raw, Ring: s.Telemetry.Traces.Stats()}
	id, err := parseTraceID(raw)
	if err != nil {
		v.Invalid, v.NotFound = true, true
		return v
	}
	v.ID = id.String()
	v.TraceURL = telemetry.TraceLink(cfg.Telemetry.TraceURL, v.ID)
	rec := s.Telemetry.Traces.Get(id)
	if rec == nil {
		v.NotFound = true
		return v
	}
	rows, start, total := waterfall(rec)
	v.Exists = true
	v.Model, v.Outcome, v.Arrows = rec.Model, rec.Outcome, arrows(rec.Path)
	v.Start = start.UTC().Format("2006-01-02 15:04:05.000 UTC")
	v.Duration = fmtDur(total)
	v.Rows, v.Scale = rows, scale(total)
	for _, r := range rows {
		if r.Gate != "" {
			v.Gate = append(v.Gate, r.Gate)
		}
	}
	return v
}

// describeRing is the ring's bound in words, for the pages.
func describeRing(st telemetry.TraceRingStats) string {
	return fmt.Sprintf("%d traces, %.1f of %.0f MiB (last %d kept)", st.Traces,
		float64(st.Bytes)/(1<<20), float64(st.MaxBytes)/(1<<20), st.MaxTraces)
}
