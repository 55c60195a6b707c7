package dashboards

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/stat"

	"github.com/hopgate/hopgate/telemetry"
)

// The board's third row (DESIGN.md §16): one tile per channel with how
// full each of its rate-limit windows is, as the provider's last answer
// stated it, so on-call sees a window filling before its 429s — the
// post-mortem's incident. /admin shows the same row (dispatch/admin).

// Window colours: yellow from 70 % (as the overload tile), red from 90 %,
// just before early warning's default demotion (ratelimit_utilization
// 0.95, earlywarning.DefaultRateLimit).
const (
	windowWarnShare = 0.7
	windowFullShare = 0.9
)

func windowRow() *dashboard.RowBuilder {
	return dashboard.NewRowBuilder("Rate-limit windows").Id(idRowWindows).GridPos(grid(0, 21, 24, 1))
}

// windowTile is repeated per channel: one value per window kind, the
// fullest gateway instance's view (max), since every instance reads the
// same provider's window.
func windowTile() *stat.PanelBuilder {
	util := fmt.Sprintf("max by (%s) (%s{%s})", telemetry.LabelLimitKind, telemetry.MetricChannelRateLimitUtilization, mRegionChannel)
	return tileLook(stat.NewPanelBuilder().
		Id(idWindowTile).
		Title("$" + VarChannel + " window").
		Description("How full this channel's rate-limit windows are, per kind (requests, tokens, input_tokens, output_tokens), " +
			"as the provider's last answer stated them (x-ratelimit-* and anthropic-ratelimit-* headers): 1 − remaining/limit, fullest gateway instance. " +
			"Yellow from 70 %, red from 90 %; with early warning on, the channel is demoted (tried last in its chains) from ratelimit_utilization (0.95 by default) until the window resets. " +
			"The reset time is " + telemetry.MetricChannelRateLimitReset + "; /admin shows it on the same row. " +
			"n/a: the channel's answers state no window.").
		GridPos(grid(0, 22, 4, 4)).
		Repeat(VarChannel).
		RepeatDirection(dashboard.PanelRepeatDirectionH).
		MaxPerRow(6).
		Datasource(promDS).
		WithTarget(query("A", util, "{{"+telemetry.LabelLimitKind+"}}").Instant()).
		Unit("percentunit").
		Min(0).
		Max(1).
		Thresholds(dashboard.NewThresholdsConfigBuilder().
			Mode(dashboard.ThresholdsModeAbsolute).
			Steps([]dashboard.Threshold{
				{Value: nil, Color: "green"},
				{Value: cog.ToPtr(windowWarnShare), Color: "yellow"},
				{Value: cog.ToPtr(windowFullShare), Color: "red"},
			})).
		TextMode(common.BigValueTextModeValueAndName))
}
