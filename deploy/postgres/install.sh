#!/usr/bin/env bash
# Ensures PostgreSQL's server binaries (initdb, pg_ctl, postgres) are
# installed, installing Debian's `postgresql` package when they are missing.
# Idempotent. Prints the directory holding them as the last line of stdout so
# the Makefile and .ci/run can capture it:
#
#   HOPGATE_PG_BIN_DIR="$(bash deploy/postgres/install.sh | tail -n1)"
#
# Tests never use a system cluster: internal/testkit/pgtest runs initdb in a
# temporary directory and starts its own server on a loopback port. Debian's
# package creates a cluster and would start it as a service on :5432, so we
# install with a policy-rc.d that forbids service starts, and stop any
# cluster an init system started anyway (deploy/lib/debian.sh).
set -euo pipefail

. "$(dirname "$0")/../lib/debian.sh"

# bindir prints the newest directory holding initdb, pg_ctl and postgres:
# Debian's /usr/lib/postgresql/<major>/bin, else the one of initdb on PATH.
bindir() {
	local d
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5,5 -rn); do
		if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
			printf '%s\n' "$d"
			return 0
		fi
	done
	if d="$(command -v initdb 2>/dev/null)"; then
		d="$(dirname "$d")"
		if [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
			printf '%s\n' "$d"
			return 0
		fi
	fi
	return 1
}

if dir="$(bindir)"; then
	printf '%s\n' "$dir"
	exit 0
fi

apt_install "initdb/pg_ctl" postgresql
stop_service postgresql
if command -v pg_lsclusters >/dev/null 2>&1; then
	# Clusters of the package (not the tests' own, which pg_lsclusters does
	# not know): stop any that is online.
	pg_lsclusters --no-header 2>/dev/null | while read -r ver name _port status _rest; do
		case "$status" in
		online*) $SUDO pg_ctlcluster "$ver" "$name" stop >/dev/null 2>&1 || true ;;
		esac
	done
fi

if ! dir="$(bindir)"; then
	log "initdb/pg_ctl still missing after installing the Debian package"
	exit 1
fi
log "$("$dir/postgres" --version 2>&1 | head -n1)"
printf '%s\n' "$dir"
