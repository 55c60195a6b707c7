// Package status owns the public status page of DESIGN.md §10: /status and
// /status.json on the main listener show the success rate hopgate observed
// per public model — the last hour per minute, the last day per hour, the
// last 90 days per day — with bad windows coloured, and no SLA figure.
//
// A Recorder counts every finished request per model per minute in memory
// and a goroutine flushes the counts to a Store in batches, off the request
// path: Record takes a mutex for a map increment and never waits on the
// store. What counts (Classify): ok and failover_ok succeed; exhausted,
// deadline, degraded and interrupted fail; a final upstream error (the
// client's 400: context length, content filter), a cancellation and a
// request refused at the front door count on neither side, because they
// say nothing about whether hopgate could serve.
//
// The Store interface is the status part of the store shared with the
// wallets (SQLite or PostgreSQL), so history survives restarts and several
// replicas add up; MemoryStore is the in-process one used when no store
// is configured (the history lasts as long as the process), and by tests. The package reads the config and never touches the
// request path beyond Record.
package status
