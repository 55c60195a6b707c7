#!/usr/bin/env bash
# Ensures `prometheus` and `promtool` are on PATH, installing Debian's
# package when they are missing. Idempotent. Prints the prometheus binary path
# as the last line of stdout so the Makefile and .ci/run can capture it:
#
#   PROMETHEUS_BIN="$(bash deploy/prometheus/install.sh | tail -n1)"
#
# The Debian package ships a system service that listens on :9090. Tests start
# their own Prometheus on a loopback port chosen per test, so the package must
# not leave that service running: we install with a policy-rc.d that forbids
# service starts and stop the service afterwards in case an init system
# started it anyway (deploy/lib/debian.sh).
set -euo pipefail

. "$(dirname "$0")/../lib/debian.sh"

if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
	command -v prometheus
	exit 0
fi

apt_install "prometheus/promtool" prometheus
stop_service prometheus
if command -v pgrep >/dev/null 2>&1; then
	# Only the daemon the package would start runs as user "prometheus".
	for pid in $(pgrep -u prometheus -x prometheus 2>/dev/null || true); do
		$SUDO kill "$pid" 2>/dev/null || true
	done
fi

for tool in prometheus promtool; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		log "$tool still missing after installing the Debian package"
		exit 1
	fi
done
log "$(prometheus --version 2>&1 | head -n1)"
command -v prometheus
