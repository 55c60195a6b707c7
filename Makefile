# hopgate — the two commands that matter: `make demo` and `make test`.
SHELL := /bin/bash
GO    ?= go
BIN   := bin
PKGS  := ./...
JAEGER_VERSION := v1.76.0
CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/hopgate
JAEGER_BIN := $(CACHE)/jaeger-$(JAEGER_VERSION)/jaeger
export HOPGATE_JAEGER_BIN := $(JAEGER_BIN)

.PHONY: all build test test-unit vet lint fmt-check demo dashboards replay jaeger prometheus postgres redis chromium nginx haproxy screenshots bench fuzz soak clean

all: build

build:
	$(GO) build -o $(BIN)/hopgate ./cmd/hopgate
	$(GO) build -o $(BIN)/fakeupstream ./cmd/fakeupstream

## test: vet, formatting, then every test with the race detector, including the
## end-to-end tests against a real Jaeger, a real Prometheus, a real
## PostgreSQL and a real Redis, the browser tests in Debian's Chromium, and
## hopbench's smoke run with nginx and HAProxy as its floor (built or
## installed here first, so a clean machine passes too). The stack-depth guard of open
## streams runs once more without the race detector, whose instrumentation
## changes frame sizes (it skips itself under -race).
test: fmt-check vet jaeger prometheus postgres redis chromium nginx haproxy
	HOPGATE_PROMETHEUS_BIN=$$(command -v prometheus) HOPGATE_PROMTOOL_BIN=$$(command -v promtool) \
		HOPGATE_NGINX_BIN=$$(bash deploy/nginx/install.sh | tail -n1) \
		HOPGATE_HAPROXY_BIN=$$(bash deploy/haproxy/install.sh | tail -n1) \
		HOPGATE_PG_BIN_DIR=$$(bash deploy/postgres/install.sh | tail -n1) \
		HOPGATE_REDIS_BIN=$$(bash deploy/redis/install.sh | tail -n1) \
		HOPGATE_CHROMIUM_BIN=$$(bash deploy/chromium/install.sh 2>/dev/null | tail -n1) \
		$(GO) test -race -timeout 20m $(PKGS)
	$(GO) test -count=1 -run '^TestStreamStackStaysSmall$$' ./dispatch

## test-unit: the fast loop, no external components.
test-unit:
	$(GO) test -race -short $(PKGS)

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

lint: fmt-check vet

## jaeger: build the pinned Jaeger v2 once, cached outside the clone.
jaeger:
	@bash deploy/jaeger/build.sh >/dev/null

## prometheus: install Prometheus and promtool (Debian package) when missing.
prometheus:
	@bash deploy/prometheus/install.sh >/dev/null

## postgres: install PostgreSQL's server (Debian package) when missing; tests
## run their own throwaway clusters, never the system one.
postgres:
	@bash deploy/postgres/install.sh >/dev/null

## redis: install Redis's server (Debian package) when missing; tests run
## their own throwaway servers, never the system one.
redis:
	@bash deploy/redis/install.sh >/dev/null

## chromium: install Debian's chromium (the browser tests drive it) when missing.
chromium:
	@bash deploy/chromium/install.sh >/dev/null

## nginx, haproxy: install Debian's nginx and HAProxy (the floor `make bench`
## measures against; hopbench starts its own on loopback) when missing.
nginx:
	@bash deploy/nginx/install.sh >/dev/null

haproxy:
	@bash deploy/haproxy/install.sh >/dev/null

## screenshots: the README's pictures of /admin, a trace view and /status,
## taken by the browser tests (docs/screenshots/*.png; commit them).
screenshots: chromium
	HOPGATE_CHROMIUM_BIN=$$(bash deploy/chromium/install.sh 2>/dev/null | tail -n1) \
		HOPGATE_SCREENSHOTS_DIR=$(CURDIR)/docs/screenshots \
		$(GO) test -count=1 -run 'TestOncallTilesDuringIncident|TestTraceViewFromFailoverLink|TestStatusShowsBadWindow' ./dispatch/browser

## dashboards: regenerate dashboards/generated/*.json.
dashboards:
	$(GO) run ./dashboards/cmd/gen

## replay: replay scripted incidents on virtual time, with and without early
## warning, and rewrite docs/early-warning.md (its defaults come from it).
replay:
	$(GO) run ./cmd/hopreplay

## demo: a real incident handled end to end (DEMO_ONESHOT=1 exits when done).
demo: jaeger
	$(GO) run ./cmd/hopgate demo --jaeger $(JAEGER_BIN)

clean:
	rm -rf $(BIN)

## bench: hopgate against direct, a bare reverse proxy, nginx and HAProxy,
## tracing on, and the tenant-limit rows in a throwaway Redis (about 20 minutes on 2
## cores, loopback only); rewrites docs/benchmarks.md.
## BENCH_PEERS=portkey adds Portkey's gateway; BENCH_FLAGS passes hopbench
## flags (-quick, -profile DIR).
bench: nginx haproxy redis
	HOPGATE_NGINX_BIN=$$(bash deploy/nginx/install.sh | tail -n1) \
		HOPGATE_HAPROXY_BIN=$$(bash deploy/haproxy/install.sh | tail -n1) \
		$(GO) run ./cmd/hopbench -out docs/benchmarks.md $(BENCH_FLAGS)

## fuzz: run every fuzz target for FUZZTIME each (corpora in testdata/fuzz).
FUZZTIME ?= 20s
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
		dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
		for fz in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do \
			echo "== $$pkg $$fz ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$fz$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

## soak: bounded mixed-traffic soak on loopback, under the memory ceiling of
## deploy/k8s (a peak RSS above the 512 MiB container limit fails) with
## a raised share of endless bodies and frames (docs/reliability.md).
## DURATION=10m for the long one (10 minutes peaked at 311 MiB at 50/s and 473 MiB at 250/s on two
## shared cores, with the soft limit at 90 %); MEMORY_LIMIT is the runtime's soft limit, 80 % of the 512 MiB
## container (as HOPGATE_MEMORY_LIMIT sets it), RSS_CEILING the container's (a peak above 90 % of it fails);
## MEMORY_LIMIT=0: no limit.
DURATION      ?= 60s
RATE          ?= 50
MEMORY_LIMIT  ?= 410MiB
RSS_CEILING   ?= 512MiB
ENDLESS_SHARE ?= 0.3
MAX_IN_FLIGHT ?= 2048
## WALLET=1: charge every request to a tenant's wallet (SQLite) and check the books after the drain.
WALLET        ?= 0
soak:
	$(GO) run ./cmd/hopsoak -duration $(DURATION) -rate $(RATE) -memory-limit $(MEMORY_LIMIT) \
		-rss-ceiling $(RSS_CEILING) -endless-share $(ENDLESS_SHARE) -max-in-flight $(MAX_IN_FLIGHT) \
		$(if $(filter 1,$(WALLET)),-wallet)
