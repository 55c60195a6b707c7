// Command hopsoak is a bounded soak test of a real hopgate process on
// loopback: mixed streaming and non-streaming traffic across several models
// whose channels (cmd/fakeupstream) fail at random with every fault kind of
// the fault grammar, flapping channels, slow clients and clients that leave
// mid-stream. It stops by itself after -duration.
//
//	hopsoak -duration 10m -rate 40
//
// Under a memory ceiling, as deploy/k8s runs the gateway (a soft limit of
// 90 % of the 512 MiB container limit), with a raised share of the faults
// that fill buffers to their bounds:
//
//	hopsoak -duration 10m -rate 50 -memory-limit 460MiB -rss-ceiling 512MiB -endless-share 0.3
//	(make soak DURATION=10m)
//
// -memory-limit is applied with debug.SetMemoryLimit before the gateway
// starts, so its buffer budget follows it, and a peak RSS above
// -rss-ceiling (512 MiB by default under a limit) is a violation. The
// per-answer bound is the config's (overload.max_response_bytes) unless
// -max-response-body overrides it; -budget, -budget-fraction,
// -gateway-max-in-flight and -gateway-max-streams set the gateway's
// overload: keys; -frame-delay slows every fake provider's streams;
// -heap-profile writes a heap profile at the highest RSS.
//
// With -wallet (make soak WALLET=1) every request is sent with a tenant's
// key: the gateway reserves and charges each one against a prepaid
// wallet in a SQLite store, and after the drain the books are checked
// (wallet.go): the ledger and the balance agree, nothing stays reserved,
// no request is charged twice, none the client saw fail is charged, and
// every complete answer is, or is an in-doubt row (the delivery rule).
//
// Requests hopgate sheds (503 engine_overloaded with Retry-After and
// X-Hopgate-Shed) are a legitimate outcome: counted by reason, each
// checked for its Retry-After and its trace, and reconciled with
// hopgate_shed_requests_total; hops failed at the buffer budget are
// failovers like any other.
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
// /admin/failovers, exported spans, the gateway's log lines (errors, and
// the bounds of "overload protection") and the process's own memory.
package main
