// Package gateway assembles a running hopgate process from a configuration:
// telemetry, the dispatch engine, the main and admin listeners, graceful
// drain and atomic config reload. `hopgate serve`, `hopgate demo`, the
// end-to-end tests and the benchmarks all start gateways through it, so the
// process they test is the process that ships.
package gateway
