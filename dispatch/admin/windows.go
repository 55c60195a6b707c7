package admin

import (
	"strconv"
	"time"

	"github.com/hopgate/hopgate/dispatch/config"
)

// The rate-limit window row of /admin (DESIGN.md §16): per channel, one
// tile per window kind its answers state — how full it is and when it
// resets — laid out like the board's third row (dashboards/failover.go).

// windowWarn is where a window tile turns yellow, as the overload tile
// does at 70 % of its budget.
const windowWarn = 0.7

// windowRow is one channel's windows.
type windowRow struct {
	Channel string
	Tiles   []windowTile
}

// windowTile is one kind of one channel's window.
type windowTile struct {
	Kind string // requests, tokens, input_tokens, output_tokens; "" when the channel stated none
	// State is the colour: closed (green) below 70 %, half-open (yellow)
	// from 70 %, open (red) when full or past the channel's demotion
	// threshold; none (grey) when nothing was stated.
	State       string
	Utilization string // "92.0 %"
	ResetAt     string // "09:31:00 UTC", "" when not stated
	ResetIn     string // "in 30s"
	DemotesAt   string // "90 %": early_warning.ratelimit_utilization, "" when off
}

// windows builds the row of every channel of cfg, in config order.
func (s *Server) windows(cfg *config.Config, now time.Time) []windowRow {
	obs := s.Engine.WindowObservations()
	rows := make([]windowRow, 0, len(cfg.Channels))
	for _, ch := range cfg.Channels {
		row := windowRow{Channel: ch.ID}
		demote := 0.0
		if ew := ch.EarlyWarning; ew.Enabled {
			demote = ew.RateLimitUtilization
		}
		for _, o := range obs {
			if o.Channel != ch.ID {
				continue
			}
			t := windowTile{Kind: o.Kind, State: "closed", Utilization: pctText(o.Utilization)}
			if demote > 0 {
				t.DemotesAt = strconv.FormatFloat(demote*100, 'f', -1, 64) + " %"
			}
			switch {
			case o.Utilization >= 1 || demote > 0 && o.Utilization >= demote:
				t.State = "open"
			case o.Utilization >= windowWarn:
				t.State = "half-open"
			}
			if !o.ResetAt.IsZero() {
				t.ResetAt = o.ResetAt.UTC().Format("15:04:05 UTC")
				t.ResetIn = "in " + short(max(o.ResetAt.Sub(now).Round(time.Second), 0))
				if !now.Before(o.ResetAt) {
					// The window has reset since the last answer said so:
					// its count is history until the next answer.
					t.State, t.ResetIn = "none", "reset since"
				}
			}
			row.Tiles = append(row.Tiles, t)
		}
		if len(row.Tiles) == 0 {
			row.Tiles = []windowTile{{State: "none"}}
		}
		rows = append(rows, row)
	}
	return rows
}
