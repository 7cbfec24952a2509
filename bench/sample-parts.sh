#!/usr/bin/env bash
# sample-parts.sh: where the sample program's time goes, part by part, for
# the samples of short python3 runs (bench/churn.sh's, ten a second, 60 s)
# and then of one long-lived python3 doing their imports over and over
# (60 s). It builds flint from HEAD with bench/sample-parts.patch, which
# times each part of the program with bpf_ktime_get_ns() into the
# sample_parts map, by kind of process: CPython younger than a second,
# older, or another; it counts their frames and row searches too. The
# clock reads add some 0.3 us a sample. Prints, for each phase and kind,
# microseconds a sample in each part and frames a sample.
#
#	sudo bench/sample-parts.sh
#	sudo DEPTH=30 bench/sample-parts.sh   # the long-lived python3's rounds 30 calls deep
#	sudo FREQUENCY=999 bench/sample-parts.sh   # the agent's --frequency (default 99)
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) -eq 0 ]] || { echo "sample-parts: needs root" >&2; exit 1; }
[[ ${FREQUENCY:=99} =~ ^[1-9][0-9]*$ ]] || { echo "sample-parts: FREQUENCY=$FREQUENCY: want samples a second" >&2; exit 2; }
[[ ${DEPTH:=0} =~ ^[0-9]+$ ]] || { echo "sample-parts: DEPTH=$DEPTH: want Python calls" >&2; exit 2; }
for tool in bpftool jq curl git make go clang-19; do
	command -v $tool >/dev/null || { echo "sample-parts: needs $tool on PATH (README, \"Develop\")" >&2; exit 1; }
done
CHURN=10
source bench/churn.sh # churn_cmd, churn_start, python_again, learn
churn_pid=
tmp=$(mktemp -d) pids=()
cleanup() {
	churn_stop
	kill "${pids[@]}" 2>/dev/null || true
	git worktree remove --force "$tmp/src" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

git worktree add --quiet --detach "$tmp/src" HEAD
(cd "$tmp/src" && git apply "$OLDPWD/bench/sample-parts.patch" && make generate >/dev/null &&
	CGO_ENABLED=0 go build -o "$tmp/flint" ./cmd/flint) ||
	{ echo "sample-parts: bench/sample-parts.patch does not build on HEAD: update it" >&2; exit 1; }

"$tmp/flint" agent --data-dir "$tmp/data" --listen 127.0.0.1:7492 --doctor-every 0 \
	--frequency "$FREQUENCY" >/dev/null 2>&1 &
pids+=($!)
# parts: the sample_parts map, slot and value (summed over CPUs) a line.
parts() { bpftool map dump name sample_parts -j | jq -r '.[] | "\(.formatted.key) \([.formatted.values[].value] | add)"'; }
sleep 10
learn parts
sleep 20
parts >"$tmp/p0"
churn_start "$tmp/count"
sleep 60
churn_stop
sleep 3 # the last runs end
parts >"$tmp/p1"
"${churn_cmd[0]}" -c "$python_again" "$DEPTH" &
pids+=($!)
sleep 10 # past its first second, when it is young
parts >"$tmp/p2"
sleep 60
parts >"$tmp/p3"
paste "$tmp/p0" "$tmp/p1" "$tmp/p2" "$tmp/p3" | awk '
{ a[$1] = $4 - $2; b[$1] = $8 - $6 }
function show(title, d,   k, j, n, line) {
	print title
	split("see_proc,Python frames,native walk,kernel stack,ring output,code copies (tell_young_python),all", part, ",")
	split("user frames,Python frames,row searches,kernel frames", count, ",")
	for (k = 0; k < 3; k++) {
		n = d[k * 16]
		if (n == 0)
			continue
		line = sprintf("  %s: %d samples; us a sample:", k == 0 ? "CPython, young" : k == 1 ? "CPython, older" : "other", n)
		for (j = 1; j <= 7; j++)
			line = line sprintf(" %s %.2f;", part[j], d[k * 16 + j] / n / 1000)
		line = line " a sample:"
		for (j = 0; j < 4; j++)
			line = line sprintf(" %s %.1f%s", count[j + 1], d[k * 16 + 8 + j] / n, j < 3 ? ";" : "")
		print line
	}
}
END { show("600 python3 runs, ten a second:", a); show("one long-lived python3 importing again and again:", b) }'
