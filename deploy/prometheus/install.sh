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
# service starts (the Debian mechanism honoured by invoke-rc.d and
# deb-systemd-invoke), and stop the service afterwards in case an init system
# started it anyway.
set -euo pipefail

log() { printf '%s\n' "$*" >&2; }

if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
	command -v prometheus
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=sudo
	else
		log "prometheus/promtool missing and not root (no sudo): install the 'prometheus' package by hand"
		exit 1
	fi
else
	SUDO=
fi

log "installing Debian package 'prometheus' (prometheus + promtool)"

# Forbid service starts during the install; keep an existing policy-rc.d.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
	$SUDO sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod 0755 $policy"
	created_policy=1
fi
cleanup() {
	if [ "$created_policy" = 1 ]; then
		$SUDO rm -f "$policy"
	fi
}
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >&2
$SUDO apt-get install -y -qq --no-install-recommends prometheus >&2

# Belt and braces: if an init system started the service regardless, stop it
# and keep it from starting at boot. Errors are expected where there is no
# init system (containers) and are ignored.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
	$SUDO systemctl disable --now prometheus.service >/dev/null 2>&1 || true
elif command -v service >/dev/null 2>&1; then
	$SUDO service prometheus stop >/dev/null 2>&1 || true
fi
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
