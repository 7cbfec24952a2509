#!/usr/bin/env bash
# bpfcost.sh: the run time of flint's sample program per sample, from the
# kernel's BPF statistics, while both CPUs run the spin fixtures. Given
# several builds, it runs them in turn in every round.
#
#	sudo bench/bpfcost.sh [FLINT...]             # default bin/flint, 3 rounds
#	sudo FREQ=99 SECS=30 bench/bpfcost.sh A B    # at 99 Hz, 30 s a figure
#
# Each run: flint record -a for SECS + 4 s; bpftool reads the sample
# program's run_time_ns and run_cnt 2 s and SECS + 2 s after the start;
# prints ns per run over those SECS (default 5) seconds. ROUNDS (default 3)
# and FREQ (default 999 Hz) are environment variables.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/bpfprogs.sh
[[ $# -gt 0 ]] || set -- bin/flint
rounds=${ROUNDS:-3}; freq=${FREQ:-999}; secs=${SECS:-5}
[[ $(id -u) -eq 0 ]] || { echo "bpfcost: needs root" >&2; exit 1; }
for tool in bpftool jq gcc; do
	command -v $tool >/dev/null || { echo "bpfcost: needs $tool (apt-get install $tool)" >&2; exit 1; }
done
tmp=$(mktemp -d); pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; sysctl -qw kernel.bpf_stats_enabled=0; rm -rf "$tmp"; }
trap cleanup EXIT
gcc -O1 -fno-omit-frame-pointer -o "$tmp/spin" testdata/fixtures/spin.c
go build -o "$tmp/spin-go" ./testdata/fixtures/spin-go
"$tmp/spin" >/dev/null & pids+=($!)
"$tmp/spin-go" >/dev/null & pids+=($!)
sleep 1
sysctl -qw kernel.bpf_stats_enabled=1
for _ in $(seq "$rounds"); do
	for flint in "$@"; do
		"$flint" record -a -F "$freq" -d "$((secs + 4))s" -o "$tmp/out.folded" 2>/dev/null & f=$!
		sleep 2; a=$(sample_stats $f); sleep "$secs"; b=$(sample_stats $f)
		wait $f
		echo "$a $b" | awk -v f="$flint" -v hz="$freq" \
			'{ printf "%s, %d Hz: %.0f ns/run over %d runs\n", f, hz, ($3 - $1) / ($4 - $2), $4 - $2 }'
	done
done
