// Package deploy holds hopgate's deployment files, not code: the container
// image (Dockerfile), the docker compose stack with its OpenTelemetry
// Collector, Tempo, Prometheus and Grafana provisioning (compose/), the
// Kubernetes manifests (k8s/), the Jaeger v2 build and config used by tests
// and the demo (jaeger/, a separate Go module), and the Prometheus installer
// (prometheus/).
//
// Its tests check those files without Docker or a cluster: every YAML file
// parses, the Kubernetes manifests carry the probes, security settings and
// cross-references the gateway relies on, promtool accepts the Prometheus
// config, Grafana provisioning points at files that exist, and the collector
// and Jaeger configs use only components of their pinned versions. The
// package must not import the gateway's runtime packages beyond
// dispatch/config (to check that the shipped hopgate configs load).
package deploy
