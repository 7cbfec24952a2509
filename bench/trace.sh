#!/usr/bin/env bash
# trace.sh: what `flint trace` costs the program it traces, on the field
# report's case (shared/field-reports/002): a loop of 100,000 time.Now()
# calls, untraced, traced by flint (counts; counts and latency), by flint
# with its default overhead budget, and by bpftrace's one-line uprobe
# counter for comparison. See docs/BENCHMARKS.md, "flint trace".
#
#	sudo bench/trace.sh            # RUNS=10 loops per configuration
#	sudo RUNS=20 bench/trace.sh
#
# Each configuration attaches to the fixture binary (--exe, as bpftrace
# does), then runs the loop RUNS times as new processes; the loop prints its
# wall time and the process's CPU time. Medians are reported; the cost per
# probe hit measured in the loop, (traced - untraced) / 100,001 calls, is
# set beside the one flint measures at start. The machine's load average is
# recorded before and after: other work on the machine slows the wall-clock
# figures, less the CPU ones. Raw outputs go to bench/results/trace-<date>/.
set -euo pipefail

RUNS=${RUNS:-10}
N=100000

say() { printf 'bench: [%3ds] %s\n' "$SECONDS" "$*" >&2; }
die() { printf 'bench: %s\n' "$*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "needs root to attach uprobes (run: sudo bench/trace.sh)"
[[ $RUNS =~ ^[0-9]+$ && $RUNS -ge 3 ]] || die "RUNS=$RUNS: want at least 3"
command -v jq >/dev/null || die "needs jq (apt-get install jq)"

cd "$(dirname "$0")/.."
out=$PWD/bench/results/trace-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out/bin"
say "building flint and the fixture into $out/bin"
go build -o "$out/bin/flint" ./cmd/flint
go build -o "$out/bin/trace-go" ./testdata/fixtures/trace-go
flint=$out/bin/flint
fixture=$out/bin/trace-go

{
	echo "date: $(date -Is)"
	echo "kernel: $(uname -r)"
	echo "cpus: $(nproc) x $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
	echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
	echo "go: $(go version)"
	echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out/env.txt"

# loops NAME: runs the loop RUNS times, one line per run: wall_ns cpu_ns.
loops() {
	local name=$1
	for ((i = 0; i < RUNS; i++)); do
		"$fixture" bench $N
	done >"$out/$name.out"
	awk '/^Time taken/ { w = $NF } /^CPU time/ { printf "%.0f %.0f\n", dur(w), dur($NF) }
	function dur(s,   v) {
		v = s + 0
		if (s ~ /ms$/) return v * 1e6
		if (s ~ /µs$/) return v * 1e3
		if (s ~ /ns$/) return v
		return v * 1e9
	}' "$out/$name.out" >"$out/$name.ns"
}

median() { sort -n | awk '{ a[NR] = $1 } END { printf "%.0f\n", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
col() { cut -d' ' -f"$2" "$out/$1.ns" | median; }

# traced NAME ARGS...: runs the loops while `flint trace --exe` with ARGS runs.
traced() {
	local name=$1
	shift
	"$flint" trace --exe "$fixture" --json "$@" time.Now >"$out/$name.json" 2>"$out/$name.err" &
	local pid=$!
	for ((i = 0; i < 100; i++)); do
		grep -q '^flint: tracing' "$out/$name.err" 2>/dev/null && break
		kill -0 $pid 2>/dev/null || die "flint trace failed: $(cat "$out/$name.err")"
		sleep 0.1
	done
	loops "$name"
	kill -INT $pid
	wait $pid || die "flint trace: $(cat "$out/$name.err")"
}

say "untraced: $RUNS loops"
loops untraced
say "flint trace, counting, no budget"
traced flint-count --max-overhead off
say "flint trace --latency, no budget"
traced flint-latency --latency --max-overhead off
say "flint trace with the default budget (2% of a CPU)"
traced flint-budget
if command -v bpftrace >/dev/null; then
	say "bpftrace: uprobe:$fixture:time.Now { @++ }"
	bpftrace -e "uprobe:$fixture:\"time.Now\" { @++ }" >"$out/bpftrace.err" 2>&1 &
	bt=$!
	for ((i = 0; i < 100; i++)); do
		grep -q '^Attaching' "$out/bpftrace.err" 2>/dev/null && break
		sleep 0.1
	done
	sleep 1
	loops bpftrace
	kill -INT $bt
	wait $bt || true
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/env.txt"

calls=$((N + 1)) # the loop's, and the time.Now before it (time.Since reads the monotonic clock itself)
base_w=$(col untraced 1)
base_c=$(col untraced 2)
{
	echo "## flint trace: $RUNS runs of the field report's loop ($N time.Now calls)"
	echo
	sed 's/^/    /' "$out/env.txt"
	echo
	echo "| configuration | loop, wall (median) | loop, CPU (median) | slowdown (CPU) | cost per hit in the loop (CPU) | flint's calibrated cost | calls counted |"
	echo "|---|---|---|---|---|---|---|"
	printf '| untraced | %.2f ms | %.2f ms | 1x | | | |\n' "$(echo "$base_w / 1000000" | bc -l)" "$(echo "$base_c / 1000000" | bc -l)"
	for name in flint-count flint-latency flint-budget bpftrace; do
		[[ -s $out/$name.ns ]] || continue
		w=$(col $name 1)
		c=$(col $name 2)
		hit=$(echo "($c - $base_c) / $calls / 1000" | bc -l)
		cal="" counted=""
		if [[ -s $out/$name.json ]]; then
			cal=$(jq -r 'if .timed_call_ns > 0 then "\(.timed_call_ns / 1000) us per timed call" else "\(.probe_hit_ns / 1000) us" end' "$out/$name.json")
			counted=$(jq -r '.functions[0] | "\(.calls)" + (if .detached then " (detached after \(.detached.after_s * 1000 | floor) ms)" else "" end)' "$out/$name.json")
		fi
		printf '| %s | %.1f ms | %.1f ms | %.0fx | %.2f us | %s | %s |\n' "$name" \
			"$(echo "$w / 1000000" | bc -l)" "$(echo "$c / 1000000" | bc -l)" "$(echo "$c / $base_c" | bc -l)" "$hit" "$cal" "$counted"
	done
	if [[ -s $out/flint-budget.ns ]]; then
		echo
		printf 'With the default budget, the slowest loop (the one running when the guard detached the probe) took %.0f ms of wall time.\n' \
			"$(cut -d' ' -f1 "$out/flint-budget.ns" | sort -n | tail -1 | awk '{ print $1 / 1000000 }')"
	fi
} | tee "$out/summary.md"
ln -sfn "$(basename "$out")" bench/results/trace-latest
