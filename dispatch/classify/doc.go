// Package classify is the single place that decides what an upstream result
// means for failover (DESIGN.md §3): retryable (next hop, breaker failure),
// final (return to the client unchanged, no breaker effect) or canceled (the
// client went away: cancel upstream, no breaker effect).
//
// Every layer asks this package; nobody re-derives the table. It owns no I/O
// and keeps no state, so it is safe on the hot path and allocation-free.
package classify
