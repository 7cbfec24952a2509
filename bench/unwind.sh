#!/usr/bin/env bash
# unwind.sh: what walking stacks without frame pointers costs, side by side
# in one run, each case on a fixture busy on every CPU:
#   fp        flint on spin.c built with frame pointers, --unwind-memory 0
#             (the kernel's walk; with tables its .eh_frame rows would be used)
#   fp-deep   flint on the nofp fixture built with frame pointers (the same
#             walk, as deep as the fixture's stacks reach through libc)
#   nofp-fp   flint on the nofp fixture with --unwind-memory 0 (the same
#             walk, which stops after a frame or two: the cost of a cut stack)
#   nofp      flint on the nofp fixture with its unwind tables
#   nofp-cc   flint on the C++ nofp fixture with its unwind tables
#   perf      perf record --call-graph dwarf on the nofp fixture
#
#	sudo bench/unwind.sh                      # 999 Hz, 10 s a case, 3 rounds
#	sudo FREQ=99 SECS=30 ROUNDS=1 bench/unwind.sh
#
# For flint: the sample program's run time per run, from the kernel's BPF
# statistics, and the stack depth reached. For perf, whose work per sample
# is not a BPF program: the bytes it writes per sample (a record holds the
# whole 8 KiB of stack the kernel copies), and the CPU time of perf record
# and of perf report, which unwinds them, per sample.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/bpfprogs.sh
rounds=${ROUNDS:-3}; freq=${FREQ:-999}; secs=${SECS:-10}
[[ $(id -u) -eq 0 ]] || { echo "unwind: needs root" >&2; exit 1; }
for tool in bpftool jq gcc g++ perf; do
	command -v $tool >/dev/null || { echo "unwind: needs $tool (apt-get install $tool)" >&2; exit 1; }
done
tmp=$(mktemp -d); pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; sysctl -qw kernel.bpf_stats_enabled=0; rm -rf "$tmp"; }
trap cleanup EXIT
go build -o "$tmp/flint" ./cmd/flint
gcc -O1 -fno-omit-frame-pointer -o "$tmp/spin" testdata/fixtures/spin.c
gcc -O2 -fomit-frame-pointer -rdynamic -o "$tmp/nofp" testdata/fixtures/nofp/nofp.c
gcc -O2 -fno-omit-frame-pointer -rdynamic -o "$tmp/nofp-withfp" testdata/fixtures/nofp/nofp.c
gcc -O2 -fomit-frame-pointer -shared -fPIC -o "$tmp/plugin.so" testdata/fixtures/nofp/plugin.c
g++ -O2 -fomit-frame-pointer -o "$tmp/nofp-cc" testdata/fixtures/nofp/nofp.cc
sysctl -qw kernel.bpf_stats_enabled=1

# depth FOLDED: mean frames per sample.
depth() { awk '{ n = $NF; f = split($0, a, ";"); d += (f - 1) * n; s += n } END { printf "%.1f", d / s }' "$1"; }

# flint_case NAME FLINT-FLAGS COMMAND...: one fixture per CPU, so that
# nearly every run of the program is a sample of one, recorded with -a.
flint_case() {
	local name=$1 flags=$2; shift 2
	local fx=()
	for _ in $(seq "$(nproc)"); do
		"$@" >/dev/null & fx+=($!); pids+=($!)
	done
	sleep 0.5
	# shellcheck disable=SC2086
	"$tmp/flint" record -a -F "$freq" -d "$((secs + 3))s" $flags --no-kernel -o "$tmp/out.folded" 2>/dev/null & local f=$!
	sleep 2; local a; a=$(sample_stats $f); sleep "$secs"; local b; b=$(sample_stats $f)
	wait $f; kill "${fx[@]}"; wait "${fx[@]}" 2>/dev/null || true
	grep "^$(basename "$1");" "$tmp/out.folded" >"$tmp/fixture.folded" || true
	echo "$a $b" | awk -v n="$name" -v hz="$freq" -v d="$(depth "$tmp/fixture.folded")" \
		'{ printf "%-8s %d Hz: %5.0f ns/sample over %d samples, %s frames a stack\n", n, hz, ($3 - $1) / ($4 - $2), $4 - $2, d }'
}

perf_case() {
	"$tmp/nofp" "$tmp/plugin.so" >/dev/null & local fx=$!; pids+=($fx)
	sleep 0.5
	local TIMEFORMAT='%U %S' rec report
	rec=$( { time perf record -q -e cpu-clock -c $((1000000000 / freq)) --call-graph dwarf -p "$fx" \
		-o "$tmp/perf.data" -- sleep "$secs" >/dev/null 2>&1; } 2>&1 | tail -1)
	kill $fx; wait $fx 2>/dev/null || true
	local samples; samples=$(perf report -i "$tmp/perf.data" --stats 2>/dev/null | awk '/SAMPLE events:/ { print $3; exit }')
	local bytes; bytes=$(stat -c %s "$tmp/perf.data")
	report=$( { time perf report -i "$tmp/perf.data" --stdio >/dev/null 2>&1; } 2>&1 | tail -1)
	echo "$samples $bytes $rec $report" | awk -v hz="$freq" '{
		printf "perf     %d Hz: %5.0f bytes written/sample over %d samples; perf record %.2f s, perf report %.2f s of CPU: %.0f and %.0f us a sample\n",
			hz, $2 / $1, $1, $3 + $4, $5 + $6, ($3 + $4) * 1e6 / $1, ($5 + $6) * 1e6 / $1 }'
}

for _ in $(seq "$rounds"); do
	flint_case fp "--unwind-memory 0" "$tmp/spin"
	flint_case fp-deep "--unwind-memory 0" "$tmp/nofp-withfp" "$tmp/plugin.so"
	flint_case nofp-fp "--unwind-memory 0" "$tmp/nofp" "$tmp/plugin.so"
	flint_case nofp "" "$tmp/nofp" "$tmp/plugin.so"
	flint_case nofp-cc "" "$tmp/nofp-cc"
	perf_case
done
