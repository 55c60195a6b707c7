// Package dispatch owns the request path of hopgate: the four layers of
// DESIGN.md §2 applied to one client request.
//
//   - L1: before a hop, the channel's breaker (package breaker) decides
//     whether anything is sent at all.
//   - L2: the chain walk (walk.go) tries entries cheapest first, moves on
//     only on retryable results (package classify), returns final ones at once.
//   - L3: the stream gate (stream.go) holds the first SSE frames until one is
//     decisive (package gate classifies frames, package sse reads them).
//   - L4: the header timeout (hop.go) bounds the wait for response headers.
//
// Around them: the chain deadline and degraded reply (reply.go), mid-stream
// safety after commit, and the telemetry hooks (spans, metrics, failover log).
//
// It must not parse configuration (package config), authenticate clients or
// route HTTP paths (package api): it receives a resolved Request and writes
// exactly one response for it.
package dispatch
