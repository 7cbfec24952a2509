package agent

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/flint-dev/flint/internal/export"
	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/spool"
	"github.com/flint-dev/flint/internal/unwind"
)

// metrics are the agent's counters, read by /metrics from other goroutines.
type metrics struct {
	windowsWritten, windowsDropped atomic.Int64
	samplesWritten                 atomic.Int64
	consecutiveFailures            atomic.Int64
	wasFailing                     atomic.Bool
	bpfRunTime                     atomic.Int64 // ns
	examinations, findings         atomic.Int64
	examinationsFailed             atomic.Int64
}

func (m *metrics) record(p *profile.Profile, err error) {
	if err != nil {
		m.windowsDropped.Add(1)
		m.consecutiveFailures.Add(1)
		return
	}
	m.windowsWritten.Add(1)
	if p.Kind == profile.CPU { // off-CPU counts are nanoseconds
		m.samplesWritten.Add(p.Total())
	}
	if m.consecutiveFailures.Swap(0) > 0 {
		m.wasFailing.Store(true)
	}
}

// failing returns how many writes in a row have failed.
func (m *metrics) failing() int64 { return m.consecutiveFailures.Load() }

// recovered reports, once, that writes succeed again after failures.
func (m *metrics) recovered() bool { return m.wasFailing.Swap(false) }

// writeMetrics writes the agent's metrics in the Prometheus text format.
func (a *Agent) writeMetrics(w io.Writer) {
	gauge := metricWriter(w)
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	gauge("flint_agent_cpu_seconds_total", "User and system CPU time of the agent process.", "counter", cpu)
	rss, peak := memory()
	gauge("flint_agent_resident_memory_bytes", "Resident set size of the agent process.", "gauge", rss)
	gauge("flint_agent_peak_resident_memory_bytes", "Peak resident set size of the agent process.", "gauge", peak)
	gauge("flint_bpf_run_seconds_total", "Run time of flint's BPF programs, their task works included.", "counter", float64(a.metrics.bpfRunTime.Load())/1e9)
	if st, err := a.sampler.Stats(); err == nil {
		gauge("flint_samples_total", "Timer ticks the BPF program ran on: samples taken, and ticks of young processes skipped (flint_samples_young_skipped_total).", "counter", st.Samples)
		byReason(w, "flint_samples_lost_total", "Samples or stacks lost, by reason.",
			reason{"counts_map_full", st.CountsFull}, reason{"ring_buffer_full", st.RingBufFull}, reason{"stack_map_full", st.StacksFull},
			reason{"user_stack_error", st.UserStackErrors}, reason{"kernel_stack_error", st.KernelStackErrors},
			reason{"process_event_lost", st.ProcEventsLost},
			reason{"exited_before_listing", st.HandedLost()})
		gauge("flint_bpf_task_work_seconds_total", "Of flint_bpf_run_seconds_total, the time of the BPF task works that list new processes (the kernel's BPF statistics miss it; the program times it).", "counter", st.TaskWorkTime.Seconds())
		gauge("flint_samples_handed_total", "First samples of new processes in user code handed to the process's listing, which walks the stack with the unwind tables it fills as the thread returns to user code.", "counter", st.SamplesHanded)
		gauge("flint_samples_young_skipped_total", "Ticks of processes in their first second not sampled (--young-sample); each sample of such a process counts for the ticks skipped.", "counter", st.YoungSkipped)
		gauge("flint_processes_quiet_total", "New processes announced without waking the agent (their files and cgroups known), learned at its next drain.", "counter", st.ProcsQuiet)
		gauge("flint_unwind_walks_total", "User stacks walked with unwind tables.", "counter", st.UnwindWalks)
		gauge("flint_unwind_complete_total", "Of the walks with unwind tables, those that reached the outermost frame.", "counter", st.UnwindComplete)
		gauge("flint_unwind_faults_total", "Of the walks with unwind tables, those cut short by unreadable stack memory.", "counter", st.UnwindFaults)
		gauge("flint_unwind_stale_total", "Times a process ran code outside the mappings its unwind tables list (a library loaded since).", "counter", st.UnwindStale)
		gauge("flint_python_stacks_total", "Samples of CPython threads whose Python frames were read.", "counter", st.PythonStacks)
		gauge("flint_python_codes_copied_total", "Code objects of young CPython processes that the sampler copied as it sampled them, so that flint need not read them from the process.", "counter", st.PythonCodes)
		gauge("flint_off_cpu_spans_total", "Spans off the CPU recorded (with --off-cpu always, else for /debug/pprof/block).", "counter", st.OffCPUSpans)
		gauge("flint_off_cpu_lost_total", "Spans off the CPU lost to a full map.", "counter", st.OffCPUFull)
		gauge("flint_python_no_thread_total", "Samples of CPython processes whose thread state was not found (threads that never ran Python).", "counter", st.PythonNoThread)
	}
	if a.unwind != nil {
		writeUnwindMetrics(w, a.unwind.Stats())
	}
	gauge("flint_samples_written_total", "CPU samples written to the store, or to the spool in front of a remote store.", "counter", a.metrics.samplesWritten.Load())
	gauge("flint_windows_written_total", "Windows written to the store, or to the spool in front of a remote store (with --off-cpu, a CPU and an off-CPU one each window).", "counter", a.metrics.windowsWritten.Load())
	gauge("flint_windows_dropped_total", "Windows dropped because the store (or the spool) could not write them.", "counter", a.metrics.windowsDropped.Load())
	if a.spool != nil {
		writeSpoolMetrics(w, a.spool.Stats(), time.Now())
	}
	writeExportMetrics(w, a.exports)
	if a.o.JVMMaps != nil {
		st := a.o.JVMMaps.Stats()
		gauge("flint_jvm_maps_written_total", "JIT maps JVMs wrote when asked.", "counter", st.Written)
		gauge("flint_jvm_maps_failed_total", "Requests for a JVM's JIT map that failed (logged once per JVM).", "counter", st.Failed)
		gauge("flint_jvm_maps_skipped_total", "Requests for a JIT map dropped because many were waiting.", "counter", st.Skipped)
	}
	if a.receive != nil {
		st := a.receive.otlp.Stats()
		gauge("flint_receive_requests_total", "OTLP export requests received.", "counter", st.Requests)
		gauge("flint_receive_profiles_total", "OTLP profiles received and decoded.", "counter", st.Profiles)
		gauge("flint_receive_samples_total", "Samples in the OTLP profiles decoded.", "counter", st.Samples)
		byReason(w, "flint_receive_refused_total", "OTLP requests or profiles refused, by reason.",
			reason{"invalid_request", st.Invalid}, reason{"unsupported_type", st.Unsupported}, reason{"store_failed", st.SinkFailed})
	}
	gauge("flint_doctor_examinations_total", "Windows flint doctor's detectors examined.", "counter", a.metrics.examinations.Load())
	gauge("flint_doctor_examinations_failed_total", "Examinations that could not start, end or be stored.", "counter", a.metrics.examinationsFailed.Load())
	gauge("flint_doctor_findings_total", "Findings stored.", "counter", a.metrics.findings.Load())
	ns := a.sym.Stats()
	gauge("flint_symbol_cache_hits_total", "Addresses named from the cache.", "counter", ns.CacheHits)
	gauge("flint_symbol_cache_misses_total", "Addresses named by a table lookup.", "counter", ns.CacheMisses)
	gauge("flint_binaries_parsed_total", "Binaries whose symbol tables were parsed.", "counter", ns.BinariesParsed)
	gauge("flint_processes", "Process images the agent knows.", "gauge", a.coll.Processes())
	// What naming skipped: hostile or oversized inputs on the node.
	cs := a.coll.Stats()
	byReason(w, "flint_naming_skipped_total", "Inputs naming skipped, by reason.",
		reason{"perf_map_rejected", ns.PerfMapsRejected}, reason{"perf_map_truncated", ns.PerfMapsTruncated},
		reason{"file_not_held", ns.FilesNotHeld}, reason{"process_not_learned", cs.ProcessesSkipped})
	gauge("flint_processes_listed_total", "New processes named from the kernel's listing of their mappings, without reading /proc/PID/maps.", "counter", cs.ProcessesListed)
	gauge("flint_python_processes", "CPython processes whose Python frames are read.", "gauge", cs.PythonProcesses)
	gauge("flint_python_unsupported_total", "CPython processes of versions whose frames flint cannot read (native frames only).", "counter", cs.PythonUnsupported)
	if a.spool == nil {
		gauge("flint_store_bytes", "Bytes of the store's files.", "gauge", dirSize(a.o.DataDir))
	}
	gauge("flint_go_goroutines", "Goroutines of the agent.", "gauge", runtime.NumGoroutine())
}

// writeUnwindMetrics writes what the unwind tables hold and skipped.
func writeUnwindMetrics(w io.Writer, st unwind.TableStats) {
	gauge := metricWriter(w)
	gauge("flint_unwind_processes", "Processes whose stacks are walked with unwind tables.", "gauge", st.Processes)
	gauge("flint_unwind_binaries", "Binaries whose unwind tables are loaded.", "gauge", st.Binaries)
	gauge("flint_unwind_tables_building", "Binaries whose unwind tables are being built or wait to be: frame pointers in their code meanwhile.", "gauge", st.Building)
	gauge("flint_unwind_rows", "Unwind rows loaded.", "gauge", st.RowsUsed)
	gauge("flint_unwind_rows_capacity", "Unwind rows --unwind-memory holds.", "gauge", st.Capacity)
	gauge("flint_unwind_tables_built_total", "Binaries whose call frame information was read (Go programs are not).", "counter", st.Built)
	gauge("flint_unwind_build_seconds_total", "Time spent reading call frame information.", "counter", st.BuildTime.Seconds())
	gauge("flint_unwind_unsupported_rows_total", "Rows of the tables built that no walker rule expresses: frame pointers there.", "counter", st.UnsupportedRows)
	gauge("flint_unwind_invalid_fdes_total", "FDEs of the tables built that could not be read: frame pointers there.", "counter", st.InvalidFDEs)
	byReason(w, "flint_unwind_skipped_total", "Binaries or processes left to frame pointers, by reason.",
		reason{"no_cfi", st.NoCFI}, reason{"malformed", st.Malformed}, reason{"over_budget", st.OverBudget},
		reason{"too_large", st.Unusable}, reason{"queue_full", st.Dropped}, reason{"process_map_full", st.ListFailed})
}

// reason is one value of a counter labelled by reason.
type reason struct {
	name string
	n    any // an integer
}

// byReason writes a counter labelled by reason.
func byReason(w io.Writer, name, help string, rs ...reason) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", name, help, name)
	for _, r := range rs {
		fmt.Fprintf(w, "%s{reason=%q} %v\n", name, r.name, r.n)
	}
}

// metricWriter returns a function writing one metric without labels to w.
func metricWriter(w io.Writer) func(name, help, typ string, v any) {
	return func(name, help, typ string, v any) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %v\n", name, help, name, typ, name, v)
	}
}

// writeSpoolMetrics writes the spool's gauges and counters.
func writeSpoolMetrics(w io.Writer, st spool.Stats, now time.Time) {
	gauge := metricWriter(w)
	gauge("flint_spool_windows", "Windows waiting in the spool for the remote store.", "gauge", st.Windows)
	gauge("flint_spool_bytes", "Bytes of the windows waiting in the spool.", "gauge", st.Bytes)
	age := 0.0
	if !st.Oldest.IsZero() {
		age = now.Sub(st.Oldest).Seconds()
	}
	gauge("flint_spool_oldest_window_age_seconds", "Age of the oldest window waiting in the spool; 0 when empty.", "gauge", age)
	gauge("flint_windows_sent_total", "Windows the remote store accepted from the spool.", "counter", st.Sent)
	gauge("flint_spool_send_failures_total", "Failed attempts to open the remote store or send it a window.", "counter", st.SendFailures)
	gauge("flint_spool_dropped_windows_total", "Windows dropped from the full spool, oldest first.", "counter", st.DroppedWindows)
	gauge("flint_spool_dropped_bytes_total", "Bytes of the windows dropped from the full spool.", "counter", st.DroppedBytes)
	gauge("flint_spool_corrupt_windows_total", "Spool files that could not be read, set aside as *.corrupt.", "counter", st.Corrupt)
}

// memory reads the agent's resident and peak resident set sizes in bytes.
func memory() (rss, peak int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for line := range strings.Lines(string(b)) {
		for key, dst := range map[string]*int64{"VmRSS:": &rss, "VmHWM:": &peak} {
			if v, ok := strings.CutPrefix(line, key); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				*dst = kb << 10
			}
		}
	}
	return rss, peak
}

func dirSize(dir string) int64 {
	var n int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if fi, err := os.Stat(filepath.Join(dir, e.Name())); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

// writeExportMetrics writes each export target's counters, labelled with
// its URL.
func writeExportMetrics(w io.Writer, exports []*export.Exporter) {
	if len(exports) == 0 {
		return
	}
	for _, m := range []struct {
		name, help, kind string
		value            func(export.Stats) int64
	}{
		{"flint_export_windows_sent_total", "Windows an export target took.", "counter", func(s export.Stats) int64 { return s.Sent }},
		{"flint_export_send_failures_total", "Tries to send a window that failed and will be retried.", "counter", func(s export.Stats) int64 { return s.Failures }},
		{"flint_export_windows_rejected_total", "Windows an export target refused for good (dropped).", "counter", func(s export.Stats) int64 { return s.Rejected }},
		{"flint_export_windows_dropped_total", "Windows dropped from a full export queue.", "counter", func(s export.Stats) int64 { return s.Dropped }},
		{"flint_export_queue_windows", "Windows waiting for an export target.", "gauge", func(s export.Stats) int64 { return int64(s.Queued) }},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", m.name, m.help, m.name, m.kind)
		for _, e := range exports {
			fmt.Fprintf(w, "%s{target=%q} %d\n", m.name, e.Name(), m.value(e.Stats()))
		}
	}
}
