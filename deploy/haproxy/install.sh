#!/usr/bin/env bash
# Ensures an haproxy binary is installed, installing Debian's `haproxy`
# package when it is missing. Idempotent. Prints the binary's path as the last
# line of stdout so the Makefile and hopbench can capture it:
#
#   HOPGATE_HAPROXY_BIN="$(bash deploy/haproxy/install.sh | tail -n1)"
#
# HAProxy is one of the floors `make bench` measures hopgate against
# (docs/benchmarks.md): hopbench writes its own config and starts it on a
# loopback port. Debian's package ships a service, so we install with a
# policy-rc.d that forbids service starts and stop it in case an init system
# started it anyway (deploy/lib/debian.sh).
set -euo pipefail

. "$(dirname "$0")/../lib/debian.sh"

if bin="$(find_sbin haproxy)"; then
	printf '%s\n' "$bin"
	exit 0
fi

apt_install "haproxy" haproxy
stop_service haproxy
if command -v pgrep >/dev/null 2>&1; then
	for pid in $(pgrep -f '^/usr/sbin/haproxy -Ws -f /etc/haproxy/haproxy.cfg' 2>/dev/null || true); do
		$SUDO kill "$pid" 2>/dev/null || true
	done
fi

if ! bin="$(find_sbin haproxy)"; then
	log "haproxy still missing after installing the Debian package"
	exit 1
fi
log "$("$bin" -v 2>&1 | head -n1)"
printf '%s\n' "$bin"
