#!/usr/bin/env bash
# offcpu.sh: what recording off-CPU time costs on a process that switches
# as fast as it can (testdata/fixtures/switches.c: two threads ping-ponging
# through pipes, about 200k switches a second each), side by side in one
# run:
#   none       the fixture alone
#   flint      flint record -p PID --off-cpu (--off-cpu-min 1ms)
#   flint-fp   the same with --unwind-memory 0: frame pointers only, as
#              bpftrace walks (stacks through libc, built without them, stop)
#   flint-min0 the same with --off-cpu-min 0: every wait aggregated
#   flint-all  flint record -a --off-cpu: every process's switches
#   flint-s10  flint record -p PID --off-cpu --off-cpu-sample 10
#   bpftrace   bcc offcputime's design (stacks of every departing thread of
#              PID, the time to its return) on the sched_switch tracepoint;
#              bcc's own tool needs kprobes, which some kernels lack
#
#	sudo bench/offcpu.sh                    # 8 s a case, 3 rounds
#	sudo SECS=20 ROUNDS=1 bench/offcpu.sh
#
# For each: the switch program's run time per run and runs a second, from
# the kernel's BPF statistics (every switch on the machine runs it), and
# the fixture's round trips a second (what the tracing slowed it by).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}; secs=${SECS:-8}
[[ $(id -u) -eq 0 ]] || { echo "offcpu: needs root" >&2; exit 1; }
for tool in bpftool jq gcc bpftrace; do
	command -v $tool >/dev/null || { echo "offcpu: needs $tool (apt-get install $tool)" >&2; exit 1; }
done
tmp=$(mktemp -d); pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; sysctl -qw kernel.bpf_stats_enabled=0; rm -rf "$tmp"; }
trap cleanup EXIT
go build -o "$tmp/flint" ./cmd/flint
gcc -O2 -pthread -o "$tmp/switches" testdata/fixtures/switches.c
sysctl -qw kernel.bpf_stats_enabled=1

# stats NAME-REGEX: run time (ns) and runs of the BPF programs so named.
stats() {
	bpftool prog show --json | jq -r --arg re "$1" \
		'[.[] | select(.name != null and (.name | test($re)))] | [(map(.run_time_ns // 0) | add // 0), (map(.run_cnt // 0) | add // 0)] | @tsv'
}

# run NAME PROG-REGEX COMMAND...: the fixture, and COMMAND (with PID in
# its arguments replaced) tracing it.
run() {
	local name=$1 prog=$2; shift 2
	"$tmp/switches" 2>"$tmp/rate" >"$tmp/ready" & local fx=$!; pids+=($fx)
	sleep 1
	local args=("${@//PID/$fx}") tracer=
	if ((${#args[@]})); then
		"${args[@]}" >/dev/null 2>&1 & tracer=$!
	fi
	sleep 2; local a b; a=$(stats "$prog"); : >"$tmp/rate"; sleep "$secs"; b=$(stats "$prog")
	local trips; trips=$(awk '{ s += $1; n++ } END { printf "%.0f", n ? s / n : 0 }' "$tmp/rate")
	[[ -n $tracer ]] && { kill -INT $tracer 2>/dev/null || true; wait $tracer 2>/dev/null || true; }
	kill $fx; wait $fx 2>/dev/null || true
	echo "$a $b" | awk -v n="$name" -v t="$trips" -v s="$secs" '{
		runs = $4 - $2
		if (runs > 0) printf "%-10s %7.0f round trips/s; switch program %4.0f ns a run, %7.0f runs/s\n", n, t, ($3 - $1) / runs, runs / s
		else printf "%-10s %7.0f round trips/s\n", n, t }'
}

long=$((secs + 10))s
bt='tracepoint:sched:sched_switch {
	$s = @start[args->next_pid];
	if ($s) {
		$d = nsecs - $s;
		delete(@start[args->next_pid]);
		if ($d >= 1000000) { @off[@ks[args->next_pid], @us[args->next_pid]] = sum($d); }
	}
	if (pid == PID) { @start[args->prev_pid] = nsecs; @ks[args->prev_pid] = kstack; @us[args->prev_pid] = ustack; }
}'
for _ in $(seq "$rounds"); do
	run none '^$'
	run flint '^on_switch$' "$tmp/flint" record -p PID --off-cpu -d "$long" -o "$tmp/out.pb.gz"
	run flint-fp '^on_switch$' "$tmp/flint" record -p PID --off-cpu --unwind-memory 0 -d "$long" -o "$tmp/out.pb.gz"
	run flint-min0 '^on_switch$' "$tmp/flint" record -p PID --off-cpu --off-cpu-min 0 -d "$long" -o "$tmp/out.pb.gz"
	run flint-all '^on_switch$' "$tmp/flint" record -a --off-cpu -d "$long" -o "$tmp/out.pb.gz"
	run flint-s10 '^on_switch$' "$tmp/flint" record -p PID --off-cpu --off-cpu-sample 10 -d "$long" -o "$tmp/out.pb.gz"
	run bpftrace 'sched_switch' bpftrace -e "$bt"
done
