#!/usr/bin/env bash
# Ensures Debian's `chromium` is installed, for the browser tests of the
# on-call page, the trace view and the status page (chromedp drives it).
# Idempotent. Prints the chromium binary path as the last line of stdout so
# the Makefile and .ci/run can capture it:
#
#   HOPGATE_CHROMIUM_BIN="$(bash deploy/chromium/install.sh | tail -n1)"
#
# Only Debian's package is used: a test tool's download of its own browser
# build cannot work on a machine that reaches package registries only.
set -euo pipefail

. "$(dirname "$0")/../lib/debian.sh"

find_bin() {
	local b
	for b in chromium chromium-browser; do
		if command -v "$b" >/dev/null 2>&1; then
			command -v "$b"
			return 0
		fi
	done
	return 1
}

if bin=$(find_bin); then
	echo "$bin"
	exit 0
fi

# fonts-liberation: the pages use the system sans-serif; without any font
# package screenshots render tofu boxes. Chromium ships no service.
apt_install chromium chromium fonts-liberation

if ! bin=$(find_bin); then
	log "chromium still missing after installing the Debian package"
	exit 1
fi
log "$("$bin" --version 2>/dev/null | head -n1)"
echo "$bin"
