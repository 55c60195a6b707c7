#!/usr/bin/env bash
# Ensures redis-server is installed, installing Debian's `redis-server`
# package when it is missing. Idempotent. Prints the path of the binary as
# the last line of stdout so the Makefile and .ci/run can capture it:
#
#   HOPGATE_REDIS_BIN="$(bash deploy/redis/install.sh | tail -n1)"
#
# Tests never use a system server: internal/testkit/redistest starts its own
# redis-server per test on a loopback port, with no persistence, in a
# temporary directory. Debian's package would start one as a service on
# :6379, so we install with a policy-rc.d that forbids service starts and
# stop any an init system started anyway (deploy/lib/debian.sh).
set -euo pipefail

. "$(dirname "$0")/../lib/debian.sh"

if bin="$(command -v redis-server 2>/dev/null)"; then
	printf '%s\n' "$bin"
	exit 0
fi

apt_install "redis-server" redis-server
stop_service redis-server

if ! bin="$(command -v redis-server 2>/dev/null)"; then
	log "redis-server still missing after installing the Debian package"
	exit 1
fi
log "$("$bin" --version 2>&1 | head -n1)"
printf '%s\n' "$bin"
