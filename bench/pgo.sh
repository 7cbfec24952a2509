#!/usr/bin/env bash
# pgo.sh: does a profile flint records make go build -pgo produce faster
# code? Builds testdata/fixtures/pgo without a profile, records it with
# flint for 10 s (-o default.pgo), builds it again with that profile, then
# runs each build's hot loop ROUNDS times (default 5), alternating, and
# prints the CPU time of each run.
#
#	sudo bench/pgo.sh
#	sudo ROUNDS=9 N=4000 bench/pgo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) -eq 0 ]] || { echo "pgo: needs root (flint record)" >&2; exit 1; }
rounds=${ROUNDS:-5}; n=${N:-3000}
tmp=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
CGO_ENABLED=0 go build -o "$tmp/flint" ./cmd/flint
go build -pgo=off -o "$tmp/nopgo" ./testdata/fixtures/pgo
"$tmp/nopgo" spin 15s >/dev/null & sleep 1
"$tmp/flint" record -p $! -d 10s -o "$tmp/default.pgo" 2>&1 | tail -1
go build -pgo="$tmp/default.pgo" -o "$tmp/pgo" ./testdata/fixtures/pgo
for _ in $(seq "$rounds"); do
	echo "no profile:   $("$tmp/nopgo" work "$n")"
	echo "flint's PGO:  $("$tmp/pgo" work "$n")"
done
