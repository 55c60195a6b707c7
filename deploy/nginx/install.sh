#!/usr/bin/env bash
# Ensures an nginx binary is installed, installing Debian's `nginx` package
# when it is missing. Idempotent. Prints the binary's path as the last line of
# stdout so the Makefile and hopbench can capture it:
#
#   HOPGATE_NGINX_BIN="$(bash deploy/nginx/install.sh | tail -n1)"
#
# nginx is one of the floors `make bench` measures hopgate against
# (docs/benchmarks.md): hopbench writes its own config and starts it on a
# loopback port. Debian's package would start a service on :80, so we install
# with a policy-rc.d that forbids service starts and stop it in case an init
# system started it anyway (deploy/lib/debian.sh).
set -euo pipefail

. "$(dirname "$0")/../lib/debian.sh"

if bin="$(find_sbin nginx)"; then
	printf '%s\n' "$bin"
	exit 0
fi

apt_install "nginx" nginx
stop_service nginx
if command -v pgrep >/dev/null 2>&1; then
	# The package's own master runs from its default config; ours never do.
	for pid in $(pgrep -f '^nginx: master process /usr/sbin/nginx$' 2>/dev/null || true); do
		$SUDO kill "$pid" 2>/dev/null || true
	done
fi

if ! bin="$(find_sbin nginx)"; then
	log "nginx still missing after installing the Debian package"
	exit 1
fi
log "$("$bin" -v 2>&1 | head -n1)"
printf '%s\n' "$bin"
