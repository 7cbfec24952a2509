#!/usr/bin/env bash
# agent-minutes.sh: one agent under churn for MINUTES minutes, minute by
# minute: its CPU and its BPF programs' a new process, as they are and
# less their idle rate (IDLE seconds before the churn, after WARMUP
# seconds), and the rows its store gained a new process. agent-pair.sh's
# figures come from an agent's first minutes; these say whether they hold
# once it has seen the node's programs a while (the store gains fewer new
# functions and locations as it does).
#
#	sudo bench/agent-minutes.sh AGENT_BIN             # python3 runs, ten a second, 12 minutes
#	sudo MINUTES=30 CHURN=1 bench/agent-minutes.sh AGENT_BIN
#
# The machine should be left alone: every program run beside it is new to
# the agent too.
set -euo pipefail
cd "$(dirname "$0")/.."
(($# == 1)) || { echo "usage: agent-minutes.sh AGENT_BIN" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "agent-minutes: needs root" >&2; exit 1; }
for tool in curl sqlite3; do
	command -v "$tool" >/dev/null || { echo "agent-minutes: needs $tool (apt-get install $tool)" >&2; exit 1; }
done
CHURN=${CHURN:-10}
source bench/churn.sh
((CHURN > 0)) || { echo "agent-minutes: CHURN=$CHURN: want new processes a second" >&2; exit 1; }
minutes=${MINUTES:-12} warm=${WARMUP:-120} idle=${IDLE:-60}
[[ $minutes =~ ^[0-9]+$ && $minutes -ge 1 ]] || { echo "agent-minutes: MINUTES=$minutes: want at least 1" >&2; exit 1; }
[[ $warm =~ ^[0-9]+$ && $warm -ge 15 && $idle =~ ^[0-9]+$ && $idle -ge 10 ]] ||
	{ echo "agent-minutes: WARMUP=$warm IDLE=$idle: want whole seconds, at least 15 and 10" >&2; exit 1; }
addr=127.0.0.1:7291
dir=$(mktemp -d) count=$(mktemp) churn_pid=
"$1" agent --data-dir "$dir" --listen "$addr" --doctor-every 0 >/dev/null 2>&1 &
agent=$!
cleanup() { churn_stop; kill "$agent" 2>/dev/null || true; rm -rf "$dir" "$count"; }
trap cleanup EXIT

# reading: seconds, the agent's CPU and BPF seconds, and its store's rows
# (label sets, stacks, locations, functions), on one line.
reading() {
	echo "$(date +%s.%N) $(agent_cpu "$agent") $(metric flint_bpf_run_seconds_total)" \
		"$(sqlite3 -readonly -separator ' ' "$dir/flint.db" 'select (select count(*) from labelsets),
			(select count(*) from stacks), (select count(*) from locations),
			(select count(*) from functions)' 2>/dev/null || echo 0 0 0 0)"
}
readings() { echo "$(reading) $(stat -c %s "$count")"; }
sleep 10
learn readings
sleep $((warm - 15))
read -r t0 c0 p0 _ <<<"$(reading)"
sleep "$idle"
read -r t1 c1 p1 r1 <<<"$(reading)"
awk -v c0="$c0" -v c1="$c1" -v p0="$p0" -v p1="$p1" -v t="$t0" -v u="$t1" \
	'BEGIN { printf "idle: agent %.3f%% of a core, BPF %.3f%%\n", (c1 - c0) / (u - t) * 100, (p1 - p0) / (u - t) * 100 }'
churn_start "$count"
started=0 prev="$t1 $c1 $p1 $r1"
for m in $(seq "$minutes"); do
	sleep 60
	now=$(reading) n=$(stat -c %s "$count")
	awk -v m="$m" -v runs=$((n - started)) -v prev="$prev" -v now="$now" \
		-v t0="$t0" -v c0="$c0" -v p0="$p0" -v t1="$t1" -v c1="$c1" -v p1="$p1" 'BEGIN {
		split(prev, a, " "); split(now, b, " "); dt = b[1] - a[1]
		ci = (c1 - c0) / (t1 - t0); pi = (p1 - p0) / (t1 - t0) # idle rates
		printf "minute %d: %d started; a new process: agent %.3f ms (%.3f less idle), BPF %.3f ms (%.3f); rows gained: %.2f label sets, %.2f stacks, %.2f locations, %.2f functions\n",
			m, runs, (b[2] - a[2]) / runs * 1000, (b[2] - a[2] - ci * dt) / runs * 1000,
			(b[3] - a[3]) / runs * 1000, (b[3] - a[3] - pi * dt) / runs * 1000,
			(b[4] - a[4]) / runs, (b[5] - a[5]) / runs, (b[6] - a[6]) / runs, (b[7] - a[7]) / runs }'
	started=$n prev=$now
done
