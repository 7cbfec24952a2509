#!/usr/bin/env bash
# python-warm.sh: what a python3 run's CPU time costs to sample when its
# process is not new. bench/churn.sh's python3 run imports a few modules
# and sums a range; here one long-lived python3 does the same over and
# over (dropping the modules from sys.modules so that each round imports
# them again), beside an agent. The agent's and its BPF programs' CPU
# over it, less their idle rate after it, per CPU-second of the python3
# and per CPU time of one churn run (measured here). Not what a run would
# cost were it not new: a run's CPU is mostly the interpreter's start and
# exit, whose samples are three times as deep (bench/sample-parts.sh), so
# bench/agent-pair.sh's figure a run less this is more than being new
# costs. Each round's imports make new code objects, which the agent then
# reads from the process's memory: its agent figure is more than a
# long-lived service, whose code objects settle, costs (docs/BENCHMARKS.md).
#
#	sudo bench/python-warm.sh AGENT_BIN                # 60 s busy, 60 s idle
#	sudo SECS=120 bench/python-warm.sh AGENT_BIN
#	sudo DEPTH=30 bench/python-warm.sh AGENT_BIN       # each round 30 calls deep
set -euo pipefail
cd "$(dirname "$0")/.."
(($# == 1)) || { echo "usage: python-warm.sh AGENT_BIN" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "python-warm: needs root" >&2; exit 1; }
command -v curl >/dev/null || { echo "python-warm: needs curl (apt-get install curl)" >&2; exit 1; }
[[ ${CHURN_WITH:-python} == python ]] || { echo "python-warm: CHURN_WITH=$CHURN_WITH: python only" >&2; exit 2; }
CHURN=1
source bench/churn.sh # churn_cmd, run_cpu, python_again, agent_cpu
secs=${SECS:-60}
dir=$(mktemp -d) pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

# bpf: the agent's BPF programs' run time, seconds.
bpf() { curl -s "http://127.0.0.1:7491/metrics" | awk '$1 == "flint_bpf_run_seconds_total" { print $2 }'; }

run_cpu=$(run_cpu 20 | awk '{ print $1 }') # seconds, the mean of 20 runs

"$1" agent --data-dir "$dir" --listen 127.0.0.1:7491 --doctor-every 0 >/dev/null 2>&1 &
pids+=($!)
agent=$!
readings() { echo "$(agent_cpu $agent) $(bpf)"; }
sleep 10
learn readings # their programs learned now, not in the phases
sleep 75       # its start's work done
"${churn_cmd[0]}" -c "$python_again" "${DEPTH:-0}" &
pids+=($!)
py=$!
sleep 10 # past its first second, when it is young
a0=$(agent_cpu $agent) b0=$(bpf) p0=$(agent_cpu $py)
sleep "$secs"
a1=$(agent_cpu $agent) b1=$(bpf) p1=$(agent_cpu $py)
kill $py
sleep 12 # the window that holds its last samples written: not idle work
a2=$(agent_cpu $agent) b2=$(bpf)
sleep "$secs"
a3=$(agent_cpu $agent) b3=$(bpf)
awk -v s="$secs" -v run="$run_cpu" -v a0="$a0" -v a1="$a1" -v a2="$a2" -v a3="$a3" \
	-v b0="$b0" -v b1="$b1" -v b2="$b2" -v b3="$b3" -v p0="$p0" -v p1="$p1" 'BEGIN {
	py = p1 - p0
	a = (a1 - a0) - (a3 - a2); b = (b1 - b0) - (b3 - b2) # equal spans: less the idle rate after
	printf "a long-lived python3 importing again and again: %.1f CPU-s in %d s\n", py, s
	printf "agent: idle %.3f%% of a core; %.3f ms a CPU-second of it, %.3f ms a churn run (%.1f ms of CPU)\n", (a3 - a2) / s * 100, a / py * 1000, a / py * run * 1000, run * 1000
	printf "BPF:   idle %.3f%% of a core; %.3f ms a CPU-second of it, %.3f ms a churn run\n", (b3 - b2) / s * 100, b / py * 1000, b / py * run * 1000
}'
