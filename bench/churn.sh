# churn.sh: short-lived processes at a fixed rate, and what the agent
# spends on them; sourced by the agent benchmarks (agent.sh, agent-ab.sh,
# agent-pair.sh, agent-minutes.sh, python-warm.sh); some read the
# agent's metrics with its metric.
#
# Each new process is a real python3 run (a few imports, 33-66 ms of CPU:
# sampled three to six times at 99 Hz; by the agent's default, one tick
# in ten of a process's first second, once or not at all) started CHURN
# times a second whether the previous ones have finished or not. With
# CHURN_WITH=brief it is testdata/fixtures/brief.c instead: 30 ms of CPU on
# one shallow stack, the same every run, so the difference is what learning
# a process costs apart from the stacks it brings. CHURN_WITH=control starts
# no new process: one long-lived brief (with arguments) burns
# what a python3 run burns (the mean of ten, measured first) CHURN times a
# second, so what it costs is what sampling the runs' CPU costs, new
# processes or not, and the runs' cost above it is their being new. With
# CONTROL_MEMORY=1 each round also writes as much newly mapped memory as
# a run's peak RSS (measured with the CPU): a run's traffic through the
# caches, which the agent's next wake-up pays for, without a new process.
# churn_phases runs
# the agent with churn off then on, PHASE seconds each, and reports the
# agent's and its BPF programs' CPU in both and the CPU per new process
# (the difference over the processes started).

CHURN=${CHURN:-0}
PHASE=${PHASE:-60}
CHURN_WARM=${CHURN_WARM:-60}
[[ $CHURN =~ ^[0-9]+$ ]] || { echo "bench: CHURN=$CHURN: want new processes a second" >&2; exit 1; }
[[ $PHASE =~ ^[0-9]+$ && $PHASE -ge 10 ]] || { echo "bench: PHASE=$PHASE: want whole seconds, at least 10" >&2; exit 1; }
[[ $CHURN_WARM =~ ^[0-9]+$ ]] || { echo "bench: CHURN_WARM=$CHURN_WARM: want whole seconds" >&2; exit 1; }
# CHURN_EVERY=S starts one process every S seconds instead (churn_start
# only): a program run now and then, as cron and health checks run them.
CHURN_EVERY=${CHURN_EVERY:-}
[[ -z $CHURN_EVERY || $CHURN_EVERY =~ ^[0-9]+$ && $CHURN_EVERY -ge 1 ]] || { echo "bench: CHURN_EVERY=$CHURN_EVERY: want whole seconds" >&2; exit 1; }
[[ -z $CHURN_EVERY || ${CHURN_WITH:-python} != control ]] || { echo "bench: CHURN_EVERY: not with CHURN_WITH=control" >&2; exit 1; }
# churn_interval: the seconds between two new processes.
churn_interval() { if [[ -n $CHURN_EVERY ]]; then echo "$CHURN_EVERY"; else awk -v n="$CHURN" 'BEGIN { printf "%.3f", 1 / n }'; fi; }
CYCLES=${CYCLES:-1}
[[ $CYCLES =~ ^[0-9]+$ && $CYCLES -ge 1 ]] || { echo "bench: CYCLES=$CYCLES: want at least 1" >&2; exit 1; }
# CHURN_LEARN=S runs the churn S seconds before churn_phases' first
# cycle (default 0): a python3 run's samples bring stacks, locations and
# functions the store lacks for many minutes of runs (docs/BENCHMARKS.md).
CHURN_LEARN=${CHURN_LEARN:-0}
[[ $CHURN_LEARN =~ ^[0-9]+$ ]] || { echo "bench: CHURN_LEARN=$CHURN_LEARN: want whole seconds" >&2; exit 1; }
# brief_fixture: testdata/fixtures/brief.c built into a temporary
# directory; its path.
brief_fixture() {
	local bin
	bin=$(mktemp -d)/brief
	gcc -O1 -fno-omit-frame-pointer -o "$bin" "$(dirname "${BASH_SOURCE[0]}")/../testdata/fixtures/brief.c" ||
		{ echo "bench: CHURN_WITH=$CHURN_WITH needs gcc" >&2; return 1; }
	echo "$bin"
}
case ${CHURN_WITH:=python} in
python | control)
	# python3 may be a shim script (pyenv) that forks several processes
	# before it runs python: start the interpreter itself.
	churn_py=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null) ||
		{ echo "bench: CHURN needs python3" >&2; exit 1; }
	churn_cmd=("$churn_py" -c 'import json, decimal, random; sum(range(100000))')
	;;
brief)
	churn_bin=$(brief_fixture) || exit 1
	churn_cmd=("$churn_bin")
	;;
*) echo "bench: CHURN_WITH=$CHURN_WITH: want python, brief or control" >&2; exit 1 ;;
esac
# run_cpu N: the CPU time of one churn run in seconds, the mean of N runs,
# as the kernel counts it, and the largest peak RSS of a run in KiB.
run_cpu() {
	python3 -c '
import resource, subprocess, sys
n = int(sys.argv[1])
for _ in range(n):
    subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print((r.ru_utime + r.ru_stime) / n, r.ru_maxrss)' "$1" "${churn_cmd[@]}"
}
CONTROL_MEMORY=${CONTROL_MEMORY:-0}
[[ $CONTROL_MEMORY == 0 || $CONTROL_MEMORY == 1 ]] || { echo "bench: CONTROL_MEMORY=$CONTROL_MEMORY: want 0 or 1" >&2; exit 1; }
if [[ $CHURN_WITH == control ]]; then
	churn_steady=$(brief_fixture) || exit 1
	read -r churn_burn_ms churn_rss_kb <<<"$(run_cpu 10 | awk '{ printf "%.1f %d", $1 * 1000, $2 }')"
	((CONTROL_MEMORY)) || churn_rss_kb= # no KiB: brief writes no memory
	echo "bench: control: one process burning ${churn_burn_ms} ms of CPU${churn_rss_kb:+ and writing $churn_rss_kb KiB of new memory} $CHURN times a second" >&2
fi

# python_again: a python3 program that does a churn run's imports and sum
# over and over in one process, dropping the modules from sys.modules so
# that each round imports them again (python-warm.sh, sample-parts.sh);
# each round DEPTH (its first argument, default 0) Python calls deep, every
# fifth through C (sum over map), as a run's stacks are deep.
python_again='
import sys
again = ("json", "decimal", "_pydecimal", "random", "numbers", "bisect", "hashlib", "contextvars")
def imports(n):
    if n == 0:
        for m in [m for m in sys.modules if m.split(".")[0].lstrip("_") in again]:
            del sys.modules[m]
        import json, decimal, random; sum(range(100000))
        return 0
    if n % 5 == 0:
        return sum(map(imports, [n - 1]))
    return imports(n - 1)
depth = int(sys.argv[1]) if len(sys.argv) > 1 else 0
while True:
    imports(depth)'

# churn_start FILE: start CHURN processes a second in the background,
# appending a byte to FILE for each; churn_pid is the loop. With
# CHURN_WITH=control, the steady process, appending a byte a round.
churn_start() {
	local count=$1
	if [[ $CHURN_WITH == control ]]; then
		# shellcheck disable=SC2086 # no KiB: no word
		"$churn_steady" "$CHURN" "$churn_burn_ms" "$count" $churn_rss_kb &
		churn_pid=$!
		return
	fi
	(
		exec {never}<> <(:) # read -t on it sleeps without forking sleep
		interval=$(churn_interval)
		while :; do
			"${churn_cmd[@]}" >/dev/null 2>&1 &
			printf . >>"$count"
			read -rt "$interval" -u "$never" || true
		done
	) >/dev/null &
	churn_pid=$!
}

churn_stop() { kill "$churn_pid" 2>/dev/null || true; wait "$churn_pid" 2>/dev/null || true; }

# learn COMMAND...: runs COMMAND ten times, half a second apart, output
# dropped. A benchmark's readings run so in its warm-up: the agent learns a
# program (its files, unwind tables, symbols) once it samples it, and one
# short run is seldom sampled, so the first sample of a reading program
# could land in a measured phase (docs/BENCHMARKS.md).
learn() { for _ in {1..10}; do "$@" >/dev/null; sleep 0.5; done; }

# agent_cpu PID: the CPU seconds of PID's threads to the nanosecond, the
# sum of their run time in /proc/PID/task/*/schedstat (/proc/PID/stat's
# utime+stime count whole 10 ms ticks); 0 once it is gone, and a thread
# that exits between the glob and the read is not an error.
agent_cpu() { { cat /proc/"$1"/task/*/schedstat 2>/dev/null || true; } | awk '{ ns += $1 } END { printf "%.6f", ns / 1e9 }'; }

# metric NAME...: the agent's metrics (it listens on $addr), their values
# in the order asked (0 for one it does not report), from one read of
# /metrics: each curl is a new process the agent learns.
metric() {
	curl -s "http://$addr/metrics" | awk -v names="$*" 'BEGIN { n = split(names, want, " ") }
		{ v[$1] = $2 } END { for (i = 1; i <= n; i++) printf "%s%s", (want[i] in v ? v[want[i]] : 0), (i < n ? " " : "\n") }'
}

# churn_phases AGENT-PID: prints two lines a
# cycle: agent and BPF CPU (% of one core) with churn off and on, the
# processes started, and the agent+BPF CPU per new process in ms; then
# what a new process brings the BPF programs: the samples taken more, the
# BPF time of each, and the Python code objects copied. With CYCLES=N
# (default 1) it measures N cycles and ends with their mean and the
# standard error of the mean.
#
# Both phases are steady states. The churn runs CHURN_WARM seconds (60)
# before its phase is measured, and on through it: what a new process
# costs the agent after it is gone (its window written, its snapshot
# forgotten, the garbage it left collected) falls in the phase as it
# would on a node that always has churn, and a node that runs the same
# job every second has its files known already (its stacks, locations and
# functions only after many minutes of runs: CHURN_LEARN).
# From the second cycle on, the churn stops CHURN_WARM seconds before the
# phase without it, so that phase holds none of that tail either; so it
# does before the first after CHURN_LEARN seconds of churn.
#
# One cycle cannot resolve a fraction of a millisecond a process: the
# figure is a difference of two phases, and the agent's CPU without churn
# moves from phase to phase with what a wake-up costs on the machine
# (0.05-1.27% of a core in one day's runs on one VM, against 60 new
# processes a minute; docs/BENCHMARKS.md).
churn_phases() {
	local agent=$1 count off on warm end cycle results=""
	count=$(mktemp)
	if ((CHURN_LEARN > 0)); then
		churn_start "$count"
		sleep "$CHURN_LEARN"
	fi
	# A reading: agent CPU, BPF run time, samples, Python code objects
	# copied (one read of /metrics: each curl is a new process), runs started.
	reading() { echo "$(agent_cpu "$agent") $(metric flint_bpf_run_seconds_total flint_samples_total flint_python_codes_copied_total) $(stat -c %s "$count")"; }
	for ((cycle = 1; cycle <= CYCLES; cycle++)); do
		if ((cycle > 1 || CHURN_LEARN > 0)); then
			churn_stop
			sleep "$CHURN_WARM"
		fi
		off=$(reading)
		sleep "$PHASE"
		on=$(reading)
		churn_start "$count"
		sleep "$CHURN_WARM"
		warm=$(reading)
		sleep "$PHASE"
		end=$(reading)
		results+="$off|$on|$warm|$end"$'\n'
	done
	churn_stop
	rm -f "$count"
	printf %s "$results" | awk -F'|' -v s="$PHASE" -v cores="$(nproc)" '
	{
		split($1, a, " "); split($2, b, " "); split($3, c, " "); split($4, d, " ") # 1 CPU, 2 BPF, 3 samples, 4 copies, 5 runs
		n = d[5] - c[5]; off = b[1] - a[1] + b[2] - a[2]; on = d[1] - c[1] + d[2] - c[2]
		share[NR] = 100 * on / s / cores; per[NR] = 1000 * (on - off) / n
		printf "no churn: agent %.3f%% + BPF %.3f%% of a core; %.1f new processes/s: agent %.3f%% + BPF %.3f%% of a core = %.3f%% of the machine; %.3f ms CPU a new process (%d started)\n",
			100 * (b[1] - a[1]) / s, 100 * (b[2] - a[2]) / s, n / s, 100 * (d[1] - c[1]) / s, 100 * (d[2] - c[2]) / s, share[NR], per[NR], n
		more = (d[3] - c[3]) - (b[3] - a[3]); bpf = (d[2] - c[2]) - (b[2] - a[2])
		printf "a new process: %.1f samples more, %.0f us of BPF, %.1f us a sample more; %.1f Python code objects copied\n",
			more / n, 1e6 * bpf / n, (more > 0 ? 1e6 * bpf / more : 0), (d[4] - c[4]) / n
	}
	function mean(x, k,   i, t) { for (i = 1; i <= k; i++) t += x[i]; return t / k }
	function sem(x, k, m,   i, v) { for (i = 1; i <= k; i++) v += (x[i] - m) ^ 2; return sqrt(v / (k - 1) / k) }
	END {
		if (NR < 2) exit
		ms = mean(share, NR); mp = mean(per, NR)
		printf "%d cycles: %.3f%% of the machine (± %.3f), %.3f ms CPU a new process (± %.3f), mean ± standard error\n",
			NR, ms, sem(share, NR, ms), mp, sem(per, NR, mp)
	}'
}
