#!/usr/bin/env bash
# twins.sh: how close the doctor's healthy twins come to the thresholds,
# under load. Runs the doctor's root tests RUNS times (default 20) while a
# busy loop spins on every CPU, and prints, per twin and value, the worst
# (highest) value seen and the failures. The margins noted beside
# DefaultThresholds (internal/doctor/doctor.go) come from its output.
#
#	sudo bench/twins.sh              # 20 runs
#	sudo RUNS=5 bench/twins.sh
#
# Logs go to bench/results/twins-<date>/.
set -euo pipefail

RUNS=${RUNS:-20}
TESTS=${TESTS:-'^(TestBusyPoll|TestSleepPoll|TestLockContention|TestGoRuntimeOverhead|TestGOMAXPROCSQuota|TestHotDebugOutput|TestSyscallErrors|TestProbeOverhead)$'}
say() { printf 'twins: [%4ds] %s\n' "$SECONDS" "$*" >&2; }
die() { printf 'twins: %s\n' "$*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (run: sudo bench/twins.sh)"
[[ $RUNS =~ ^[0-9]+$ && $RUNS -ge 1 ]] || die "RUNS=$RUNS: want a whole number, at least 1"

cd "$(dirname "$0")/.."
out=$PWD/bench/results/twins-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$out"
go test -c -o "$out/doctor.test" ./internal/doctor/

spinners=()
stop() { for p in "${spinners[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop EXIT
for _ in $(seq "$(nproc)"); do
	(while :; do :; done) &
	spinners+=($!)
done
say "spinning on $(nproc) CPUs: ${spinners[*]}"

cd internal/doctor # the fixtures' paths are relative to the package
fails=0
for i in $(seq "$RUNS"); do
	if "$out/doctor.test" -test.count=1 -test.v -test.run "$TESTS" >"$out/run-$i.log" 2>&1; then
		say "run $i: ok"
	else
		fails=$((fails + 1))
		say "run $i: FAIL ($(grep -c -- '--- FAIL' "$out/run-$i.log") tests)"
	fi
done
stop

# "twin LABEL: DETECTOR name=value ..." lines -> worst value of each.
grep -h ' twin ' "$out"/run-*.log | sed 's/^.*twin //' | awk '
{
	split($0, a, ": "); label = a[1]; n = split(a[2], f, " "); det = f[1]
	for (i = 2; i <= n; i++) {
		split(f[i], kv, "="); k = label " | " det " | " kv[1]
		if (!(k in max) || kv[2] + 0 > max[k]) max[k] = kv[2] + 0
		cnt[k]++
	}
}
END { for (k in max) printf "%-70s worst %-10.4g of %d values\n", k, max[k], cnt[k] }' | sort | tee "$out/worst.txt"
grep -h -- '--- FAIL\|_test.go:[0-9]*: ' "$out"/run-*.log | grep -v ' twin \|note:' | sort | uniq -c | sort -rn | head -40 >"$out/failures.txt" || true
say "$fails of $RUNS runs failed; worst values in $out/worst.txt, failures in $out/failures.txt"
