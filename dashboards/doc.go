// Package dashboards owns the Grafana dashboards of DESIGN.md §6 as Go code
// (grafana-foundation-sdk) and the JSON generated from it under generated/.
//
// It reads metric and label names from package telemetry and never defines
// its own: a renamed metric must break the build here, not a panel at 3 a.m.
// It must not import dispatch or talk to Grafana or Prometheus; checking the
// queries against a real Prometheus is the end-to-end test's job, which uses
// Queries and Substitute from this package.
//
// Regenerate the committed JSON with `go run ./dashboards/cmd/gen` from the
// repository root (or `go generate ./dashboards`); a test fails when it is
// stale.
package dashboards

//go:generate go run ./cmd/gen -out generated
