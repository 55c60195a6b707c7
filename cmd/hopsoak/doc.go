// Command hopsoak is a bounded soak test of a real hopgate process on
// loopback: mixed streaming and non-streaming traffic across several models
// whose channels (cmd/fakeupstream) fail at random with every fault kind of
// the fault grammar, flapping channels, slow clients and clients that leave
// mid-stream. It stops by itself after -duration.
//
//	hopsoak -duration 10m -rate 40     (make soak DURATION=10m RATE=40)
//
// It checks, per request, what the client saw (every 200 stream complete or
// ended by an in-band error frame, no request past its deadline), that every
// failover has a trace whose root span's hopgate.failover.path equals the
// X-Hopgate-Path the client got (and the /admin/failovers entry agrees),
// that hopgate_requests_total by outcome equals the client-observed
// outcomes, and that after the drain no goroutine, file descriptor or
// unbounded RSS is left. It prints a report and exits 1 on any violation.
// The gateway runs in-process through gateway.Start, the same assembly
// `hopgate serve` uses, so goroutines, descriptors and RSS are measurable.
//
// It owns only the traffic generator and the checks; it must not reach into
// the engine: everything it knows comes from HTTP responses, /metrics,
// /admin/failovers and exported spans.
package main
