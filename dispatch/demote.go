package dispatch

import (
	"math"
	"sort"

	"github.com/hopgate/hopgate/dispatch/breaker"
	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/earlywarning"
	"github.com/hopgate/hopgate/telemetry"
)

// Early warning (DESIGN.md §12) on the request path: each hop feeds its
// channel's detector (the attempt's ew), and before a chain is walked,
// earlywarning.Order may move demoted channels to its end. A move is
// visible like a breaker skip: a "a:demoted" step on the failover path, an
// event on the dispatch span, hopgate_early_warning_reordered_total, and,
// when a pricier channel then serves, the premium it cost.

// WarningPolicy converts a channel's resolved early-warning policy. The
// error evidence is a fraction of the channel's breaker threshold: of its
// error rate (rate breakers) or of its failure count (count breakers).
func WarningPolicy(ch *config.Channel) earlywarning.Policy {
	ew := ch.EarlyWarning
	p := earlywarning.Policy{
		Baseline: ew.Baseline, Window: ew.Window, Multiple: ew.LatencyMultiple, For: ew.For,
		MinSamples: ew.MinSamples, Cooldown: ew.Cooldown, Probation: ew.Probation,
		RateLimit: ew.RateLimitUtilization,
	}
	if ch.Breaker.Mode == config.BreakerRate {
		p.ErrorRate = ew.ErrorFraction * ch.Breaker.Threshold
	} else {
		p.ErrorCount = max(int(math.Ceil(ew.ErrorFraction*float64(ch.Breaker.Failures))), 1)
	}
	return p
}

// Warnings exposes the early-warning registry (admin page, metrics).
func (e *Engine) Warnings() *earlywarning.Set { return e.warnings }

// Warning returns ch's early-warning detector, nil when early warning is
// off for the channel (admin page).
func (e *Engine) Warning(ch *config.Channel) *earlywarning.Detector { return e.warnFor(ch) }

// warnFor returns ch's detector, nil when early warning is off for it.
func (e *Engine) warnFor(ch *config.Channel) *earlywarning.Detector {
	if !ch.EarlyWarning.Enabled {
		return nil
	}
	return e.warnings.Get(ch.ID, WarningPolicy(ch))
}

// WarningObservations feeds the hopgate_early_warning_demoted gauge for
// every channel of cfg (0 for channels without early warning).
func (e *Engine) WarningObservations(cfg *config.Config) []telemetry.EarlyWarningObservation {
	out := make([]telemetry.EarlyWarningObservation, 0, len(cfg.Channels))
	for _, ch := range cfg.Channels {
		o := telemetry.EarlyWarningObservation{Channel: ch.ID, ChannelRegion: ch.Region}
		if d := e.warnFor(ch); d != nil {
			o.Demoted = d.State() == earlywarning.Demoted
		}
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Channel < out[j].Channel })
	return out
}

// demotedEntry is a chain entry a request's walk moved to the end.
type demotedEntry struct {
	model *config.Model
	index int // in model.Chain
}

// chainOrder returns m's chain in the order c walks it: as configured,
// unless early warning moved demoted channels to its end (reorderChain).
// Early warning's part of the walk is functions of this file, not methods
// of call: a concept of its own (TestShape).
func chainOrder(c *call, m *config.Model) []config.Entry {
	for _, en := range m.Chain {
		if en.Channel.EarlyWarning.Enabled {
			return reorderChain(c, m)
		}
	}
	return m.Chain
}

// reorderChain is chainOrder for a chain with early warning on for some
// channel: it asks earlywarning.Order and records every move. A function
// of its own, so a chain without early warning allocates nothing for it.
//
//go:noinline
func reorderChain(c *call, m *config.Model) []config.Entry {
	if len(m.Chain) > config.ChainMax {
		return m.Chain
	}
	var ms [config.ChainMax]earlywarning.Member
	for i, en := range m.Chain {
		ms[i].Detector = c.e.warnFor(en.Channel)
		ms[i].Closed = c.e.breakerFor(en.Channel).State() == breaker.Closed
	}
	plan := new(earlywarning.Plan)
	earlywarning.Order(plan, ms[:len(m.Chain)])
	if len(plan.Moves) == 0 {
		return m.Chain
	}
	out := make([]config.Entry, 0, len(m.Chain))
	for _, i := range plan.Order {
		out = append(out, m.Chain[i])
	}
	for _, mv := range plan.Moves {
		ch := m.Chain[mv.Index].Channel
		c.span.Demoted(telemetry.Demotion{Channel: ch.ID, ChannelRegion: ch.Region, Reason: mv.Reason, Detail: mv.Detail, Until: mv.Until})
		c.steps = append(c.steps, telemetry.Step{Channel: ch.ID, Result: telemetry.StepDemoted})
		c.e.tel.Metrics.EarlyWarningReordered(c.ctx, ch.ID, m.Name)
		c.demoted = append(c.demoted, demotedEntry{model: m, index: mv.Index})
	}
	return out
}

// recordPremium records a request served (by a's hop) by a pricier
// channel because a cheaper one was demoted: the served entry came after the demoted one in the
// configured chain, so without the demotion the cheaper one would have
// been tried first. What it cost above the demoted entry's price counts
// when the upstream reported usage.
func recordPremium(a *attempt) {
	c := a.c
	served := -1
	for i, en := range a.m.Chain {
		if en.Channel == a.ch {
			served = i
			break
		}
	}
	for _, d := range c.demoted {
		if d.model != a.m || served <= d.index {
			continue
		}
		dem := a.m.Chain[d.index]
		if a.entry.Price.Total() <= dem.Price.Total() {
			continue
		}
		usd := 0.0
		if u := a.usage; u.Present {
			usd = (float64(u.InputTokens)*(a.entry.Price.Input-dem.Price.Input) +
				float64(u.OutputTokens)*(a.entry.Price.Output-dem.Price.Output)) / 1e6
		}
		c.e.tel.Metrics.EarlyWarningPremium(a.ctx, dem.Channel.ID, a.m.Name, max(usd, 0))
		return
	}
}

// warnOutcome classifies a hop for its channel's detector exactly as
// recordBreaker does for the breaker (HopError.AboutChannel).
func warnOutcome(err *classify.HopError) earlywarning.Outcome {
	switch {
	case err == nil:
		return earlywarning.Success
	case !err.AboutChannel():
		return earlywarning.Excluded
	}
	return earlywarning.Failure
}
