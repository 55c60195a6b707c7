// Package earlywarning is hopgate's opt-in early warning (DESIGN.md §12):
// one Detector per channel per process that watches the channel's header
// latency, time to first token and error rate against the channel's own
// baseline, and demotes the channel — moves it to the end of the chains it
// is in, never skips it — before its breaker has to open.
//
// It owns: the per-channel baseline and short-window view (a ring of
// time buckets, each a log-scale latency sketch), the hops still in flight
// (a channel that hangs reports nothing when only completions count, so a
// hop older than the slow threshold is already a slow sample), the
// normal / demoted / probation state machine with its cooldown and
// hysteresis, and Order, which applies demotions to one chain with the two
// guards of the contract: never demote when every other channel of the
// chain looks the same (a slow day is not an outage), never move a channel
// behind channels that cannot serve (the last healthy one stays where it
// is).
//
// It does not touch HTTP, classification (the caller passes Success,
// Failure or Excluded as the breaker gets them), breakers (the caller says
// whether each member's breaker is closed), metrics or spans: those hang
// off the transition callback, Snapshot and the Plan that Order returns.
//
// Like package breaker, time moves only through the injected Clock and
// state is evaluated lazily on each call: no goroutines, no timers.
//
// Usage on the request path:
//
//	var h earlywarning.Hop
//	d.Begin(&h)       // when the hop is sent
//	h.Headers()       // response headers arrived
//	h.FirstToken()    // the stream gate committed (streams only)
//	h.End(outcome)    // exactly once per Begin
//
// and, before walking a chain, Order with one Member per entry.
package earlywarning
