# bpfprogs.sh: the BPF programs one process holds, from the kernel's BPF
# statistics (kernel.bpf_stats_enabled); sourced by the benchmarks, which
# must not read another flint's programs running on the machine too.

# progs PID: each BPF program PID holds open: ID, name, run time (ns) and
# runs.
progs() {
	local ids; ids=$({ grep -h '^prog_id:' /proc/"$1"/fdinfo/* 2>/dev/null || true; } | awk '{ print $2 }' | sort -u | paste -sd, -)
	bpftool prog show --json | jq -r --argjson ids "[$ids]" \
		'.[] | select(.id as $i | $ids | index($i)) | [.id, .name, (.run_time_ns // 0), (.run_cnt // 0)] | @tsv' | sort
}

# sample_stats PID: the run time (ns) and runs of PID's sample program.
sample_stats() { progs "$1" | awk -F'\t' '$2 == "sample" { print $3 "\t" $4 }'; }
