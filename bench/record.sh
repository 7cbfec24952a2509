#!/usr/bin/env bash
# record.sh: the cost of recording the whole machine with flint, bcc's
# profile and perf, one after the other, each under the same load (both CPUs
# busy with the spin fixtures). See docs/BENCHMARKS.md for what is measured.
#
#	sudo make bench                      # or: sudo bench/record.sh
#	sudo DURATION=10 bench/record.sh     # part 1 shorter
#	sudo KROUNDS=5 bench/record.sh       # part 2 five times, interleaved
#
# Part 1: each tool records at 99 Hz for DURATION seconds (default 30):
# CPU seconds and peak RSS of its processes (GNU time), and the run time of
# its BPF programs (kernel.bpf_stats_enabled=1, bpftool polled every ~0.5 s,
# the programs pinned so their final counts can be read after the exit).
# Part 2: each tool records at 999 Hz while bench/hrtimer.bt times the perf
# cpu-clock timer handler for 5 s of the tool's steady state (from a second
# after it started sampling); then the tool is stopped with SIGINT, so each
# records for 8-10 s. The handler's average is the in-kernel time of a sample.
# Then all five sample at once, each timed on its own events, so that the
# VM's drifting speed falls on all alike. KROUNDS (default 1) repeats part 2;
# the tables show medians.
#
# Needs root; installs what is missing with apt-get. Raw outputs and logs go
# to bench/results/<date>/ (bench/results/latest links to the last run).
set -euo pipefail

DURATION=${DURATION:-30}
KROUNDS=${KROUNDS:-1}
FREQ=99
KFREQ=999
POLL=0.5

say() { printf 'bench: [%3ds] %s\n' "$SECONDS" "$*" >&2; }
die() { printf 'bench: %s\n' "$*" >&2; exit 1; }

[[ $DURATION =~ ^[0-9]+$ && $DURATION -ge 5 ]] || die "DURATION=$DURATION: want whole seconds, at least 5"
[[ $KROUNDS =~ ^[1-9][0-9]*$ ]] || die "KROUNDS=$KROUNDS: want a number of rounds, at least 1"
[[ $(id -u) -eq 0 ]] || die "needs root: BPF, perf -a and bpftrace (run: sudo make bench)"

cd "$(dirname "$0")/.."
bench=$PWD/bench

# --- what the tools need -----------------------------------------------------

# Debian packages for missing commands.
need=()
command -v profile-bpfcc >/dev/null || need+=(bpfcc-tools)
command -v bpftrace >/dev/null || need+=(bpftrace)
command -v perf >/dev/null || need+=(linux-perf)
command -v bpftool >/dev/null || need+=(bpftool)
command -v jq >/dev/null || need+=(jq)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
[[ -x /usr/bin/time ]] || need+=(time)
kernel=$(uname -r)
if [[ ! -e /lib/modules/$kernel/build ]] && ! compgen -G '/usr/src/linux-headers-*-amd64' >/dev/null; then
	need+=(linux-headers-amd64)
fi
if ((${#need[@]})); then
	say "installing ${need[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
fi

# bcc compiles its BPF C against kernel headers at /lib/modules/$(uname -r).
# When the running kernel has none, use Debian's (another version: profile
# only needs the generic ones). Debian splits them in two: -amd64 (build) and
# -common (source).
if [[ ! -e /lib/modules/$kernel/build ]]; then
	headers=$(ls -d /usr/src/linux-headers-*-amd64 | sort -V | tail -n 1)
	mkdir -p "/lib/modules/$kernel"
	ln -sfn "$headers" "/lib/modules/$kernel/build"
	say "no kernel headers for $kernel: linked /lib/modules/$kernel/build -> $headers (for bcc)"
	common=${headers%-amd64}-common
	if [[ ! -e /lib/modules/$kernel/source && -d $common ]]; then
		ln -sfn "$common" "/lib/modules/$kernel/source"
		say "linked /lib/modules/$kernel/source -> $common (for bcc)"
	fi
fi

# bpftrace's tracepoints need tracefs.
tracefs=/sys/kernel/tracing
if [[ ! -d $tracefs/events/timer ]]; then
	mount -t tracefs nodev "$tracefs" ||
		die "tracefs is not mounted and mounting it failed; bpftrace needs it: mount -t tracefs nodev $tracefs"
	say "mounted tracefs at $tracefs (for bpftrace)"
fi
# bench/hrtimer.bt reads these fields and this symbol; check they exist here.
entry_fmt=$tracefs/events/timer/hrtimer_expire_entry/format
exit_fmt=$tracefs/events/timer/hrtimer_expire_exit/format
grep -q 'field:void \* hrtimer;' "$entry_fmt" && grep -q 'field:void \* function;' "$entry_fmt" &&
	grep -q 'field:void \* hrtimer;' "$exit_fmt" ||
	die "timer:hrtimer_expire_entry/exit lack the fields hrtimer.bt reads; see $entry_fmt"
grep -q ' perf_swevent_hrtimer$' /proc/kallsyms || die "no perf_swevent_hrtimer in /proc/kallsyms: cannot time the cpu-clock handler"
# hrtimer.bt tells the tool's events from others' by the perf_event around
# the hrtimer; bpftrace 0.17 has no offsetof, so take it from BTF.
hrtimer_offset=$(bpftool -j btf dump file /sys/kernel/btf/vmlinux | jq -r --arg struct perf_event --arg path hw.hrtimer -f "$PWD/bench/btfoffset.jq") ||
	die "cannot find perf_event.hw.hrtimer in /sys/kernel/btf/vmlinux"

# --- build -------------------------------------------------------------------

run=$bench/results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$run/bin"
ln -sfn "$(basename "$run")" "$bench/results/latest"
say "raw outputs and logs: $run"

go=${GO:-go}
command -v "$go" >/dev/null || go=/usr/local/go/bin/go # sudo drops /usr/local/go/bin from PATH
"$go" build -o bin/flint ./cmd/flint || die "go build ./cmd/flint failed"
gcc -O1 -fno-omit-frame-pointer -o "$run/bin/spin" testdata/fixtures/spin.c
"$go" build -o "$run/bin/spin-go" ./testdata/fixtures/spin-go
flint=$PWD/bin/flint

{
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "kernel: $(uname -r)"
	echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
	echo "cpus: $(nproc)"
	echo "flint: $(git describe --always --dirty 2>/dev/null || echo unknown)"
	echo "go: $("$go" version)"
	echo "bcc: $(dpkg-query -W -f '${Version}' bpfcc-tools 2>/dev/null)"
	echo "perf: $(perf --version)"
	echo "bpftrace: $(bpftrace --version)"
	echo "bpftool: $(bpftool version | head -n 1)"
	echo "perf_event.hw.hrtimer offset: $hrtimer_offset"
	echo "DURATION=$DURATION KROUNDS=$KROUNDS"
} >"$run/env.txt"
cp "$entry_fmt" "$run/hrtimer_expire_entry.format"
cp "$exit_fmt" "$run/hrtimer_expire_exit.format"

# --- load, cleanup -------------------------------------------------------------

load_pids=()
tool_pids=() # GNU time processes of the tools running
ids=
# read -t on a FIFO no one writes is a sleep that starts no process.
mkfifo "$run/.tick"
exec {tick}<>"$run/.tick"
stats_was=$(sysctl -n kernel.bpf_stats_enabled)

# A private bpffs to pin the tools' programs in (see poll_bpf).
pins=$(mktemp -d /tmp/flint-bench-bpffs.XXXXXX)
if ! mount -t bpf bpf "$pins"; then
	rmdir "$pins"
	pins=
	say "cannot mount a bpffs to pin programs: BPF run times miss up to ${POLL} s before each tool's exit"
fi

cleanup() {
	local p
	for p in "${load_pids[@]}" $(for p in "${tool_pids[@]}"; do tree "$p"; done); do
		kill "$p" 2>/dev/null || true
	done
	sysctl -q kernel.bpf_stats_enabled="$stats_was" || true
	rm -f "$run/.tick"
	if [[ -n $pins ]]; then
		umount "$pins" && rmdir "$pins"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# busy_ticks prints the CPU time the machine spent busy, in clock ticks.
busy_ticks() {
	awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat
}
hz=$(getconf CLK_TCK)

# load_start keeps both CPUs busy: the C and the Go spin fixture, one each.
# load_stop NAME TOOL_CPU_S writes NAME.load: "wall_s busy_s fixtures_s"
# over the time the load ran, and warns when something else took more than
# a tenth of the machine (the harness takes a few percent) or a fixture died.
load_start() {
	load_t0=$(date +%s.%N)
	load_b0=$(busy_ticks)
	"$run/bin/spin" >"$run/load.spin.out" &
	load_pids=($!)
	"$run/bin/spin-go" >"$run/load.spin-go.out" &
	load_pids+=($!)
	local i
	for ((i = 0; i < 100; i++)); do
		grep -qs ready "$run/load.spin.out" && grep -qs ready "$run/load.spin-go.out" && return
		sleep 0.1
	done
	die "the spin fixtures did not start"
}

load_stop() {
	local p fixtures=0
	for p in "${load_pids[@]}"; do
		if alive "$p"; then
			fixtures=$((fixtures + $(awk '{print $14 + $15}' "/proc/$p/stat")))
		else
			echo "warning: $1: load process $p ended during the measurement (killed by something else?)" |
				tee -a "$run/warnings.txt" | sed 's/^/bench: /' >&2
		fi
	done
	echo "$(date +%s.%N) $(busy_ticks) $fixtures" |
		awk -v t0="$load_t0" -v b0="$load_b0" -v hz="$hz" '{printf "%.2f %.2f %.2f\n", $1 - t0, ($2 - b0) / hz, $3 / hz}' >"$run/$1.load"
	awk -v n="$(nproc)" -v tool="$2" '$2 - $3 - tool > 0.1 * n * $1 {
		printf "warning: %s: something else used %.0f%% of the CPUs (see the .ps-before and .ps-after files)\n", name, 100 * ($2 - $3 - tool) / (n * $1)
	}' name="$1" "$run/$1.load" | tee -a "$run/warnings.txt" | sed 's/^/bench: /' >&2
	for p in "${load_pids[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	load_pids=()
}

# The helpers the poller calls while a tool runs start no processes but
# bpftool (and ps once, to find the tool): flint hooks exec and fork, so
# every process the harness started would be work for it that the others do
# not see the same way.

# alive tells whether a child still runs (not yet a zombie).
alive() {
	local stat
	read -r -a stat 2>/dev/null <"/proc/$1/stat" && [[ ${stat[2]} != Z ]]
}

# tree prints a process and its descendants.
tree() {
	local c
	echo "$1"
	for c in $(ps -o pid= --ppid "$1"); do
		tree "$c"
	done
}

# child_of prints the PID of a process's first child (the tool under time).
child_of() {
	ps -o pid= --ppid "$1" | awk 'NR == 1 {print $1}'
}

# prog_ids sets ids to the IDs of the BPF programs process $1 holds,
# comma-separated.
prog_ids() {
	local f k v
	local -A seen=()
	for f in "/proc/$1/fdinfo/"*; do
		{ while read -r k v; do [[ $k == prog_id: ]] && seen[$v]=1; done <"$f"; } 2>/dev/null || true
	done
	local IFS=,
	ids="${!seen[*]}"
}

# snapshot prints one line for bpfstats.jq: the time, the IDS given and
# bpftool's view of every program (run_time_ns, run_cnt).
snapshot() {
	local progs
	progs=$(bpftool --json prog show 2>/dev/null) || progs='[]'
	printf '{"t":%s,"ids":[%s],"progs":%s}\n' "$EPOCHREALTIME" "$1" "${progs:-[]}"
}

# poll_bpf snapshots the BPF programs every $POLL s until process $1 (time)
# exits, with the IDs of those the tool under it holds. It pins each of them
# in $pins so that they outlive the tool: one more snapshot after the exit
# then has their final counts, and the pins go.
poll_bpf() {
	local tool= ids id
	while alive "$1"; do
		[[ -n $tool ]] || tool=$(child_of "$1")
		ids=
		[[ -z $tool ]] || prog_ids "$tool"
		if [[ -n $pins ]]; then
			for id in ${ids//,/ }; do
				[[ -e $pins/$id ]] || bpftool prog pin id "$id" "$pins/$id" 2>/dev/null || true
			done
		fi
		snapshot "$ids"
		read -rt "$POLL" -u "$tick" || true # sleep, without a process
	done
	if [[ -n $pins ]]; then
		snapshot ""
		rm -f "$pins"/[0-9]*
	fi
}

# measure NAME CMD... runs CMD under GNU time while polling its BPF programs.
# Writes NAME.out (stdout), NAME.err, NAME.time (last line: "wall_s user_s
# sys_s maxrss_kb"; a line before it if CMD died of a signal) and NAME.bpf.json.
measure() {
	local name=$1
	shift
	ps -eo pid,comm,time --sort=-time | head -n 15 >"$run/$name.ps-before"
	/usr/bin/time -f '%e %U %S %M' -o "$run/$name.time" "$@" >"$run/$name.out" 2>"$run/$name.err" &
	tool_pids=($!)
	poll_bpf "$!" >"$run/$name.bpf.jsonl"
	wait "${tool_pids[0]}" || die "$name failed (exit $?); see $run/$name.err"
	tool_pids=()
	ps -eo pid,comm,time --sort=-time | head -n 15 >"$run/$name.ps-after"
	jq -s -f "$bench/bpfstats.jq" "$run/$name.bpf.jsonl" >"$run/$name.bpf.json"
}

# cpu_of NAME... prints the CPU seconds (user + sys) in NAME.time files.
cpu_of() {
	local n
	for n in "$@"; do
		tail -n 1 "$run/$n.time"
	done | awk '{s += $2 + $3} END {print s + 0}'
}

# samples prints how many samples a tool says it took, or "?".
samples() {
	local name=$1 n= tool=${1#k-}
	case ${tool#all-} in
	flint*) n=$(sed -n 's/^flint: \([0-9]*\) samples.*/\1/p' "$run/$name.err") ;;
	bcc*) n=$(awk '{n += $NF} END {print n + 0}' "$run/$name.out") ;;
	perf*) n=$(sed -n 's/.*(\([0-9]*\) samples).*/\1/p' "$run/$name.err") ;;
	esac
	echo "${n:-?}"
}

# warnings prints what a tool said on stderr beyond its usual summary.
warnings() {
	grep -v -e '^flint: [0-9]* samples' -e '^\[ perf record:' "$run/$1.err" | sed "s/^/  $1: /" || true
}

# --- part 1: whole machine at 99 Hz for DURATION s --------------------------------

sysctl -q kernel.bpf_stats_enabled=1
total=$((4 * DURATION))
say "part 1: 4 tools x ${DURATION} s at $FREQ Hz (about $((total + 30)) s)"

part1=(flint-aggregate flint-ringbuf bcc-profile perf)
for name in "${part1[@]}"; do
	load_start
	say "  $name"
	case $name in
	flint-*)
		measure "$name" "$flint" record -a -F "$FREQ" -d "${DURATION}s" --transfer "${name#flint-}" -o "$run/$name.svg"
		;;
	bcc-profile)
		measure "$name" profile-bpfcc -F "$FREQ" -af "$DURATION"
		;;
	perf)
		measure perf-record perf record -F "$FREQ" -a -g -o "$run/perf.data" -- sleep "$DURATION"
		measure perf-script perf script -i "$run/perf.data"
		;;
	esac
	case $name in
	perf) load_stop "$name" "$(cpu_of perf-record perf-script)" ;;
	*) load_stop "$name" "$(cpu_of "$name")" ;;
	esac
done
sysctl -q kernel.bpf_stats_enabled="$stats_was"

# row1 LABEL LOAD PARTS... prints the table row of a tool whose processes
# are PARTS, run while the load LOAD ran.
row1() {
	local label=$1 load=$2
	shift 2
	local p
	for p in "$@"; do
		read -r wall user sys rss < <(tail -n 1 "$run/$p.time")
		jq -r '"\(.run_time_ns) \(.run_cnt) \(.sample_time_ns) \(.sample_cnt)"' "$run/$p.bpf.json" |
			{ read -r bt bc st sc; echo "$wall $user $sys $rss $bt $bc $st $sc"; }
	done | awk -v label="$label" -v samples="$(samples "$1")" -v load="$(cat "$run/$load.load")" '
		{ wall += $1; user += $2; sys += $3; if ($4 > rss) rss = $4
		  bt += $5; bc += $6; st += $7; sc += $8 }
		END {
			split(load, l, " ")
			bpf = bc ? sprintf("%.1f", bt / 1e6) : "n/a"
			per = sc ? sprintf("%.0f", st / sc) : "n/a"
			runs = bc ? bc : "n/a"
			printf "| %s | %.2f | %.2f | %.2f | %.1f | %s | %s | %s | %s | %.1f | %.2f |\n",
				label, user + sys, user, sys, rss / 1024, bpf, runs, per, samples, wall, l[2] - l[3] - (user + sys)
		}'
}

table1=$run/part1.md
{
	echo "Whole machine, $FREQ Hz, ${DURATION} s, both CPUs busy; CPU and RSS of the tool's processes from start to exit."
	echo "BPF ns/sample: run time / runs of the tool's perf_event programs. Other CPU s: the machine's busy time while"
	echo "the load ran, minus the load's and the tool's: the harness (bpftool polls) and anything else running."
	echo
	echo "| tool | CPU s | user s | sys s | peak RSS MB | BPF run time ms | BPF runs | BPF ns/sample | samples | wall s | other CPU s |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	row1 "flint --transfer aggregate (svg)" flint-aggregate flint-aggregate
	row1 "flint --transfer ringbuf (svg)" flint-ringbuf flint-ringbuf
	row1 "bcc profile-bpfcc -af (folded)" bcc-profile bcc-profile
	row1 "perf record -g + perf script" perf perf-record perf-script
} >"$table1"

# --- part 2: in-kernel time per sample at 999 Hz -----------------------------------

# ready waits until a tool samples: a BPF tool holds its programs, perf has
# started its workload (it enables the events first).
ready() {
	local i p
	for ((i = 0; i < 300; i++)); do
		alive "$1" || return 1
		case $2 in
		bpf)
			ids=
			prog_ids "$(child_of "$1")"
			[[ -n $ids ]] && break
			;;
		perf) for p in $(tree "$1"); do [[ $(cat "/proc/$p/comm" 2>/dev/null) == sleep ]] && break 2; done ;;
		esac
		sleep 0.1
	done
}

# kstart NAME KIND CMD... starts CMD under GNU time, SIGINT restored
# (background jobs of a script start with it ignored, and Python, bcc, keeps
# it so), and waits until it samples. Writes NAME.pid: the tool's PID.
kstart() {
	local name=$1 kind=$2
	shift 2
	/usr/bin/time -f '%e %U %S %M' -o "$run/$name.time" env --default-signal=INT "$@" >"$run/$name.out" 2>"$run/$name.err" &
	tool_pids+=($!)
	ready "$!" "$kind" || die "$name exited before sampling; see $run/$name.err"
	child_of "$!" >"$run/$name.pid"
}

# kstop NAME... stops the tools with SIGINT and checks they wrote samples.
# Their first 60 s, which they all ask for, are never reached.
kstop() {
	local name p rc
	for name in "$@"; do
		alive "$(<"$run/$name.pid")" || die "$name ended before bpftrace did; see $run/$name.err"
		kill -INT "$(<"$run/$name.pid")"
	done
	for p in "${tool_pids[@]}"; do
		# perf exits with its workload's status (killed): check the output.
		rc=0
		wait "$p" || rc=$?
		echo "$rc" >>"$run/kstop.rc"
	done
	tool_pids=()
	for name in "$@"; do
		[[ $(samples "$name") != \? ]] || die "$name wrote no samples after SIGINT; see $run/$name.err"
	done
}

# ktime runs bench/hrtimer.bt for 5 s into FILE. It runs at a higher
# priority only so that it starts in time on a busy machine; its probes run
# in the timer interrupt either way.
ktime() {
	nice -n -10 bpftrace "$bench/hrtimer.bt" "$hrtimer_offset" >"$1" 2>&1 || die "bpftrace failed; see $1"
}

# handler NAME [BT] prints "avg_ns count others load_avg_ns load_count"
# for the tool NAME from hrtimer.bt's output BT (default NAME.bt); others:
# runs of other processes' events.
handler() {
	awk -v pid="$(<"$run/$1.pid")" '
		{ gsub(/[],:]/, " "); sub(/\[/, " ") }
		$1 == "@ns" && $2 == pid { avg = $6; n = $4 }
		$1 == "@ns" && $2 != pid { others += $4 }
		$1 == "@load_ns" && $2 == pid { lavg = $6; ln = $4 }
		END { if (n) print avg, n, others + 0, lavg + 0, ln + 0 }' "$run/${2:-$1.bt}"
}

# kcommand TOOL NAME sets cmd to what part 2 runs for TOOL, writing to
# NAME.*, and kind to the readiness to wait for (see ready).
kcommand() {
	case $1 in
	flint-*) kind=bpf cmd=("$flint" record -a -F "$KFREQ" -d 60s --transfer "${1#flint-}" -o "$run/$2.svg") ;;
	bcc-profile) kind=bpf cmd=(profile-bpfcc -F "$KFREQ" -af 60) ;;
	perf-g) kind=perf cmd=(perf record -F "$KFREQ" -a -g -o "$run/$2.data" -- sleep 60) ;;
	perf-nostack) kind=perf cmd=(perf record -F "$KFREQ" -a -o "$run/$2.data" -- sleep 60) ;;
	esac
}

# checkruns NAME [BT]: a handler run count far from the tool's rate means
# the window was not all steady state.
checkruns() {
	handler "$@" | awk -v want=$((KFREQ * $(nproc) * 5)) -v name="$1" '
		$2 < 0.9 * want || $2 > 1.1 * want { printf "warning: %s: %d handler runs in 5 s, not about %d\n", name, $2, want }' |
		tee -a "$run/warnings.txt" | sed 's/^/bench: /' >&2
}

# The tools of part 2, in order. Each round runs them one after the other,
# then all at once, so that they sample the same moments: a VM's speed
# drifts over seconds, and that drift then falls on all of them alike.
# KROUNDS > 1 repeats the rounds.
ktools=(flint-aggregate flint-ringbuf bcc-profile perf-g perf-nostack)
say "part 2: ${#ktools[@]} tools at $KFREQ Hz, about 10 s each, then together; $KROUNDS round(s)"
kind=
cmd=()
for ((r = 1; r <= KROUNDS; r++)); do
	for t in "${ktools[@]}"; do
		name=k-$t.$r
		say "  $name"
		kcommand "$t" "$name"
		load_start
		ps -eo pid,comm,time --sort=-time | head -n 15 >"$run/$name.ps-before"
		kstart "$name" "$kind" "${cmd[@]}"
		sleep 1
		ktime "$run/$name.bt"
		kstop "$name"
		ps -eo pid,comm,time --sort=-time | head -n 15 >"$run/$name.ps-after"
		load_stop "$name" "$(cpu_of "$name")"
		checkruns "$name"
	done
	say "  all together.$r"
	load_start
	ps -eo pid,comm,time --sort=-time | head -n 15 >"$run/k-all.$r.ps-before"
	names=()
	for t in "${ktools[@]}"; do
		name=k-all-$t.$r
		kcommand "$t" "$name"
		kstart "$name" "$kind" "${cmd[@]}"
		names+=("$name")
	done
	sleep 1
	ktime "$run/k-all.$r.bt"
	kstop "${names[@]}"
	ps -eo pid,comm,time --sort=-time | head -n 15 >"$run/k-all.$r.ps-after"
	load_stop "k-all.$r" "$(cpu_of "${names[@]}")"
	for name in "${names[@]}"; do
		checkruns "$name" "k-all.$r.bt"
	done
done

# rounds PREFIX TOOL prints, a line per round: "avg_ns count others
# load_avg_ns load_count samples". PREFIX: k (alone) or k-all (together).
rounds() {
	local r name bt
	for ((r = 1; r <= KROUNDS; r++)); do
		name=$1-$2.$r
		bt=$name.bt
		[[ $1 == k-all ]] && bt=k-all.$r.bt
		echo "$(handler "$name" "$bt") $(samples "$name")"
	done | awk 'NF == 6'
}

# The median of each column of rounds, and the lowest and highest average
# on the load.
medians='
	function median(c,    i, j, v, t) {
		for (i = 1; i <= NR; i++) v[i] = col[i, c]
		for (i = 2; i <= NR; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
		return NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
	}
	{ for (c = 1; c <= NF; c++) col[NR, c] = $c
	  if (NR == 1 || $4 < lo) lo = $4
	  if (NR == 1 || $4 > hi) hi = $4 }'

# row2 PREFIX LABEL TOOL prints the table row of TOOL.
row2() {
	local floor lfloor
	read -r floor lfloor < <(rounds "$1" perf-nostack | awk "$medians"' END { if (NR) print median(1), median(4) }') || true
	rounds "$1" "$3" | awk -v label="$2" -v floor="${floor:-0}" -v lfloor="${lfloor:-0}" "$medians"'
		END {
			if (!NR) { printf "| %s | ? | ? | ? | ? | ? | ? | ? | ? |\n", label; exit }
			range = NR > 1 ? sprintf("%.2f-%.2f", lo / 1000, hi / 1000) : "-"
			printf "| %s | %.2f | %.2f | %.2f | %.2f | %s | %d (%d) | %d | %d |\n", label,
				median(1) / 1000, (median(1) - floor) / 1000, median(4) / 1000, (median(4) - lfloor) / 1000, range,
				median(2), median(5), median(3), median(6)
		}'
}

# table2 PREFIX prints the table of part 2, the tools alone or together.
table2() {
	echo "| tool | avg us | over floor us | on the load: avg us | over floor us | range us | runs (on the load) | others' runs | samples |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
	row2 "$1" "flint --transfer aggregate" flint-aggregate
	row2 "$1" "flint --transfer ringbuf" flint-ringbuf
	row2 "$1" "bcc profile-bpfcc -F $KFREQ -a" bcc-profile
	row2 "$1" "perf record -F $KFREQ -a -g" perf-g
	row2 "$1" "perf record -F $KFREQ -a (no stack: floor)" perf-nostack
}

{
	echo "Whole machine, $KFREQ Hz, both CPUs busy; perf cpu-clock handler (perf_swevent_hrtimer) timed by bpftrace"
	echo "over 5 s of each tool's steady state; the tools are then stopped with SIGINT (samples: the whole run)."
	echo "Avg: over all runs of the tool's handler; on the load: over those that interrupted spin or spin-go (the same"
	echo "stacks for every tool). Runs: of the tool's events (expect $KFREQ x $(nproc) CPUs x 5 s), in brackets on the load;"
	echo "others' runs: of other processes' cpu-clock events (other tools, bpftrace's own timer), left out."
	echo "$KROUNDS round(s): each number is the median over the rounds; range: lowest and highest average on the load."
	echo
	echo "One tool at a time:"
	echo
	table2 k
	echo
	echo "All five at once, each timed on its own events (the same moments for all):"
	echo
	table2 k-all
	if ((KROUNDS > 1)); then
		echo
		echo "Average on the load per round, us (alone / together):"
		echo
		printf '| round |'
		printf ' %s |' "${ktools[@]}"
		printf '\n|---|'
		printf -- '---:|%.0s' "${ktools[@]}"
		echo
		for ((r = 1; r <= KROUNDS; r++)); do
			printf '| %d |' "$r"
			for t in "${ktools[@]}"; do
				printf ' %s / %s |' \
					"$(handler "k-$t.$r" | awk '{printf "%.2f", $4 / 1000}')" \
					"$(handler "k-all-$t.$r" "k-all.$r.bt" | awk '{printf "%.2f", $4 / 1000}')"
			done
			echo
		done
	fi
} >"$run/part2.md"

# --- report -------------------------------------------------------------------------

{
	sed 's/^/    /' "$run/env.txt"
	echo
	echo "## Recording cost: $FREQ Hz, $DURATION s"
	echo
	cat "$table1"
	echo
	echo "## In-kernel time per sample: $KFREQ Hz"
	echo
	cat "$run/part2.md"
} | tee "$run/summary.md"

said=$(for f in "$run"/*.err; do
	f=${f##*/}
	warnings "${f%.err}"
done)
if [[ -n $said ]]; then
	printf '\nWhat the tools printed besides their summary (see %s/*.err):\n%s\n' "$run" "$said" | tee -a "$run/summary.md"
fi
if [[ -s $run/warnings.txt ]]; then
	printf '\nWarnings (these numbers may be off):\n' | tee -a "$run/summary.md"
	tee -a "$run/summary.md" <"$run/warnings.txt"
fi
say "done: $run/summary.md"
