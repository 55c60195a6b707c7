// Package ratelimit keeps tenants within their limits (DESIGN §16):
// requests and tokens per minute per tenant, optionally per model, checked
// at the door before the wallet's hold and before any upstream call.
//
// Each limit is one cell of a generic cell rate algorithm (GCRA, gcra.go):
// a theoretical arrival time that a request moves forward by its cost
// (one request, or its estimated tokens) times the emission interval
// window/limit, admitted while it stays within one window of now. It is
// exact for a single counter (no sliding-window approximation): a tenant
// at its limit is admitted at most limit units in any window, plus the
// tokens its settled usage exceeded the estimate by. The counters live
// behind Counter: Memory in this process (one replica), Redis shared by
// replicas (redis.go), which runs the same arithmetic in one Lua script.
//
// A Limiter turns a tenant and model into cells from the config's
// rate_limits.tenants (and the limits stored with a tenant), takes them all
// or none in one call, and hands back a Ticket that settles the tokens
// cells with the usage the upstream reported (the wallet's estimate rules:
// package wallet). It must not write HTTP answers (package api does, in
// the client's dialect) or decide routing.
package ratelimit
