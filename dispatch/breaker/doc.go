// Package breaker is hopgate's L1 circuit breaker (DESIGN.md §2 L1): one
// Breaker per channel per process, consulted before anything is sent to that
// channel, and a Set that keys them by channel id.
//
// It owns: the closed / half-open / open state machine, the two policies
// (count: failures in a sliding window; rate: error rate over a rolling ring of
// one-second buckets), the Retry-After floor, the generation counter that makes
// results of requests started before the last state change harmless, and the
// forced trial used when every channel of a chain is open. It does not touch
// HTTP, classification (the caller passes Success / Failure / Excluded, as
// decided by dispatch/classify), metrics or spans: those hang off the
// transition callback and Snapshot.
//
// Time only moves through the injected Clock and state is re-evaluated lazily
// on each call (open becomes half-open inside Allow/State once the cooldown has
// passed): no goroutines, no timers, so tests set the time instead of sleeping.
//
// Why hand-written rather than a library: sony/gobreaker v2 (the model for the
// generation counter, one setState and three-way outcomes) has no injectable
// clock and counts consecutive failures or ratios per interval, not "3
// failures in any 5 minutes"; failsafe-go's breaker has a clock and bucketed
// windows but no Retry-After floor that can open a closed breaker for a
// provider-given duration, and its count thresholds are over the last N
// executions rather than failures in a time window. Adapting either would have
// taken more code than this package, with the contract's edges still wrong.
//
// Usage on the request path:
//
//	t, ok := b.Allow()
//	if !ok { /* skip the channel, send nothing */ }
//	… send …
//	b.Done(t, outcome) // exactly once per ticket
//
// Every Ticket returned by Allow or ForceTrial must be passed to Done exactly
// once; a half-open trial that is never finished keeps the trial slot taken.
package breaker
