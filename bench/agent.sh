#!/usr/bin/env bash
# agent.sh: what the always-on agent costs in steady state, and what it
# costs to start, while both CPUs are saturated by the spin fixtures.
#
#	sudo bench/agent.sh                 # 5 minutes of steady state
#	sudo STEADY=60 bench/agent.sh       # shorter
#	sudo CHURN=1 bench/agent.sh         # then 60 s without, 60 s with one
#	sudo CHURN=10 PHASE=120 bench/agent.sh  # new process a second (ten; 120 s)
#	sudo CHURN=10 CHURN_WITH=brief bench/agent.sh  # the new processes: a C program (bench/churn.sh)
#	sudo NOFP=1 bench/agent.sh          # fixtures without frame pointers
#	sudo AGENT_FLAGS="--unwind-memory 0" bench/agent.sh   # agent flags
#	sudo LOAD=none AGENT_FLAGS=--off-cpu bench/agent.sh   # a quiet node: no fixtures
#
# Measured from outside the agent: its CPU (its threads' run time),
# the run time of its BPF programs (its /metrics, kernel BPF statistics
# enabled by the agent itself), its peak RSS (VmHWM), and the store's bytes
# per sample. Start-up: the agent's CPU from exec until /metrics first
# reports a sample. Then the store benchmarks replay the agent's windows
# into 24 hours (8640 windows) and time 1 h and 24 h flame graph queries
# over them. With CHURN=N, the agent then runs PHASE seconds without and,
# after CHURN_WARM seconds of it, PHASE seconds with N short-lived
# processes a second (bench/churn.sh): its CPU and its BPF programs' in
# both, and the CPU per new process; CYCLES=N repeats that N times and
# gives the mean and its standard error; CHURN_LEARN=S runs the churn S
# seconds first, so that the store knows the runs' stacks (900 in
# docs/BENCHMARKS.md). Results go to
# bench/results/agent-<date>/.
set -euo pipefail

STEADY=${STEADY:-300}
WARMUP=${WARMUP:-30}
say() { printf 'bench: [%3ds] %s\n' "$SECONDS" "$*" >&2; }
die() { printf 'bench: %s\n' "$*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (run: sudo bench/agent.sh)"
[[ $STEADY =~ ^[0-9]+$ && $STEADY -ge 10 ]] || die "STEADY=$STEADY: want whole seconds, at least 10"
command -v gcc >/dev/null || die "needs gcc (apt-get install gcc)"
command -v curl >/dev/null || die "needs curl (apt-get install curl)"
for tool in bpftool jq; do command -v $tool >/dev/null || die "needs $tool (apt-get install $tool)"; done

cd "$(dirname "$0")/.."
source bench/churn.sh
source bench/bpfprogs.sh
out=bench/results/agent-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$out"
go build -o "$out/flint" ./cmd/flint
gcc -O1 -fno-omit-frame-pointer -o "$out/spin" testdata/fixtures/spin.c
go build -o "$out/spin-go" ./testdata/fixtures/spin-go

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

# Load: one C and one Go fixture per CPU, so both CPUs stay busy; with
# NOFP=1, the C and C++ fixtures built without frame pointers instead, whose
# stacks the agent walks with unwind tables; with LOAD=none, nothing: the
# node as it is (what else runs on it is the agent's load).
LOAD=${LOAD:-spin}
[[ $LOAD == spin || $LOAD == none ]] || die "LOAD=$LOAD: want spin or none"
if [[ $LOAD == none ]]; then
	load=()
elif [[ ${NOFP:-0} == 1 ]]; then
	gcc -O2 -fomit-frame-pointer -rdynamic -o "$out/nofp" testdata/fixtures/nofp/nofp.c
	gcc -O2 -fomit-frame-pointer -shared -fPIC -o "$out/nofp-plugin.so" testdata/fixtures/nofp/plugin.c
	g++ -O2 -fomit-frame-pointer -o "$out/nofp-cc" testdata/fixtures/nofp/nofp.cc
	load=("$out/nofp $out/nofp-plugin.so" "$out/nofp-cc")
else
	load=("$out/spin" "$out/spin-go")
fi
for _ in $(seq "$(nproc)"); do
	for cmd in "${load[@]+"${load[@]}"}"; do
		$cmd >/dev/null & pids+=($!)
	done
done

addr=127.0.0.1:7079
data=$(mktemp -d)
# shellcheck disable=SC2086
"$out/flint" agent --data-dir "$data" --listen "$addr" ${AGENT_FLAGS:-} 2>"$out/agent.log" & agent=$!
pids+=($agent)

# Start-up: CPU until the first sample is counted.
until [[ $(metric flint_samples_total 2>/dev/null || true) =~ ^[1-9] ]]; do
	kill -0 $agent 2>/dev/null || die "agent exited: $(cat "$out/agent.log")"
	sleep 0.05
done
startup=$(agent_cpu $agent)
say "start-up to first sample: ${startup} s CPU"
# The readings' other programs, learned in the warm-up, not in a phase it
# measures.
readings() { progs $agent; stat -c %s /dev/null; du -sb /dev/null; rm "$(mktemp)"; }
learn readings

say "warming up for ${WARMUP} s"
sleep "$WARMUP"
steady_metrics="flint_bpf_run_seconds_total flint_samples_written_total flint_samples_total flint_off_cpu_spans_total flint_off_cpu_lost_total"
cpu0=$(agent_cpu $agent); read -r bpf0 samples0 taken0 spans0 offlost0 < <(metric $steady_metrics)
progs $agent >"$out/progs0.tsv"; busy0=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8; exit }' /proc/stat)
say "steady state for ${STEADY} s"
sleep "$STEADY"
cpu1=$(agent_cpu $agent); read -r bpf1 samples1 taken1 spans1 offlost1 < <(metric $steady_metrics)
progs $agent >"$out/progs1.tsv"; busy1=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8; exit }' /proc/stat)
read -r walks complete rows binaries < <(metric flint_unwind_walks_total flint_unwind_complete_total flint_unwind_rows flint_unwind_binaries)
peak=$(awk '/VmHWM/ { print $2 / 1024 }' /proc/$agent/status)
store=$(du -sb "$data" | cut -f1)
written=$(metric flint_samples_written_total)
churned=
if ((CHURN > 0)); then
	say "churn: ${PHASE} s without, ${PHASE} s with $CHURN new processes a second"
	churned=$(churn_phases $agent)
fi
kill -TERM $agent; wait $agent || true

cores=$(nproc)
awk -v c0="$cpu0" -v c1="$cpu1" -v b0="$bpf0" -v b1="$bpf1" -v s="$STEADY" -v n="$cores" \
	-v peak="$peak" -v st="$startup" -v bytes="$store" -v smp="$written" -v s0="$samples0" -v s1="$samples1" \
	-v t0="$taken0" -v t1="$taken1" -v load="$LOAD" -v flags="${AGENT_FLAGS:-}" -v sp0="$spans0" -v sp1="$spans1" \
	-v ol0="$offlost0" -v ol1="$offlost1" -v bz0="$busy0" -v bz1="$busy1" -v hz="$(getconf CLK_TCK)" '
BEGIN {
	user = (c1 - c0) / s; bpf = (b1 - b0) / s
	printf "| steady state, %d s at 99 Hz, %s, flags: %s | value |\n|---|---:|\n", s, (load == "none" ? "no load" : n " CPUs busy"), (flags == "" ? "none" : flags)
	printf "| the machine busy (user, nice, system, irq, softirq), all processes | %.2f%% |\n", 100 * (bz1 - bz0) / hz / s / n
	printf "| off-CPU spans recorded a second; lost | %.0f; %d |\n", (sp1 - sp0) / s, ol1 - ol0
	printf "| agent CPU, %% of one core | %.3f%% |\n", 100 * user
	printf "| BPF programs, %% of one core | %.3f%% |\n", 100 * bpf
	printf "| BPF run time a sample taken | %.2f us |\n", 1e6 * (b1 - b0) / (t1 - t0)
	printf "| total, %% of the machine (%d cores) | %.3f%% |\n", n, 100 * (user + bpf) / n
	printf "| samples written per second | %.0f |\n", (s1 - s0) / s
	printf "| peak RSS | %.1f MB |\n", peak
	printf "| start-up to first sample, CPU | %.3f s |\n", st
	printf "| store bytes per sample (%d samples) | %.2f |\n", smp, bytes / (smp > 0 ? smp : 1)
}' | tee "$out/summary.md"
# Which programs that BPF time went to: the sampler's, the doctor's tracer's.
join -t "$(printf '\t')" "$out/progs0.tsv" "$out/progs1.tsv" | awk -F '\t' -v s="$STEADY" '
$7 > $4 { printf "| BPF program %s | %.4f%% of one core: %d runs of %.0f ns |\n", $2, 100 * ($6 - $3) / 1e9 / s, $7 - $4, ($6 - $3) / ($7 - $4) }' |
	tee -a "$out/summary.md"
awk -v w="${walks:-0}" -v c="${complete:-0}" -v r="${rows:-0}" -v b="${binaries:-0}" 'BEGIN {
	printf "| stacks walked with unwind tables | %d, %.1f%% to the outermost frame |\n", w, (w > 0 ? 100 * c / w : 0)
	printf "| unwind rows loaded | %d (%d binaries, %.1f MB of kernel memory) |\n", r, b, r * 12 / 1e6 }' | tee -a "$out/summary.md"
[[ -z $churned ]] || echo "$churned" | tee -a "$out/summary.md"

say "store: the agent's windows repeated over 24 h, 1 h and 24 h queries"
FLINT_BENCH_AGENT_STORE=$data go test -run '^$' -bench 'Profile1h|Profile24h' -benchtime 3x -v ./internal/store/ \
	> "$out/store.txt" 2>&1 || die "store benchmarks failed: see $out/store.txt"
grep -m1 '24 h dataset' "$out/store.txt" | sed 's/^ *bench_test.go:[0-9]*: //' | tee -a "$out/summary.md"
grep '^Benchmark' "$out/store.txt" | tee -a "$out/summary.md"
rm -rf "$data"
