#!/usr/bin/env bash
# bpfcost.sh: the run time of flint's sample program per sample, from the
# kernel's BPF statistics, while both CPUs run the spin fixtures. Compare two
# builds by running it on each, alternating.
#
#	sudo bench/bpfcost.sh [FLINT] [ROUNDS]      # default bin/flint, 3 rounds
#	sudo FREQ=99 bench/bpfcost.sh               # at 99 Hz (default 999)
#
# Each round: flint record -a for 9 s; bpftool reads the sample program's
# run_time_ns and run_cnt 2 s and 7 s after the start; prints ns per run
# over those 5 s.
set -euo pipefail
cd "$(dirname "$0")/.."
flint=${1:-bin/flint}; rounds=${2:-3}; freq=${FREQ:-999}
[[ $(id -u) -eq 0 ]] || { echo "bpfcost: needs root" >&2; exit 1; }
tmp=$(mktemp -d); pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; sysctl -qw kernel.bpf_stats_enabled=0; rm -rf "$tmp"; }
trap cleanup EXIT
gcc -O1 -fno-omit-frame-pointer -o "$tmp/spin" testdata/fixtures/spin.c
go build -o "$tmp/spin-go" ./testdata/fixtures/spin-go
"$tmp/spin" >/dev/null & pids+=($!)
"$tmp/spin-go" >/dev/null & pids+=($!)
sleep 1
sysctl -qw kernel.bpf_stats_enabled=1
stats() { bpftool prog show name sample --json | jq -r '[.run_time_ns, .run_cnt] | @tsv'; }
for _ in $(seq "$rounds"); do
	"$flint" record -a -F "$freq" -d 9s -o "$tmp/out.folded" 2>/dev/null & f=$!
	sleep 2; a=$(stats); sleep 5; b=$(stats)
	wait $f
	echo "$a $b" | awk -v hz="$freq" '{ printf "%d Hz: %.0f ns/run over %d runs\n", hz, ($3 - $1) / ($4 - $2), $4 - $2 }'
done
