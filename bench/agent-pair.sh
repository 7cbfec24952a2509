#!/usr/bin/env bash
# agent-pair.sh: two agent builds side by side, both seeing the same new
# processes: each one's CPU per new process, with its idle rate (measured
# IDLE seconds before and IDLE seconds after the processes) taken off.
#
#	sudo bench/agent-pair.sh A_BIN B_BIN                  # 300 python3 runs, ten a second
#	sudo RUNS=120 CHURN=1 bench/agent-pair.sh A_BIN B_BIN  # 120 runs, one a second
#	sudo CHURN_WITH=brief bench/agent-pair.sh A_BIN B_BIN  # testdata/fixtures/brief.c
#	sudo CHURN=1 CHURN_WITH=control bench/agent-pair.sh A_BIN B_BIN  # no new process: the control
#	sudo RUNS=10 CHURN_EVERY=60 bench/agent-pair.sh A_BIN B_BIN  # one run a minute, as cron runs one
#
# With CHURN_WITH=control no process is new: one long-lived process burns
# what a python3 run burns, CHURN times a second (bench/churn.sh), and "a
# new process" reads "a round": what sampling a run's CPU costs anyway.
#
# Each agent's BPF programs' run time a new process (its
# flint_bpf_run_seconds_total, read the same way) follows its own. It also
# prints each agent's share of a core while the processes ran, idle
# included, and the work their last window left for the seconds after
# them (less the idle rate there) too: where the idle rate is large and moves (a VM whose wake-ups
# are dear), an agent that wakes for the new processes anyway pays part of
# it inside the runs, and the difference per process says less than the
# share itself.
#
# Side by side, the two share the machine's hour: on a VM whose cost of
# waking moves from hour to hour (bench/wake.c), builds run one after the
# other differ by less than runs do. Each agent runs with the doctor off
# (its examination once a minute lands in one phase or another). Its CPU
# is the sum of its threads' run time (/proc/PID/task/*/schedstat); its
# voluntary context switches are counted over the runs, idle included.
# The new processes are bench/churn.sh's (CHURN_WITH), started as it
# starts them.
set -euo pipefail
cd "$(dirname "$0")/.."
(($# == 2)) || { echo "usage: agent-pair.sh A_BIN B_BIN" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "agent-pair: needs root" >&2; exit 1; }
command -v curl >/dev/null || { echo "agent-pair: needs curl (apt-get install curl)" >&2; exit 1; }
CHURN=${CHURN:-10}
source bench/churn.sh
((CHURN > 0)) || { echo "agent-pair: CHURN=$CHURN: want new processes a second" >&2; exit 1; }
runs=${RUNS:-300} warm=${WARMUP:-120} idle=${IDLE:-60}
bins=("$1" "$2") pids=() dirs=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "${dirs[@]}"; }
trap cleanup EXIT

switches() { cat /proc/"$1"/task/*/status | awk '/^voluntary_ctxt/ { n += $2 } END { print n }'; }
# bpf PORT: the BPF run time of the agent listening on PORT, in seconds.
bpf() { curl -s "http://127.0.0.1:$1/metrics" | awk '$1 == "flint_bpf_run_seconds_total" { print $2 }'; }
now() { date +%s.%N; }
for i in 0 1; do
	dirs+=("$(mktemp -d)")
	"${bins[i]}" agent --data-dir "${dirs[i]}" --listen 127.0.0.1:$((7191 + i)) --doctor-every 0 >/dev/null 2>&1 &
	pids+=($!)
done
# The readings' own programs, run early in the warm-up (learn): the agents
# learn them (curl's libraries, their unwind tables) then, not in the idle
# minute before the runs, whose rate that made four to nine times the
# rate after them (docs/BENCHMARKS.md).
readings() { echo "$(agent_cpu "${pids[0]}") $(switches "${pids[0]}") $(now) $(bpf 7191) $(bpf 7192) $(stat -c %s /dev/null) $(rm "$(mktemp)")"; }
sleep 10
learn readings
# The new processes' program too: its first run costs the agent what
# learning a program costs (its files, symbols and tables, 24-31 ms for
# python3), once, which over RUNS runs read as 0.08 ms a run more. What
# the idle minute after makes it forget is the runs' to pay again.
learn "${churn_cmd[@]}"
sleep "$((warm > 15 ? warm - 15 : 0))"
read -r a0 b0 pa0 pb0 <<<"$(agent_cpu "${pids[0]}") $(agent_cpu "${pids[1]}") $(bpf 7191) $(bpf 7192)"
sleep "$idle"
read -r a1 b1 sa1 sb1 t1 pa1 pb1 <<<"$(agent_cpu "${pids[0]}") $(agent_cpu "${pids[1]}") $(switches "${pids[0]}") $(switches "${pids[1]}") $(now) $(bpf 7191) $(bpf 7192)"
count=$(mktemp); dirs+=("$count")
churn_start "$count"
sleep "$(awk -v n="$runs" -v i="$(churn_interval)" 'BEGIN { print n * i }')" # RUNS, about
churn_stop
ts=$(now)
# The last runs end, and the window that holds their samples is named and
# written (10 s windows): that work is the runs', not the idle minute's.
sleep 12
read -r a2 b2 sa2 sb2 t2 pa2 pb2 <<<"$(agent_cpu "${pids[0]}") $(agent_cpu "${pids[1]}") $(switches "${pids[0]}") $(switches "${pids[1]}") $(now) $(bpf 7191) $(bpf 7192)"
sleep "$idle"
read -r a3 b3 pa3 pb3 <<<"$(agent_cpu "${pids[0]}") $(agent_cpu "${pids[1]}") $(bpf 7191) $(bpf 7192)"
runs=$(stat -c %s "$count") # started, to the one
awk -v runs="$runs" -v idle="$idle" -v t1="$t1" -v t2="$t2" -v ts="$ts" \
	-v a="${bins[0]}" -v a0="$a0" -v a1="$a1" -v a2="$a2" -v a3="$a3" -v sa1="$sa1" -v sa2="$sa2" \
	-v pa0="$pa0" -v pa1="$pa1" -v pa2="$pa2" -v pa3="$pa3" \
	-v b="${bins[1]}" -v b0="$b0" -v b1="$b1" -v b2="$b2" -v b3="$b3" -v sb1="$sb1" -v sb2="$sb2" \
	-v pb0="$pb0" -v pb1="$pb1" -v pb2="$pb2" -v pb3="$pb3" '
# perProcess: what the runs cost over the idle rate, a run, in ms.
function perProcess(c0, c1, c2, c3) { return (c2 - c1 - (c1 - c0 + c3 - c2) / (2 * idle) * (t2 - t1)) / runs * 1000 }
function row(name, c0, c1, c2, c3, s1, s2, p0, p1, p2, p3,   rate) {
	rate = (c1 - c0 + c3 - c2) / (2 * idle)
	printf "%s: %.3f ms a new process + BPF %.3f ms (%d started); idle %.3f%% of a core (%.3f before, %.3f after); %.3f%% of a core during the runs; %.1f switches a process\n",
		name, perProcess(c0, c1, c2, c3), perProcess(p0, p1, p2, p3), runs, rate * 100, (c1 - c0) / idle * 100, (c3 - c2) / idle * 100,
		(c2 - c1 - rate * (t2 - ts)) / (ts - t1) * 100, (s2 - s1) / runs
}
BEGIN { row(a, a0, a1, a2, a3, sa1, sa2, pa0, pa1, pa2, pa3); row(b, b0, b1, b2, b3, sb1, sb2, pb0, pb1, pb2, pb3) }'
