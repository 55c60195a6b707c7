// Package admin serves the admin listener, separate from client traffic and
// on loopback by default: /healthz and /readyz for probes, /metrics for
// Prometheus, and on-call's views (DESIGN.md §10):
//
//   - /admin, the on-call page: the overload tile (buffer budget, requests
//     and streams against their bounds, DESIGN.md §13), breaker tiles per
//     region × channel (green closed, yellow half-open, red open with its
//     reopen time, blue demoted by early warning with until when and why),
//     each channel's rolling 60 s error rate with the 25 % line, recent
//     failovers linking to their traces, every model's chain — laid out
//     like the Grafana failover board (dashboards/failover.go);
//   - /admin/traces, what the in-memory trace ring holds, filterable by
//     model, channel and outcome, and /admin/traces/{trace_id}, one trace
//     as a waterfall — so a failover can be read with no trace backend;
//   - /admin/chains, /admin/breakers and /admin/failovers, the same data
//     as JSON.
//
// Pages are server-rendered (html/template escapes every model name, path
// and upstream message: they are attacker-influenced), embed their style
// and refresh script (internal/pagekit), and read without JavaScript.
// With telemetry.trace_url set, every trace id also links to the
// operator's trace UI. With a configured token every route but the probes
// requires it. It reads state and changes nothing, except under
// /admin/tenants (tenants.go): wallets and keys, where every change needs
// an admin_auth key and is audited in the store.
package admin
