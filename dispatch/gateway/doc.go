// Package gateway assembles a running hopgate process from a configuration:
// telemetry, the store and the wallet (when a store is configured), the
// dispatch engine with its breakers, early-warning detectors and overload
// protection (budget and admission bounds, fixed for the process's life),
// the status page's history, the main and admin listeners, graceful drain
// and atomic config reload. `hopgate serve`, `hopgate demo`, the end-to-end
// tests and the benchmarks all start gateways through it, so the process
// they test is the process that ships.
package gateway
