// Package dispatch owns the request path of hopgate: the four layers of
// DESIGN.md §2 applied to one client request.
//
//   - L1: before a hop, the channel's breaker (package breaker) decides
//     whether anything is sent at all. Before a chain is walked, early
//     warning (package earlywarning, opt-in, demote.go) may move a
//     demoted channel to its end: tried last, never skipped.
//   - L2: the chain walk (call.go) tries entries cheapest first, moves on
//     only on retryable results (classify.HopError), returns final ones at
//     once, never retries a channel after a timeout.
//   - L3: the stream gate (stream.go) holds the first SSE frames until one
//     is decisive (internal/gate classifies frames, internal/sse reads them).
//   - L4: the header timeout (headertimeout.go) bounds the wait for
//     response headers.
//
// # Shape
//
// A request is a call (call.go): the walk, the failover path's steps and
// the outcome. Each hop is an attempt (attempt.go): it owns its context and
// cancel, its timers, its span, the chain entry, the upstream response and
// what the upstream said about usage; sending, the header wait, the gate,
// the pass after commit (stream.go), buffering and binary passthrough
// (body.go) and a mid-stream continuation (resume.go, through the same
// frame loop) are its methods, and it tells the walk only a typed error.
// What reached the client belongs to the responder (responder.go): the
// one claim on the reply (the first decisive answer and the chain deadline
// race for it by compare-and-swap), the status line with hopgate's
// headers, the in-band error frame of an interrupted stream, the abort of
// a binary body. The degraded reply is reply.go.
//
// A committed stream is not passed on from under the walk: the gate's
// commit ends the walk (the hop returns errStreamOpen), Engine.Start
// returns the request's Answer with the stream open, and the caller's
// goroutine writes the commit and pumps the frames from its own frame
// (Answer.Pump, pump.go) before Answer.End ends the hop and the call as
// the walk would have. An idle stream parks its goroutine in that read
// for minutes: under Pump it keeps 3.4 KB of live stack instead of 6.5,
// and the walk's deep paths are gone before it, so its stack stays at
// 8 KiB, as the bare proxy's does (TestStreamStackStaysSmall,
// docs/performance.md). Engine.Serve is Start, Pump and End.
//
// The gate reads the upstream's frames on the hop's goroutine as well: no
// goroutine per stream reads for it. Its timer runs on its own and acts
// only while that goroutine waits in a read: with on_timeout failover it
// ends the hop's context (the read ends), with commit it writes the
// commit and flushes it then, and the read's frame is the stream's first
// after it (gateHold.fire, stream.go). Between reads the timer only marks
// the gate, and the hop's goroutine decides before its next read.
//
// A realtime session (DESIGN.md §15, realtime.go, realtime_hop.go) is a
// second kind of attempt inside the same walk: StartRealtime upgrades the
// client first (its reader holds the events sent before a channel commits,
// to be replayed), then each hop dials the channel under L4 and holds its
// events in the session gate until session.created. The commit ends the
// walk as a stream's does (errStreamOpen), and Realtime.Relay passes the
// channel's frames to the client untouched from its caller's frame while
// the client's reader writes the client's to the channel: two goroutines,
// as a bare relay, and a handler parked shallow enough for an 8 KiB stack
// (TestRealtimeIdleSessionStacks). The breaker, the responder's claim, the
// hop spans and the metrics are the request path's own.
//
// Every hop also feeds its channel's early-warning detector (the
// attempt's ew: headers, first token, outcome), classified as the breaker
// is.
//
// Spans are recorded through telemetry.Spans and metrics through
// telemetry.Metrics: dispatch reports what happened and never builds span
// attributes itself.
//
// It must not parse configuration (package config), authenticate clients or
// route HTTP paths (package api): it receives a resolved Request and writes
// exactly one response for it.
package dispatch
