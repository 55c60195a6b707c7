package dashboards

import (
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/statetimeline"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"

	"github.com/hopgate/hopgate/telemetry"
)

// Identity of the failover board. The uid is what links, bookmarks and
// provisioning point at: never change it.
const (
	FailoverUID   = "hopgate-failover"
	FailoverTitle = "hopgate — failover"
)

// Template variable names. Queries refer to them as $name.
const (
	VarDatasource = "datasource"
	VarTracing    = "tracing_ds"
	VarRegion     = "region"
	VarChannel    = "channel"
	VarModel      = "model"
)

// TraceDatasourceType is the plugin id the tracing_ds variable lists.
// Grafana's datasource variable matches exactly one plugin id (its regex
// filters instance names, not types), so one board cannot list Jaeger and
// Tempo at once; Jaeger is what deploy/ runs. Tempo users switch the
// variable's type once (docs/dashboards.md).
const TraceDatasourceType = "jaeger"

// ErrorRateThreshold is the `rate` breaker's default trip point (DESIGN.md
// §2): the error-rate panel draws it so on-call sees how close a channel is.
// The on-call page draws the same line.
const ErrorRateThreshold = telemetry.ErrorRateThreshold

// Breaker states as exported by hopgate_breaker_state (DESIGN.md §5), and
// the fourth, breaker-like state of early warning (DESIGN.md §12): 3 is
// not a value of the gauge but of the tiles' query (channelState), for a
// channel whose breaker is closed and that early warning demoted.
var breakerStates = []struct {
	value       string
	text, color string
}{
	{"0", "closed", "green"},
	{"1", "half-open", "yellow"},
	{"2", "open", "red"},
	{demotedValue, "demoted", "blue"},
}

// demotedValue is the demoted state's value in the tiles' query.
const demotedValue = "3"

// channelState renders the state the tiles and the timeline show, per agg
// ("max" or "max by (region, channel) "): the breaker's when it is not
// closed, else 3 when early warning demoted the channel, else closed. The
// worst gateway instance wins, as for the breaker alone: an open breaker
// anywhere reads open, a demotion anywhere (of a closed channel) demoted.
func channelState(agg string) string {
	br := fmt.Sprintf("%s(%s{%s})", agg, telemetry.MetricBreakerState, mRegionChannel)
	dem := fmt.Sprintf("%s(%s{%s})", agg, telemetry.MetricEarlyWarningDemoted, mRegionChannel)
	return fmt.Sprintf("%s > 0 or (%s > 0) * %s or %s", br, dem, demotedValue, br)
}

// Panel ids are fixed so links to a panel (viewPanel=N) survive regeneration.
const (
	idRowBreakers     = 1
	idBreakerTile     = 2
	idRowErrors       = 3
	idErrorRate       = 4
	idBreakerTimeline = 5
	idRowFailover     = 6
	idFailovers       = 7
	idGateDecisions   = 8
	idHeaderTimeouts  = 9
	idDeadlines       = 10
	idRowLatency      = 11
	idHopLatency      = 12
	idRequests        = 13
	idCost            = 14
	idEarlyRequests   = 15
	idEarlyPremium    = 16
	idRowOverload     = 17
	idBudget          = 18
	idShed            = 19
	idRowWindows      = 20
	idWindowTile      = 21
)

// rateWindow is the window of the per-second rates on trend panels. The
// error-rate panel uses a fixed 1m instead: it must match the breaker's
// rolling 60 s window, whatever the zoom level.
const rateWindow = "$__rate_interval"

var (
	promDS  = dsRef("prometheus", "${"+VarDatasource+"}")
	traceDS = "${" + VarTracing + "}"
)

func dsRef(typ, uid string) common.DataSourceRef {
	return common.DataSourceRef{Type: &typ, Uid: &uid}
}

// match renders the label matchers every query shares; variables use =~
// because they are multi-value with an "All" of ".*".
func match(labels ...string) string {
	out := ""
	for i, l := range labels {
		if i > 0 {
			out += ","
		}
		out += fmt.Sprintf(`%s=~"$%s"`, l, l)
	}
	return out
}

var (
	mRegion        = match(telemetry.LabelRegion)
	mRegionChannel = match(telemetry.LabelRegion, telemetry.LabelChannel)
	mRegionModel   = match(telemetry.LabelRegion, telemetry.LabelModel)
	mAll           = match(telemetry.LabelRegion, telemetry.LabelChannel, telemetry.LabelModel)
)

// sumRate renders sum by (by) (rate(metric{matchers}[window])).
func sumRate(by, metric, matchers, window string) string {
	return fmt.Sprintf("sum by (%s) (rate(%s{%s}[%s]))", by, metric, matchers, window)
}

func query(refID, expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().
		Datasource(promDS).
		RefId(refID).
		Expr(expr).
		LegendFormat(legend).
		Range()
}

func grid(x, y, w, h uint32) dashboard.GridPos {
	return dashboard.GridPos{X: x, Y: y, W: w, H: h}
}

func breakerMappings() []dashboard.ValueMapping {
	opts := map[string]dashboard.ValueMappingResult{}
	for i, s := range breakerStates {
		idx := int32(i)
		opts[s.value] = dashboard.ValueMappingResult{Text: cog.ToPtr(s.text), Color: cog.ToPtr(s.color), Index: &idx}
	}
	return []dashboard.ValueMapping{{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText, Options: opts}}}
}

// breakerThresholds colours a state even if a mapping is lost in an edit.
func breakerThresholds() *dashboard.ThresholdsConfigBuilder {
	return dashboard.NewThresholdsConfigBuilder().
		Mode(dashboard.ThresholdsModeAbsolute).
		Steps([]dashboard.Threshold{
			{Value: nil, Color: "green"},
			{Value: cog.ToPtr(1.0), Color: "yellow"},
			{Value: cog.ToPtr(2.0), Color: "red"},
			{Value: cog.ToPtr(3.0), Color: "blue"},
		})
}

// Options change what the generated board links to. The zero value is
// the committed board (generated/).
type Options struct {
	// TraceURL is hopgate's telemetry.trace_url: a template with
	// {trace_id} for the operator's own trace UI. When set, an exemplar's
	// first link opens the trace there, as every trace id on hopgate's
	// admin pages does; the Explore link stays second.
	TraceURL string
}

// traceLinks turns an exemplar's trace_id into a link to the trace in the
// tracing_ds data source (and first, with o.TraceURL, in the operator's
// trace UI). Grafana applies field links to the exemplar frame, so
// matching the field by name keeps the link off ordinary series points.
func traceLinks(o Options) dashboard.DynamicConfigValue {
	links := []map[string]any{{
		"title":       "Open trace in ${" + VarTracing + "}",
		"url":         exploreURL(`"query":"${__value.raw}"`),
		"targetBlank": true,
	}}
	if o.TraceURL != "" {
		links = append([]map[string]any{{
			"title":       "Open trace (telemetry.trace_url)",
			"url":         telemetry.TraceLink(o.TraceURL, "${__value.raw}"),
			"targetBlank": true,
		}}, links...)
	}
	return dashboard.DynamicConfigValue{Id: "links", Value: links}
}

// exploreURL opens Explore on the trace data source; extra is spliced into
// the query object (e.g. the trace id).
func exploreURL(extra string) string {
	q := fmt.Sprintf(`{"refId":"A","datasource":{"uid":"%s"}`, traceDS)
	if extra != "" {
		q += "," + extra
	}
	q += "}"
	return fmt.Sprintf(`/explore?schemaVersion=1&panes={"traces":{"datasource":"%s","queries":[%s],"range":{"from":"${__from}","to":"${__to}"}}}`, traceDS, q)
}

func traceSearchLink() cog.Builder[dashboard.DashboardLink] {
	return dashboard.NewDashboardLinkBuilder("Search traces in ${" + VarTracing + "}").
		Type(dashboard.DashboardLinkTypeLink).
		Url(exploreURL("")).
		TargetBlank(true)
}

func variables() []cog.Builder[dashboard.VariableModel] {
	labelVar := func(name, label, def, desc string) *dashboard.QueryVariableBuilder {
		return dashboard.NewQueryVariableBuilder(name).
			Label(label).
			Description(desc).
			Datasource(promDS).
			Query(dashboard.StringOrMap{String: cog.ToPtr(def)}).
			Definition(def).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Sort(dashboard.VariableSortAlphabeticalAsc).
			Multi(true).
			IncludeAll(true).
			// ".*" rather than a long (a|b|…) alternation: cheaper, and it
			// still matches series that lack the label.
			AllValue(".*").
			// Start on All: an incident view should not hide a region.
			Current(dashboard.VariableOption{
				Text:  dashboard.StringOrArrayOfString{ArrayOfString: []string{"All"}},
				Value: dashboard.StringOrArrayOfString{ArrayOfString: []string{"$__all"}},
			})
	}
	return []cog.Builder[dashboard.VariableModel]{
		dashboard.NewDatasourceVariableBuilder(VarDatasource).
			Label("Prometheus").
			Description("Prometheus that scrapes the hopgate admin /metrics endpoints.").
			Type("prometheus"),
		dashboard.NewDatasourceVariableBuilder(VarTracing).
			Label("Traces").
			Description("Trace backend (Jaeger; switch the type to tempo for Tempo) that exemplar and trace-search links open.").
			Type(TraceDatasourceType),
		labelVar(VarRegion, "Region",
			fmt.Sprintf("label_values(%s, %s)", telemetry.MetricBreakerState, telemetry.LabelRegion),
			"Gateway region (where hopgate runs, not where the channel lives). One breaker row per selected region."),
		labelVar(VarChannel, "Channel",
			fmt.Sprintf("label_values(%s{%s}, %s)", telemetry.MetricBreakerState, mRegion, telemetry.LabelChannel),
			"Upstream channels known to the gateways of the selected regions. One breaker tile per channel."),
		labelVar(VarModel, "Model",
			fmt.Sprintf("label_values(%s, %s)", telemetry.MetricRequests, telemetry.LabelModel),
			"Public model names clients ask for."),
	}
}

func breakerRow() *dashboard.RowBuilder {
	return dashboard.NewRowBuilder("Breakers — $" + VarRegion).
		Id(idRowBreakers).
		GridPos(grid(0, 0, 24, 1)).
		Repeat(VarRegion)
}

func breakerTile() *stat.PanelBuilder {
	expr := channelState("max")
	return tileLook(stat.NewPanelBuilder().
		Id(idBreakerTile).
		Title("$" + VarChannel).
		Description("L1 breaker of this channel in this region, worst gateway instance (max). " +
			"Green closed: traffic flows. Yellow half-open: one trial request decides. " +
			"Red open: the channel is skipped for the cooldown (60 s by default) and its traffic fails over to the next chain entry. " +
			"Blue demoted (early warning, opt-in): the breaker is closed, but the channel's latency or error rate turned bad against its own baseline, so it is tried last in its chains until its cooldown ends; it still serves when the others fail. " +
			"Red everywhere for one channel = provider outage; red for many channels in one region = look at that region's egress. " +
			"n/a: this region's gateways do not use the channel.").
		GridPos(grid(0, 1, 4, 4)).
		Repeat(VarChannel).
		RepeatDirection(dashboard.PanelRepeatDirectionH).
		MaxPerRow(6).
		Datasource(promDS).
		WithTarget(prometheus.NewDataqueryBuilder().
			Datasource(promDS).
			RefId("A").
			Expr(expr).
			Instant()).
		Mappings(breakerMappings()).
		Thresholds(breakerThresholds()).
		TextMode(common.BigValueTextModeValue))
}

// tileLook is how every per-channel tile looks: the background coloured
// by its thresholds, the last value, n/a without data.
func tileLook(b *stat.PanelBuilder) *stat.PanelBuilder {
	return b.ColorScheme(dashboard.NewFieldColorBuilder().Mode(dashboard.FieldColorModeIdThresholds)).
		NoValue("n/a").
		ColorMode(common.BigValueColorModeBackground).
		GraphMode(common.BigValueGraphModeNone).
		JustifyMode(common.BigValueJustifyModeCenter).
		Orientation(common.VizOrientationAuto).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Values(false))
}

func errorRatePanel() *timeseries.PanelBuilder {
	// Same arithmetic as the breaker (dispatch.recordBreaker): retryable
	// failures (header timeouts included) over hops that counted. A final
	// error (the client's 400, a content filter) is the channel answering
	// correctly and a cancellation is the client leaving; the breaker
	// excludes both from numerator and denominator, so the panel does too,
	// or the 25 % line would not be where the breaker trips.
	excluded := telemetry.HopFinal + "|" + telemetry.HopCanceled
	failed := fmt.Sprintf(`%s{%s,%s!~"%s|%s"}`, telemetry.MetricHops, mRegionChannel, telemetry.LabelOutcome, telemetry.HopOK, excluded)
	all := fmt.Sprintf(`%s{%s,%s!~"%s"}`, telemetry.MetricHops, mRegionChannel, telemetry.LabelOutcome, excluded)
	// A channel that never failed has no failed-outcome series at all, so a
	// plain ratio would draw nothing for it; "or 0 * total" makes a healthy
	// channel with traffic read 0 %, which is the reassuring answer on-call
	// needs (checked by the end-to-end test against a real Prometheus).
	expr := fmt.Sprintf("(sum by (%[1]s) (rate(%[2]s[1m])) or 0 * sum by (%[1]s) (rate(%[3]s[1m]))) / sum by (%[1]s) (rate(%[3]s[1m]))", telemetry.LabelChannel, failed, all)
	return timeseries.NewPanelBuilder().
		Id(idErrorRate).
		Title("Error rate per channel (rolling 60 s)").
		Description("Share of hops to each channel that failed with a retryable error over the last 60 s " +
			"(5xx, 429, timeouts, resets, errors inside a 200), out of the hops the breaker counts: final client errors (400, content filter) and cancellations are left out of both sides, as the breaker does. " +
			"The red line is the rate breaker's 25 % trip point: a channel above it is about to open (rate mode) or already has. " +
			"A channel climbing while others stay flat is a provider problem; all channels climbing together points at hopgate or the network.").
		GridPos(grid(0, 6, 24, 8)).
		Datasource(promDS).
		WithTarget(query("A", expr, "{{"+telemetry.LabelChannel+"}}")).
		Unit("percentunit").
		Min(0).
		Max(1).
		Thresholds(dashboard.NewThresholdsConfigBuilder().
			Mode(dashboard.ThresholdsModeAbsolute).
			Steps([]dashboard.Threshold{
				{Value: nil, Color: "green"},
				{Value: cog.ToPtr(ErrorRateThreshold), Color: "red"},
			})).
		ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeLine)).
		Legend(legendTable()).
		Tooltip(tooltipAll())
}

func breakerTimeline() *statetimeline.PanelBuilder {
	expr := channelState(fmt.Sprintf("max by (%s, %s) ", telemetry.LabelRegion, telemetry.LabelChannel))
	return statetimeline.NewPanelBuilder().
		Id(idBreakerTimeline).
		Title("Breaker state over time").
		Description("History of every breaker (region/channel), worst instance. " +
			"Answers: when did the channel open, how long did it stay open, is it flapping (open → half-open → open every cooldown)? " +
			"Blue bands are early-warning demotions: did one come before the channel opened (a warning that paid off), or alone (a false alarm, whose premium the panels below show)? " +
			"Line it up with the error-rate panel above: the opening should follow the rate crossing 25 % (rate mode) or the third failure (count mode).").
		GridPos(grid(0, 14, 24, 7)).
		Datasource(promDS).
		WithTarget(query("A", expr, "{{"+telemetry.LabelRegion+"}}/{{"+telemetry.LabelChannel+"}}")).
		Mappings(breakerMappings()).
		Thresholds(breakerThresholds()).
		ColorScheme(dashboard.NewFieldColorBuilder().Mode(dashboard.FieldColorModeIdThresholds)).
		ShowValue(common.VisibilityModeNever).
		MergeValues(true).
		RowHeight(0.8).
		FillOpacity(80).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeSingle).Sort(common.SortOrderNone)).
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom))
}

func failoverPanel() *timeseries.PanelBuilder {
	failovers := sumRate(telemetry.LabelModel, telemetry.MetricRequests,
		mRegionModel+`,`+telemetry.LabelOutcome+`="`+telemetry.OutcomeFailoverOK+`"`, rateWindow)
	skips := sumRate(telemetry.LabelChannel, telemetry.MetricBreakerSkips, mAll, rateWindow)
	return rateTimeseries(idFailovers, "Failovers and breaker skips", grid(0, 27, 12, 8),
		"Failovers: requests answered successfully by a later chain entry after an earlier hop failed (outcome failover_ok), per model. "+
			"Skips: hops not even attempted because the channel's breaker was open, per channel. "+
			"Answers: is failover absorbing the incident (failovers up, errors to clients flat) and which channel is being routed around?",
		query("A", failovers, "failover_ok {{"+telemetry.LabelModel+"}}"),
		query("B", skips, "skipped {{"+telemetry.LabelChannel+"}}"),
	).Links([]cog.Builder[dashboard.DashboardLink]{traceSearchLink()})
}

func gatePanel() *timeseries.PanelBuilder {
	expr := sumRate(telemetry.LabelDecision, telemetry.MetricGateDecisions, mAll, rateWindow)
	return rateTimeseries(idGateDecisions, "Stream gate decisions", grid(12, 27, 12, 8),
		"L3 stream gate outcome per streamed hop. commit_content is the healthy case. "+
			"discard_error / discard_eof: a channel answered 200 and then failed inside the stream; the client never saw it, the next hop took over. "+
			"commit_timeout: nothing decisive within the gate timeout, committed anyway (slow, not broken). "+
			"failover_timeout: the same, but the policy moved on. Rising discards = a provider failing after 200.",
		query("A", expr, "{{"+telemetry.LabelDecision+"}}"),
	)
}

func headerTimeoutPanel() *timeseries.PanelBuilder {
	expr := sumRate(telemetry.LabelChannel, telemetry.MetricHeaderTimeouts, mAll, rateWindow)
	return rateTimeseries(idHeaderTimeouts, "Header timeouts", grid(0, 35, 12, 8),
		"L4: hops that got no response headers within header_timeout (240 s default, per-model overrides), per channel. "+
			"Each one cost the client the full timeout before failover. "+
			"Answers: is a channel hanging rather than failing fast? If so, a shorter per-model header_timeout (or the chat profile) shortens the wait.",
		query("A", expr, "{{"+telemetry.LabelChannel+"}}"),
	)
}

func deadlinePanel() *timeseries.PanelBuilder {
	exceeded := sumRate(telemetry.LabelModel, telemetry.MetricChainExceeded, mRegionModel, rateWindow)
	degraded := sumRate(telemetry.LabelModel, telemetry.MetricDegradedReplies, mRegionModel, rateWindow)
	return rateTimeseries(idDeadlines, "Chain deadline hits and degraded replies", grid(12, 35, 12, 8),
		"Chain deadline: requests whose whole chain did not commit an answer within chain_deadline (12 s in the chat profile), per model. "+
			"Degraded replies: requests answered with the degraded reply (engine_overloaded 503 or the opt-in marked message), from a deadline or an exhausted chain. "+
			"Anything above zero here is visible to clients: failover stopped being invisible.",
		query("A", exceeded, "deadline {{"+telemetry.LabelModel+"}}"),
		query("B", degraded, "degraded {{"+telemetry.LabelModel+"}}"),
	)
}

func latencyPanel(o Options) *timeseries.PanelBuilder {
	q := func(refID, quantile string) *prometheus.DataqueryBuilder {
		expr := fmt.Sprintf("histogram_quantile(%s, sum by (%s, le) (rate(%s_bucket{%s}[%s])))",
			quantile, telemetry.LabelChannel, telemetry.MetricHopDuration, mAll, rateWindow)
		return query(refID, expr, "{{"+telemetry.LabelChannel+"}} p"+quantile[2:]).Exemplar(true)
	}
	return timeseries.NewPanelBuilder().
		Id(idHopLatency).
		Title("Hop latency p50 / p95 / p99").
		Description("Duration of single hops (one attempt on one channel), per channel. "+
			"Answers: is a channel slow before it fails (p99 climbing toward header_timeout), and did failover move traffic to a slower channel? "+
			"The dots are exemplars: click one to open that request's trace in the trace data source and see its whole failover path.").
		GridPos(grid(0, 44, 24, 9)).
		Datasource(promDS).
		WithTarget(q("A", "0.50")).
		WithTarget(q("B", "0.95")).
		WithTarget(q("C", "0.99")).
		Unit("s").
		Min(0).
		OverrideByName("trace_id", []dashboard.DynamicConfigValue{traceLinks(o)}).
		Links([]cog.Builder[dashboard.DashboardLink]{traceSearchLink()}).
		Legend(legendTable()).
		Tooltip(tooltipAll())
}

func requestsPanel() *timeseries.PanelBuilder {
	expr := sumRate(telemetry.LabelOutcome, telemetry.MetricRequests, mRegionModel, rateWindow)
	return rateTimeseries(idRequests, "Requests by outcome", grid(0, 53, 12, 8),
		"Client requests per second by final outcome. "+
			"Answers: what did clients actually get? ok and failover_ok are served; the rest reached the client as errors. "+
			"Failovers rising while errors stay flat means the layers are doing their job.",
		query("A", expr, "{{"+telemetry.LabelOutcome+"}}"),
	).Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal))
}

func costPanel() *timeseries.PanelBuilder {
	return usdPerHour(idCost, "Spend per channel (USD/hour)", grid(12, 53, 12, 8),
		"Price × usage per channel, as an hourly rate. Chains are ordered cheapest first, so spend shifting "+
			"from the usual first channel to a backup is the failover premium: what the incident costs while failover hides it. "+
			"Answers: how much is the incident costing, and is it worth forcing traffic back (or paging the provider)?",
		telemetry.MetricCost).
		Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)).
		FillOpacity(30)
}

// usdPerHour charts a per-channel money counter as an hourly rate.
func usdPerHour(id uint32, title string, pos dashboard.GridPos, desc, metric string) *timeseries.PanelBuilder {
	expr := fmt.Sprintf("sum by (%s) (rate(%s{%s}[%s])) * 3600", telemetry.LabelChannel, metric, mAll, rateWindow)
	return timeseries.NewPanelBuilder().
		Id(id).
		Title(title).
		Description(desc).
		GridPos(pos).
		Datasource(promDS).
		WithTarget(query("A", expr, "{{"+telemetry.LabelChannel+"}}")).
		Unit("currencyUSD").
		Min(0).
		Legend(legendTable()).
		Tooltip(tooltipAll())
}

func earlyRequestsPanel() *timeseries.PanelBuilder {
	reordered := sumRate(telemetry.LabelChannel, telemetry.MetricEarlyWarningReordered, mAll, rateWindow)
	premium := sumRate(telemetry.LabelChannel, telemetry.MetricEarlyWarningPremiumRequests, mAll, rateWindow)
	return rateTimeseries(idEarlyRequests, "Early warning: requests moved off demoted channels", grid(0, 61, 12, 8),
		"Early warning (opt-in) demotes a channel whose latency or error rate turns bad before its breaker opens: the channel is tried last in its chains. "+
			"Reordered: requests whose chain put the demoted channel (the legend's) last. At a premium: those a pricier channel then served. "+
			"Answers: how much traffic is a demotion moving, and is it landing on pricier channels? Each request's trace carries an \"early warning demotion\" event with the evidence.",
		query("A", reordered, "reordered {{"+telemetry.LabelChannel+"}}"),
		query("B", premium, "at a premium {{"+telemetry.LabelChannel+"}}"),
	).Links([]cog.Builder[dashboard.DashboardLink]{traceSearchLink()})
}

func earlyPremiumPanel() *timeseries.PanelBuilder {
	return usdPerHour(idEarlyPremium, "Early warning: premium of demotions (USD/hour)", grid(12, 61, 12, 8),
		"What requests served by a pricier channel because the legend's channel was demoted cost above that channel's price, as an hourly rate. "+
			"A demotion that no breaker opening follows (a blue band alone on the timeline) is a false alarm, and this is its price; "+
			"docs/early-warning.md shows what the defaults cost and save in replayed incidents.",
		telemetry.MetricEarlyWarningPremium)
}

func rateTimeseries(id uint32, title string, pos dashboard.GridPos, desc string, targets ...cog.Builder[variants.Dataquery]) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().
		Id(id).
		Title(title).
		Description(desc).
		GridPos(pos).
		Datasource(promDS).
		Targets(targets).
		Unit("reqps").
		Min(0).
		Legend(legendTable()).
		Tooltip(tooltipAll())
}

func legendTable() *common.VizLegendOptionsBuilder {
	return common.NewVizLegendOptionsBuilder().
		ShowLegend(true).
		DisplayMode(common.LegendDisplayModeTable).
		Placement(common.LegendPlacementRight).
		Calcs([]string{"max", "lastNotNull"})
}

func tooltipAll() *common.VizTooltipOptionsBuilder {
	return common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending)
}

// budgetPanel is the overload tile: the share of the buffer budget in use
// (DESIGN.md §13), worst instance.
func budgetPanel() *stat.PanelBuilder {
	expr := fmt.Sprintf("max by (%[1]s) (%[2]s{%[4]s} / %[3]s{%[4]s})",
		telemetry.LabelRegion, telemetry.MetricBudgetUsed, telemetry.MetricBudgetLimit, mRegion)
	return stat.NewPanelBuilder().
		Id(idBudget).
		Title("Buffer budget in use").
		Description("Share of the process's buffer budget (held stream-gate frames, bodies being classified, request bodies kept for replay) in use, worst instance per region. " +
			"Near 100 % hops fail over with buffer_budget and request bodies are shed (503 engine_overloaded). " +
			"Answers: is a broken upstream (an endless body) eating the memory every stream shares?").
		GridPos(grid(0, 70, 6, 6)).
		Datasource(promDS).
		WithTarget(query("A", expr, "{{"+telemetry.LabelRegion+"}}")).
		Unit("percentunit").
		Min(0).
		Max(1).
		Thresholds(dashboard.NewThresholdsConfigBuilder().
			Mode(dashboard.ThresholdsModeAbsolute).
			Steps([]dashboard.Threshold{
				{Value: nil, Color: "green"},
				{Value: cog.ToPtr(telemetry.BudgetWarnShare), Color: "yellow"},
				{Value: cog.ToPtr(telemetry.BudgetFullShare), Color: "red"},
			}))
}

func shedPanel() *timeseries.PanelBuilder {
	shed := sumRate(telemetry.LabelShedReason, telemetry.MetricShed, mRegion, rateWindow)
	inFlight := fmt.Sprintf("sum(%s{%s})", telemetry.MetricInFlight, mRegion)
	streams := fmt.Sprintf("sum(%s{%s})", telemetry.MetricStreamsOpen, mRegion)
	return rateTimeseries(idShed, "Shed requests, requests in flight, open streams", grid(6, 70, 18, 6),
		"Shed: new requests refused at once with 503 engine_overloaded and Retry-After, by reason (in_flight, streams, budget); "+
			"/readyz says overloaded meanwhile, so the load balancer steers away. Committed streams are never cut to make room. "+
			"In flight and streams: the counts the bounds apply to. Answers: is this instance shedding, and which bound is it at?",
		query("A", shed, "shed {{"+telemetry.LabelShedReason+"}}"),
		query("B", inFlight, "in flight"),
		query("C", streams, "open streams"),
	)
}

// Failover returns the failover board of DESIGN.md §6.
//
// Layout: a row per region (repeated) holding one breaker tile per channel
// (repeated), then error rates and breaker history, then each channel's
// rate-limit window (windows.go), then the failover
// mechanics (skips, gate, header timeouts, deadlines), then latency with
// exemplars, outcomes and cost, what early warning moved and cost, then overload.
// Rows are expanded: their panels follow them
// at the top level of the JSON, which is how Grafana stores open rows.
func Failover() (dashboard.Dashboard, error) { return FailoverWith(Options{}) }

// FailoverWith is Failover with o's links.
func FailoverWith(o Options) (dashboard.Dashboard, error) {
	if o.TraceURL != "" && !strings.Contains(o.TraceURL, telemetry.TraceURLPlaceholder) {
		return dashboard.Dashboard{}, fmt.Errorf("dashboards: trace URL %q lacks %s", o.TraceURL, telemetry.TraceURLPlaceholder)
	}
	return dashboard.NewDashboardBuilder(FailoverTitle).
		Uid(FailoverUID).
		Description("Where hopgate's four failover layers are working during an upstream incident, per region and channel.").
		Tags([]string{"hopgate", "failover"}).
		Timezone("browser").
		Time("now-1h", "now").
		Refresh("30s").
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Variables(variables()).
		WithRow(breakerRow()).
		WithPanel(breakerTile()).
		WithRow(dashboard.NewRowBuilder("Error rates").Id(idRowErrors).GridPos(grid(0, 5, 24, 1))).
		WithPanel(errorRatePanel()).
		WithPanel(breakerTimeline()).
		WithRow(windowRow()).
		WithPanel(windowTile()).
		WithRow(dashboard.NewRowBuilder("Failover").Id(idRowFailover).GridPos(grid(0, 26, 24, 1))).
		WithPanel(failoverPanel()).
		WithPanel(gatePanel()).
		WithPanel(headerTimeoutPanel()).
		WithPanel(deadlinePanel()).
		WithRow(dashboard.NewRowBuilder("Latency, outcomes and cost").Id(idRowLatency).GridPos(grid(0, 43, 24, 1))).
		WithPanel(latencyPanel(o)).
		WithPanel(requestsPanel()).
		WithPanel(costPanel()).
		WithPanel(earlyRequestsPanel()).
		WithPanel(earlyPremiumPanel()).
		WithRow(dashboard.NewRowBuilder("Overload").Id(idRowOverload).GridPos(grid(0, 69, 24, 1))).
		WithPanel(budgetPanel()).
		WithPanel(shedPanel()).
		Build()
}
