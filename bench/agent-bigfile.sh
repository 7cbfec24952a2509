#!/usr/bin/env bash
# agent-bigfile.sh: an agent's peak memory when it meets a process that
# maps a very large library. A python3 maps LIB (default: chdb's, which
# `make deps-chdb` installs: 555 MB, 31 MB of .eh_frame) with ctypes and
# spins SECS seconds (default 20) while the agent samples it; the script
# prints the agent's peak and current RSS and its unwind-table metrics.
#
#	sudo bench/agent-bigfile.sh ./flint
#	sudo LIB=/usr/lib/x86_64-linux-gnu/libLLVM.so.19.1 bench/agent-bigfile.sh ./flint
#	sudo FLAGS='--unwind-memory 0' bench/agent-bigfile.sh ./flint   # more agent flags
set -euo pipefail
cd "$(dirname "$0")/.."
(($# == 1)) || { echo "usage: agent-bigfile.sh FLINT_BIN" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "agent-bigfile: needs root" >&2; exit 1; }
command -v curl >/dev/null || { echo "agent-bigfile: needs curl" >&2; exit 1; }
flint=$(realpath "$1")
lib=${LIB:-$(python3 -c 'import chdb, glob, os; print(glob.glob(os.path.join(os.path.dirname(chdb.__file__), "_chdb*.so"))[0])' 2>/dev/null || true)}
[[ -f $lib ]] || { echo "agent-bigfile: no LIB (set LIB, or make deps-chdb for chdb's)" >&2; exit 1; }
secs=${SECS:-20}
[[ $secs =~ ^[1-9][0-9]*$ ]] || { echo "agent-bigfile: SECS=$secs: want seconds" >&2; exit 2; }
d=$(mktemp -d)
agent=
cleanup() {
	[[ -z $agent ]] || kill "$agent" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$d"
}
trap cleanup EXIT
port=17090
# FLAGS is split into words on purpose.
# shellcheck disable=SC2086
"$flint" agent --data-dir "$d" --listen 127.0.0.1:$port --doctor-every 0 ${FLAGS:-} 2>"$d/log" & agent=$!
for _ in $(seq 100); do curl -sf 127.0.0.1:$port/healthz >/dev/null && break; sleep 0.1; done
sleep 3
echo "$(du -h "$lib" | cut -f1) $lib"
python3 -c 'import ctypes, sys, time
ctypes.CDLL(sys.argv[1])
end = time.time() + float(sys.argv[2])
while time.time() < end:
	pass' "$lib" "$secs"
sleep 3
awk '/^VmHWM|^VmRSS/ { printf "%s %d MB  ", $1, $2 / 1024 } END { print "" }' /proc/$agent/status
curl -s 127.0.0.1:$port/metrics | grep -E '^flint_unwind_(rows|build_seconds_total|skipped_total)' | grep -v ' 0$'
