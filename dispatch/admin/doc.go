// Package admin serves the admin listener, separate from client traffic and
// on loopback by default: /healthz and /readyz for probes, /metrics for
// Prometheus, and on-call's embedded views — /admin (HTML), /admin/chains,
// /admin/breakers and /admin/failovers (JSON). With a configured token every
// route but the probes requires it. It reads state; it changes nothing.
package admin
