#!/usr/bin/env bash
# mixed-rates.sh: one store holding windows sampled at two rates. Agent B
# samples at 99 Hz and takes OTLP profiles (--receive otlp); agent A
# samples at 19 Hz and sends its windows to B (--export otlp://). A busy
# loop runs SECS seconds (default 40) while both sample it, so B's store
# holds its CPU time twice; the script prints the loop's CPU time as the
# kernel counted it, the CPU time B's API answers for it (a pprof
# profile's cpu/nanoseconds), and B's windows by period.
#
#	sudo bench/mixed-rates.sh ./flint
#
# Needs curl, sqlite3 and go (go tool pprof reads the profile).
set -euo pipefail
cd "$(dirname "$0")/.."
(($# == 1)) || { echo "usage: mixed-rates.sh FLINT_BIN" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "mixed-rates: needs root" >&2; exit 1; }
for tool in curl sqlite3 go; do
	command -v "$tool" >/dev/null || { echo "mixed-rates: needs $tool" >&2; exit 1; }
done
flint=$(realpath "$1")
secs=${SECS:-40}
[[ $secs =~ ^[1-9][0-9]*$ ]] || { echo "mixed-rates: SECS=$secs: want seconds" >&2; exit 2; }
d=$(mktemp -d)
pids=()
cleanup() {
	((${#pids[@]} == 0)) || kill "${pids[@]}" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$d"
}
trap cleanup EXIT

up() { # waits for an agent's API on port $1
	for _ in $(seq 100); do curl -sf "127.0.0.1:$1/healthz" >/dev/null && return; sleep 0.1; done
	echo "mixed-rates: the agent on port $1 did not start" >&2; exit 1
}
"$flint" agent --data-dir "$d/b" --listen 127.0.0.1:17070 --receive otlp --receive-listen 127.0.0.1:14317 \
	--window 5s --doctor-every 0 2>"$d/b.log" & b=$!; pids+=($b)
up 17070
"$flint" agent --data-dir "$d/a" --listen 127.0.0.1:17071 --frequency 19 --export otlp://127.0.0.1:14317 \
	--window 5s --doctor-every 0 2>"$d/a.log" & a=$!; pids+=($a)
up 17071
sleep 5
from=$(date +%s)
# A copy of bash, so that its samples have a name of their own; its CPU
# time is this shell's children's once it is reaped.
cp /bin/bash "$d/mixspin"
ticks() { awk '{ print $16 + $17 }' /proc/$$/stat; }
t0=$(ticks)
"$d/mixspin" -c "end=\$((SECONDS + $secs)); while ((SECONDS < end)); do :; done"
t1=$(ticks)
# Two windows of both agents, and A's last one sent.
sleep 12
kill -TERM $a; wait $a || true
sleep 2
curl -sf "127.0.0.1:17070/api/v1/profile?from=$((from - 1))&to=now&format=pprof" \
	--data-urlencode 'selector={comm="mixspin"}' -G -o "$d/p.pb.gz"
kill -TERM $b; wait $b || true
pids=()
awk -v t="$((t1 - t0))" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "kernel: %.2f s of CPU\n", t / hz }'
go tool pprof -raw "$d/p.pb.gz" 2>/dev/null | awk '
	/^Samples:/ { in_samples = 1; next }
	/^Locations/ { in_samples = 0 }
	in_samples && /^ *[0-9]+ +[0-9]+:/ { n += $1; ns += $2 }
	END { printf "store: %d samples, %.2f s of CPU\n", n, ns / 1e9 }'
echo "B's windows: period ns | windows | samples"
sqlite3 -readonly "$d/b/flint.db" 'SELECT period, count(*), sum(samples) FROM windows WHERE type = 0 GROUP BY period'
