#!/usr/bin/env bash
# agent-ab.sh: the agent's CPU and BPF run time with two sets of flags, or
# two builds, alternating, under the spin fixtures (one C and one Go per CPU)
# or none.
#
#	sudo bench/agent-ab.sh "" "--doctor-every 0"     # the doctor's cost
#	sudo SECONDS_EACH=120 ROUNDS=2 bench/agent-ab.sh A-FLAGS B-FLAGS
#	sudo A_BIN=/tmp/flint-old bench/agent-ab.sh "" ""  # another build as A
#	sudo CHURN=10 A_BIN=/tmp/flint-old bench/agent-ab.sh "" ""  # under churn
#	sudo LOAD=none CHURN=10 PHASE=60 bench/agent-ab.sh "" ""  # churn alone
#	sudo LOAD=none CHURN=1 CYCLES=6 bench/agent-ab.sh "" ""   # a new process's cost, resolved
#
# A_BIN and B_BIN default to a build of this checkout. With LOAD=none the
# spin fixtures do not run: what the agent spends on churn alone shows
# best on an otherwise quiet node. Each run: the agent starts, warms up
# WARMUP seconds (25; 150 with CHURN), then its CPU (the sum of its
# threads' run time in /proc/PID/task/*/schedstat, in ns) and
# flint_bpf_run_seconds_total (/metrics) are read over SECONDS_EACH; with
# CHURN=N, over PHASE seconds without and, after CHURN_WARM seconds of it,
# PHASE seconds with N new processes a second (bench/churn.sh), CYCLES
# times (1) with their mean and its standard error. The agent's CPU takes
# minutes to settle after its start (its store learning the node's
# stacks), which a churn figure, a difference, would take for the churn's.
# First it prints what touching 256 KiB costs right after sleeps of 1 ms
# to 1 s against back to back (bench/wake.c): on a VM that ratio moved
# from day to day, and the agent's CPU with it.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/churn.sh
[[ $(id -u) -eq 0 ]] || { echo "agent-ab: needs root" >&2; exit 1; }
secs=${SECONDS_EACH:-120}; rounds=${ROUNDS:-2}
tmp=$(mktemp -d); pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
go build -o "$tmp/flint" ./cmd/flint
a_bin=${A_BIN:-$tmp/flint}; b_bin=${B_BIN:-$tmp/flint}
gcc -O1 -fno-omit-frame-pointer -o "$tmp/spin" testdata/fixtures/spin.c
# What a wake-up costs on this machine today: the agent's figures move with it.
gcc -O2 -o "$tmp/wake" bench/wake.c
"$tmp/wake"
go build -o "$tmp/spin-go" ./testdata/fixtures/spin-go
LOAD=${LOAD:-spin}
[[ $LOAD == spin || $LOAD == none ]] || { echo "agent-ab: LOAD=$LOAD: want spin or none" >&2; exit 1; }
if [[ $LOAD == spin ]]; then
	for _ in $(seq "$(nproc)"); do
		"$tmp/spin" >/dev/null & pids+=($!)
		"$tmp/spin-go" >/dev/null & pids+=($!)
	done
fi
addr=127.0.0.1:7098
run() { # binary flags
	local data; data=$(mktemp -d -p "$tmp")
	# shellcheck disable=SC2086 # the flags are words
	"$1" agent --data-dir "$data" --listen "$addr" $2 2>"$data.log" & local a=$!
	sleep "${WARMUP:-$((CHURN > 0 ? 150 : 25))}"
	if ((CHURN > 0)); then
		echo "$1 [$2]: $(churn_phases $a)"
		kill $a; wait $a || true
		return
	fi
	local c0 b0 n0 c1 b1 n1
	c0=$(agent_cpu $a); b0=$(metric flint_bpf_run_seconds_total); n0=$(metric flint_samples_total)
	sleep "$secs"
	c1=$(agent_cpu $a); b1=$(metric flint_bpf_run_seconds_total); n1=$(metric flint_samples_total)
	kill $a; wait $a || true
	awk -v bin="$1" -v f="$2" -v c0="$c0" -v c1="$c1" -v b0="$b0" -v b1="$b1" -v n0="$n0" -v n1="$n1" -v s="$secs" 'BEGIN {
		printf "%s [%s]: agent %.3f%%, BPF %.3f%% of one core (%.2f us a sample)\n",
			bin, f, 100 * (c1 - c0) / s, 100 * (b1 - b0) / s, 1e6 * (b1 - b0) / (n1 - n0) }'
}
for _ in $(seq "$rounds"); do run "$a_bin" "$1"; run "$b_bin" "$2"; done
