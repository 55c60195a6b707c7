# Shared by deploy/*/install.sh: install a Debian package for the tests
# without leaving its system service running. Source it; it defines:
#
#   log MSG...              to stderr (stdout is the scripts' answer)
#   apt_install WHAT PKG... install PKG... as root (or with sudo), with a
#                           policy-rc.d that forbids service starts (the Debian
#                           mechanism honoured by invoke-rc.d and
#                           deb-systemd-invoke); WHAT names the missing tools
#                           in the error when neither root nor sudo is there
#   stop_service NAME       stop and disable NAME if an init system started
#                           it anyway (errors ignored: containers have none)
#
# Tests start their own servers on loopback ports chosen per test, never a
# system one.

log() { printf '%s\n' "$*" >&2; }

SUDO=

# as_root sets SUDO, or fails naming what is missing.
as_root() {
	if [ "$(id -u)" -eq 0 ]; then
		SUDO=
	elif command -v sudo >/dev/null 2>&1; then
		SUDO=sudo
	else
		log "$1 missing and not root (no sudo): install the Debian package(s) by hand"
		return 1
	fi
}

apt_install() {
	local what=$1
	shift
	as_root "$what" || return 1
	log "installing Debian package(s) $* ($what)"
	# Forbid service starts during the install; keep an existing policy-rc.d.
	local policy=/usr/sbin/policy-rc.d created=0 rc=0
	if [ ! -e "$policy" ]; then
		$SUDO sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod 0755 $policy"
		created=1
	fi
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 &&
		$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2 || rc=$?
	if [ "$created" = 1 ]; then
		$SUDO rm -f "$policy"
	fi
	return "$rc"
}

stop_service() {
	if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
		$SUDO systemctl disable --now "$1.service" >/dev/null 2>&1 || true
	elif command -v service >/dev/null 2>&1; then
		$SUDO service "$1" stop >/dev/null 2>&1 || true
	fi
}

# find_sbin NAME prints the path of NAME from PATH, else Debian's
# /usr/sbin/NAME (not on every user's PATH); fails when neither exists.
find_sbin() {
	local b
	for b in "$(command -v "$1" 2>/dev/null || true)" "/usr/sbin/$1"; do
		if [ -n "$b" ] && [ -x "$b" ]; then
			printf '%s\n' "$b"
			return 0
		fi
	done
	return 1
}
