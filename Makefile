# flint: build, generate, test, bench, lint.
# sudo's secure_path often lacks Go's default install location.
export PATH := $(PATH):/usr/local/go/bin
GO      ?= go
CLANG   ?= clang-19
BIN     := bin/flint
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

.PHONY: all build run deps deps-chdb check generate vmlinux test test-short bench lint fuzz clean web web-test

all: build

# flint's main job: the agent, profiling every process into /var/lib/flint,
# with its API and web UI on http://127.0.0.1:7070/.
run: build
	$(BIN) agent

# What the tests and `make generate` need on a fresh Debian machine (root).
# clickhouse-server: the ClickHouse store's tests start their own servers.
# linux-perf, redis-server, redis-tools: unwinding is checked against perf
# --call-graph dwarf, on a fixture and on a packaged daemon under load.
# python3: Python frames are checked on the distribution's interpreter too.
DEB_PACKAGES := gcc g++ libc6-dev make util-linux clang-19 llvm-19 bpftool libbpf-dev chromium clickhouse-server \
	linux-perf redis-server redis-tools default-jdk-headless python3 python3-pip
deps:
	@if ! dpkg -s $(DEB_PACKAGES) >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEB_PACKAGES); \
	fi
	$(GO) mod download
	@# py-spy: the Python tests compare flint's frames with its.
	command -v py-spy >/dev/null || python3 -m pip install -q --root-user-action=ignore --break-system-packages --prefix /usr/local py-spy

# chdb, a current ClickHouse in-process (~300 MB with numpy, pandas and
# pyarrow): TestChdb replays the ClickHouse store's SQL in it and skips
# without it. Apart from deps because of its size.
deps-chdb:
	python3 -c 'import chdb' 2>/dev/null || pip install chdb-core

# Install what the tests need, then run every suite: Go's, the web UI's unit
# tests, its browser tests. A failing suite does not stop the next; the
# target fails at the end if any failed. Each suite's log (and vitest's JSON
# report) goes to $(RESULTS), from which .ci/count counts the tests.
RESULTS ?= test-results/check
check: deps web/node_modules/.package-lock.json
	@rm -rf $(RESULTS) && mkdir -p $(RESULTS); failed=; \
	suite() { name=$$1; shift; \
		{ "$$@" 2>&1; echo $$? > $(RESULTS)/$$name.status; } | tee $(RESULTS)/$$name.log; \
		test "$$(cat $(RESULTS)/$$name.status)" = 0 || failed="$$failed $$name"; }; \
	suite go $(GO_TEST) -v; \
	suite web-unit sh -c 'cd web && npm test -- $(VITEST_REPORT)/web-unit.json'; \
	suite web-e2e sh -c 'cd web && npm run test:e2e -- $(VITEST_REPORT)/web-e2e.json'; \
	set -- $$(.ci/count $(RESULTS)); echo "check: $$1 passed, $$2 failed, $$3 skipped"; \
	test -z "$$failed" || { echo "check: failed:$$failed" >&2; exit 1; }

# vitest's usual output, plus a JSON report (the file name follows).
VITEST_REPORT = --reporter=default --reporter=json --outputFile.json=$(abspath $(RESULTS))

build:
	# No cgo: flint needs none, and only a cgo-free binary can drop its
	# capabilities on every thread (internal/privilege).
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/flint

# Rebuild the bpf2go objects from bpf/ (needs clang-19 and libbpf-dev). They
# are committed so `go build` needs no clang; CI checks they are current.
generate:
	$(GO) generate ./internal/...

# Dump this machine's kernel types into bpf/vmlinux.h (needs bpftool). Only
# when the BPF C needs a type the committed file lacks: CO-RE relocates field
# offsets at load time, and the dump differs between kernel builds, so it is
# not regenerated as a matter of course.
vmlinux:
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/vmlinux.h

# Every test; those that load BPF need root and skip with the reason otherwise.
# One package at a time: the BPF tests measure CPU shares of fixtures, which
# other packages' tests would compete with on a small machine. cmd/flint's
# end-to-end tests take 585-606 s on a 2-CPU machine as root (CI runs of
# 2026-11-27), about go test's default limit of 10 minutes a package (a run
# at 600.0 s was killed there): the limit is 30.
GO_TEST = $(GO) test -count=1 -p 1 -timeout 30m ./...
test:
	$(GO_TEST)

test-short:
	$(GO) test -short ./...

# The whole-machine comparison with bcc profile and perf (root; see
# docs/BENCHMARKS.md), then the Go micro-benchmarks.
bench: build
	bench/record.sh
	$(GO) test -run '^$$' -bench . -benchmem ./internal/...

lint:
	@# Fails when gofmt names a file (dash's `read` needs a name: `! read` alone always passed).
	test -z "$$(gofmt -l . | tee /dev/stderr)"
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	@# vmlinux.h is generated (make vmlinux): not ours to format.
	clang-format-19 --dry-run --Werror bpf/*.c $(filter-out bpf/vmlinux.h,$(wildcard bpf/*.h))

# Each fuzz target for a while (FUZZTIME=1m by default).
FUZZTIME ?= 1m
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for t in $$($(GO) test -list 'Fuzz.*' $$pkg | grep ^Fuzz); do \
			$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

# The web UI: TypeScript in web/, built into internal/webui/dist, which is
# committed so `go build` needs no node (node >= 20.19 and npm do). The build
# is deterministic: CI rebuilds it and fails if it differs.
web: web/node_modules/.package-lock.json
	cd web && npm run build

# The UI's unit tests, then its browser tests: Debian's chromium (or
# $$CHROMIUM) driven by playwright-core against a real agent with fixture
# data. Those need root and skip with the reason otherwise. Screenshots
# and draw times go to web/test-results/.
web-test: web/node_modules/.package-lock.json
	cd web && npm test && npm run test:e2e

web/node_modules/.package-lock.json: web/package.json web/package-lock.json
	cd web && npm ci --no-audit --no-fund

clean:
	rm -rf bin
