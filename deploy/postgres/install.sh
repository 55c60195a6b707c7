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
# install with a policy-rc.d that forbids service starts (honoured by
# invoke-rc.d and deb-systemd-invoke), and stop any cluster an init system
# started anyway.
set -euo pipefail

log() { printf '%s\n' "$*" >&2; }

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

if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=sudo
	else
		log "initdb/pg_ctl missing and not root (no sudo): install the 'postgresql' package by hand"
		exit 1
	fi
else
	SUDO=
fi

log "installing Debian package 'postgresql' (initdb, pg_ctl, postgres)"

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
$SUDO apt-get install -y -qq --no-install-recommends postgresql >&2

# Belt and braces: if an init system started the service regardless, stop
# it and keep it from starting at boot. Errors are expected where there is
# no init system (containers) and are ignored.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
	$SUDO systemctl disable --now postgresql.service >/dev/null 2>&1 || true
elif command -v service >/dev/null 2>&1; then
	$SUDO service postgresql stop >/dev/null 2>&1 || true
fi
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
