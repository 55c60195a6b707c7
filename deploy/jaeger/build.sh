#!/usr/bin/env bash
# Builds the Jaeger v2 all-in-one binary once and caches it outside the clone,
# keyed by version, so fresh clones, `git clean` and CI reuse it:
#
#   JAEGER_BIN="$(bash deploy/jaeger/build.sh | tail -n1)"
#
# The version comes from deploy/jaeger/go.mod (a separate module that pins
# github.com/jaegertracing/jaeger/cmd/jaeger as a go tool, so Jaeger's
# dependencies never leak into hopgate's go.mod). Bumping it there changes the
# cache key. The build goes to a temporary file renamed into place, so an
# interrupted build never leaves a binary that looks cached but is broken.
# HOPGATE_JAEGER_BIN, when set to an executable, short-circuits everything.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [ -n "${HOPGATE_JAEGER_BIN:-}" ] && [ -x "${HOPGATE_JAEGER_BIN}" ]; then
	printf '%s\n' "$HOPGATE_JAEGER_BIN"
	exit 0
fi

version="$(awk '$1 == "github.com/jaegertracing/jaeger" { print $2; exit }' "$here/go.mod")"
if [ -z "$version" ]; then
	echo "build.sh: cannot find github.com/jaegertracing/jaeger in $here/go.mod" >&2
	exit 1
fi

cache="${XDG_CACHE_HOME:-$HOME/.cache}/hopgate/jaeger-${version}"
bin="$cache/jaeger"

if [ -x "$bin" ]; then
	printf '%s\n' "$bin"
	exit 0
fi

mkdir -p "$cache"

# Serialise concurrent callers (make -j, parallel test packages): the second
# one waits for the first build instead of starting its own.
exec 9>"$cache/.lock"
if command -v flock >/dev/null 2>&1; then
	flock 9
fi
if [ -x "$bin" ]; then
	printf '%s\n' "$bin"
	exit 0
fi

echo "building Jaeger ${version} once (≈3–4 min on 2 cores), cached in ${cache}" >&2

tmp="$(mktemp "$cache/.jaeger.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
(
	cd "$here"
	# GOWORK=off: this module must build on its own, whatever workspace the
	# caller has. The -X stamps the version `jaeger version` reports (release
	# builds set it the same way); it only changes the link step, so a warm
	# Go build cache still makes a rebuild fast.
	GOWORK=off go build \
		-ldflags "-X github.com/jaegertracing/jaeger/internal/version.latestVersion=${version}" \
		-o "$tmp" github.com/jaegertracing/jaeger/cmd/jaeger
)
chmod 0755 "$tmp"
mv -f "$tmp" "$bin"
trap - EXIT
printf '%s\n' "$bin"
