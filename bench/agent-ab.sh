#!/usr/bin/env bash
# agent-ab.sh: the agent's CPU and BPF run time with two sets of flags,
# alternating, under the spin fixtures (one C and one Go per CPU).
#
#	sudo bench/agent-ab.sh "" "--doctor-every 0"     # the doctor's cost
#	sudo SECONDS_EACH=120 ROUNDS=2 bench/agent-ab.sh A-FLAGS B-FLAGS
#
# Each run: the agent starts, warms up 25 s, then its CPU (/proc/PID/stat)
# and flint_bpf_run_seconds_total (/metrics) are read over SECONDS_EACH.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) -eq 0 ]] || { echo "agent-ab: needs root" >&2; exit 1; }
secs=${SECONDS_EACH:-120}; rounds=${ROUNDS:-2}
tmp=$(mktemp -d); pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
go build -o "$tmp/flint" ./cmd/flint
gcc -O1 -fno-omit-frame-pointer -o "$tmp/spin" testdata/fixtures/spin.c
go build -o "$tmp/spin-go" ./testdata/fixtures/spin-go
for _ in $(seq "$(nproc)"); do
	"$tmp/spin" >/dev/null & pids+=($!)
	"$tmp/spin-go" >/dev/null & pids+=($!)
done
addr=127.0.0.1:7098
ticks=$(getconf CLK_TCK)
cpu() { awk -v t="$ticks" '{ c = substr($0, index($0, ")") + 2); split(c, f, " "); print (f[12] + f[13]) / t }' "/proc/$1/stat"; }
metric() { curl -s "http://$addr/metrics" | awk -v k="$1" '$1 == k { print $2 }'; }
run() {
	local data; data=$(mktemp -d -p "$tmp")
	# shellcheck disable=SC2086 # the flags are words
	"$tmp/flint" agent --data-dir "$data" --listen "$addr" $1 2>"$data.log" & local a=$!
	sleep 25
	local c0 b0 c1 b1; c0=$(cpu $a); b0=$(metric flint_bpf_run_seconds_total)
	sleep "$secs"
	c1=$(cpu $a); b1=$(metric flint_bpf_run_seconds_total)
	kill $a; wait $a || true
	awk -v f="$1" -v c0="$c0" -v c1="$c1" -v b0="$b0" -v b1="$b1" -v s="$secs" \
		'BEGIN { printf "flags [%s]: agent %.3f%%, BPF %.3f%% of one core\n", f, 100 * (c1 - c0) / s, 100 * (b1 - b0) / s }'
}
for _ in $(seq "$rounds"); do run "$1"; run "$2"; done
