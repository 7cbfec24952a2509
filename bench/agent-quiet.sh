#!/usr/bin/env bash
# agent-quiet.sh: the agent's cost on the node as it is, without and with
# some flags, alternating: for a quiet node, where bench/agent.sh's
# fixtures and store replay would be the load.
#
#	sudo bench/agent-quiet.sh --off-cpu          # 2 rounds of 60 s each
#	sudo ROUNDS=3 SECS=120 bench/agent-quiet.sh "--off-cpu --off-cpu-sample 10"
#
# Each run: a fresh agent on an empty data directory, WARMUP s (20), then
# its threads' run time (/proc/PID/task/*/schedstat) and its BPF programs'
# (flint_bpf_run_seconds_total) over SECS, and the load average.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) -eq 0 ]] || { echo "agent-quiet: needs root" >&2; exit 1; }
rounds=${ROUNDS:-2}; secs=${SECS:-60}; warmup=${WARMUP:-20}; port=${PORT:-7094}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/flint" ./cmd/flint

cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {print s}'; }
bpf_s() { curl -s "127.0.0.1:$port/metrics" | awk '/^flint_bpf_run_seconds_total/ {print $2}'; }

run() { # flags...
	local dir pid c0 b0 t0 c1 b1 t1
	dir=$(mktemp -d -p "$tmp")
	"$tmp/flint" agent --data-dir "$dir" --listen "127.0.0.1:$port" "$@" >"$dir/log" 2>&1 &
	pid=$!
	sleep "$warmup"
	kill -0 "$pid" 2>/dev/null || { cat "$dir/log" >&2; exit 1; }
	c0=$(cpu_ns "$pid"); b0=$(bpf_s); t0=$(date +%s.%N)
	sleep "$secs"
	c1=$(cpu_ns "$pid"); b1=$(bpf_s); t1=$(date +%s.%N)
	kill "$pid"; wait "$pid" 2>/dev/null || true
	awk -v c="$((c1 - c0))" -v b="$(awk -v a="$b0" -v z="$b1" 'BEGIN {print z - a}')" -v t0="$t0" -v t1="$t1" \
		-v n="$(nproc)" -v flags="${*:-(none)}" -v load="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN {
		d = t1 - t0; a = c / 1e9 / d * 100; p = b / d * 100
		printf "%-40s agent %.3f%% of a core, BPF %.3f%%, total %.3f%% of the machine (load %s)\n", flags, a, p, (a + p) / n, load
	}'
}

for _ in $(seq "$rounds"); do
	run
	run $1
done
