# bpfstats.jq: BPF run time of one tool, from the snapshots record.sh's
# poller took every ~0.5 s while the tool ran (one JSON object a line:
# t = unix time, ids = prog IDs the tool's processes held open, progs =
# `bpftool prog show --json` with kernel.bpf_stats_enabled=1).
#
# The last snapshot that saw a program holds its totals. record.sh pins the
# programs as it sees them and takes one snapshot after the tool's exit, so
# nothing is missed; without the pins (no bpffs) programs are unloaded at
# the exit and up to one poll interval is missed. Run with jq -s.
(map(.ids) | add // [] | unique) as $ids
| [ .[] | .t as $t | .progs[] | select(.id as $i | any($ids[]; . == $i)) | . + {seen: $t} ]
| group_by(.id) | map(max_by(.seen))
| {
    progs: map({id, type, name, run_time_ns: (.run_time_ns // 0), run_cnt: (.run_cnt // 0), last_seen: .seen}),
    run_time_ns: (map(.run_time_ns // 0) | add // 0),
    run_cnt: (map(.run_cnt // 0) | add // 0),
    sample_time_ns: (map(select(.type == "perf_event") | .run_time_ns // 0) | add // 0),
    sample_cnt: (map(select(.type == "perf_event") | .run_cnt // 0) | add // 0),
    last_seen: (map(.seen) | max)
  }
