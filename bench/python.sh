#!/usr/bin/env bash
# python.sh: what reading Python frames costs, side by side in one run,
# each case the Python fixture (testdata/fixtures/python/busy.py) busy on
# every CPU:
#   py3.9 ... flint on CPython 3.9-3.13 (pyenv's builds), then the same
#             with --no-python (the native walk alone): the difference is
#             what reading the Python frames costs
#   debian    the same on Debian's python3, built without frame pointers
#             (its native walk uses unwind tables)
#   py-spy    py-spy record --nonblocking, and py-spy record (which stops
#             the process for each sample), on Debian's python3
#
#	sudo bench/python.sh                     # 999 Hz, 10 s a case, 3 rounds
#	sudo FREQ=99 SECS=30 ROUNDS=1 bench/python.sh
#
# For flint: the sample program's run time per run, from the kernel's BPF
# statistics, and the Python frames a stack. For py-spy, which reads the
# process's memory from user space: its CPU time per sample.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/bpfprogs.sh
rounds=${ROUNDS:-3}; freq=${FREQ:-999}; secs=${SECS:-10}
pyenv=${PYENV_ROOT:-/root/.pyenv}/versions
[[ $(id -u) -eq 0 ]] || { echo "python: needs root" >&2; exit 1; }
for tool in bpftool jq py-spy; do
	command -v $tool >/dev/null || { echo "python: needs $tool" >&2; exit 1; }
done
tmp=$(mktemp -d); pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; sysctl -qw kernel.bpf_stats_enabled=0; rm -rf "$tmp"; }
trap cleanup EXIT
go build -o "$tmp/flint" ./cmd/flint
fixture=testdata/fixtures/python/busy.py
sysctl -qw kernel.bpf_stats_enabled=1

# pyframes FOLDED: mean Python frames (module.function of a .py) per sample.
pyframes() { awk '{ n = $NF; d += gsub(/;(busy|threading|json\.[a-z]+)\./, "&") * n; s += n } END { printf "%.1f", s ? d / s : 0 }' "$1"; }

# start PYTHON: one fixture per CPU; their PIDs in fx.
start() {
	fx=()
	for _ in $(seq "$(nproc)"); do
		"$1" "$fixture" 1 >/dev/null & fx+=($!); pids+=($!)
	done
	sleep 1
}

# flint_case NAME PYTHON [FLAGS]
flint_case() {
	local name=$1 python=$2 flags=${3:-}
	[[ -x $python ]] || { echo "$name: no $python" >&2; return; }
	start "$python"
	# shellcheck disable=SC2086
	"$tmp/flint" record -a -F "$freq" -d "$((secs + 3))s" --no-kernel $flags -o "$tmp/out.folded" 2>/dev/null & local f=$!
	sleep 2; local a; a=$(sample_stats $f); sleep "$secs"; local b; b=$(sample_stats $f)
	wait $f; kill "${fx[@]}"; wait "${fx[@]}" 2>/dev/null || true
	grep "^python3[.0-9]*;" "$tmp/out.folded" >"$tmp/fixture.folded" || true
	echo "$a $b" | awk -v n="$name" -v hz="$freq" -v d="$(pyframes "$tmp/fixture.folded")" \
		'{ printf "%-12s %d Hz: %5.0f ns/sample over %d samples, %s Python frames a stack\n", n, hz, ($3 - $1) / ($4 - $2), $4 - $2, d }'
}

# spy_case NAME FLAGS: py-spy on one fixture; its CPU time per sample.
spy_case() {
	local name=$1 flags=$2
	start /usr/bin/python3
	local TIMEFORMAT='%U %S' t
	# shellcheck disable=SC2086
	t=$( { time py-spy record $flags -r "$freq" -d "$secs" -f raw -p "${fx[0]}" -o "$tmp/spy.txt" >"$tmp/spy.log" 2>&1; } 2>&1 | tail -1)
	kill "${fx[@]}"; wait "${fx[@]}" 2>/dev/null || true
	local samples; samples=$(sed -n 's/.*Samples: \([0-9]*\).*/\1/p' "$tmp/spy.log" | tail -1)
	echo "$t $samples" | awk -v n="$name" -v hz="$freq" \
		'{ printf "%-12s %d Hz: %5.0f ns/sample of py-spy CPU over %d samples\n", n, hz, ($1 + $2) * 1e9 / $3, $3 }'
}

for _ in $(seq "$rounds"); do
	for v in 3.9.18 3.10.13 3.11.7 3.12.1 3.13.0; do
		flint_case "py${v%.*}" "$pyenv/$v/bin/python${v%.*}"
		flint_case "py${v%.*}-native" "$pyenv/$v/bin/python${v%.*}" --no-python
	done
	flint_case debian /usr/bin/python3
	flint_case debian-native /usr/bin/python3 --no-python
	spy_case py-spy-nb --nonblocking
	spy_case py-spy ""
done
