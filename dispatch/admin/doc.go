// Package admin serves the admin listener, separate from client traffic and
// on loopback by default: /healthz and /readyz for probes, /metrics for
// Prometheus, and on-call's embedded views — /admin (HTML), /admin/chains,
// /admin/breakers and /admin/failovers (JSON). With a configured token every
// route but the probes requires it. It reads state and changes nothing,
// except under /admin/tenants (tenants.go): wallets and keys, where every
// change needs an admin_auth key and is audited in the store.
package admin
