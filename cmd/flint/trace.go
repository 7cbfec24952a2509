package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flint-dev/flint/internal/privilege"
	"github.com/flint-dev/flint/internal/trace"
)

// TraceConfig is what `flint trace` was asked to do.
type TraceConfig struct {
	PID       int
	Exe       string
	Functions []string
	// Duration stops the trace; zero runs until Ctrl-C (or until the
	// process exits, with -p).
	Duration time.Duration
	Latency  bool
	JSON     bool
	// MaxOverhead is the probe time allowed, as a share of one CPU (0.02
	// for 2%); zero means no limit (--max-overhead off).
	MaxOverhead float64
}

// defaultMaxOverhead is --max-overhead's default: 2% of one CPU.
const defaultMaxOverhead = 0.02

// Validate checks the config.
func (c *TraceConfig) Validate() error {
	switch {
	case c.PID == 0 && c.Exe == "":
		return errors.New("say what to trace: -p PID or --exe PATH")
	case c.PID != 0 && c.Exe != "":
		return errors.New("-p and --exe exclude each other")
	case c.PID < 0:
		return fmt.Errorf("-p %d: not a PID", c.PID)
	case len(c.Functions) == 0:
		return errors.New("name the functions to trace, e.g. flint trace -p PID 'main.(*Server).handle' time.Now")
	case c.Duration < 0 || c.Duration > maxDuration:
		return fmt.Errorf("-d %s: duration must be between 1ms and %s (or absent: until Ctrl-C)", c.Duration, maxDuration)
	case c.MaxOverhead < 0 || c.MaxOverhead > 100:
		return fmt.Errorf("--max-overhead %g%%: must be above 0%% and at most 10000%% of a CPU, or off", c.MaxOverhead*100)
	}
	for _, f := range c.Functions {
		if strings.TrimSpace(f) == "" {
			return errors.New("empty function name")
		}
	}
	return nil
}

// overheadFlag parses --max-overhead: "2%", "2" (percent) or "off".
type overheadFlag struct{ v *float64 }

func (f overheadFlag) String() string {
	if f.v == nil {
		return ""
	}
	if *f.v == 0 {
		return "off"
	}
	return strconv.FormatFloat(*f.v*100, 'g', -1, 64) + "%"
}

func (f overheadFlag) Set(s string) error {
	if s == "off" || s == "none" {
		*f.v = 0
		return nil
	}
	n, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	if err != nil || n <= 0 || math.IsNaN(n) || math.IsInf(n, 0) {
		return fmt.Errorf("bad overhead %q (want e.g. 2%%, 0.5%%, or off)", s)
	}
	*f.v = n / 100
	return nil
}

const traceUsage = `Usage: flint trace (-p PID | --exe PATH) [flags] FUNCTION...

Counts calls to functions with uprobes (and with --latency times them), and
says what the probes cost: a probe hit takes microseconds, so a function
called millions of times a second slows its process many times over.

FUNCTION is a name as the binary spells it: 'main.(*Server).handle',
time.Now, malloc (C functions are found in shared libraries too), or a glob
where * matches any run of characters and ? one: 'main.*'.

--max-overhead bounds the CPU time the probes take, summed over the traced
processes, as a share of one CPU: functions whose calls/s x cost per call
exceed it are detached (checked after 0.2 s, then every second).

Examples:
  sudo flint trace -p 4242 'main.(*Server).handle' time.Now -d 10s
  sudo flint trace --exe /usr/bin/api --latency 'database/sql.(*DB).QueryContext'
  sudo flint trace -p 777 malloc free

Flags:
`

func parseTrace(args []string) (*TraceConfig, error) {
	c := &TraceConfig{MaxOverhead: defaultMaxOverhead}
	fs := flag.NewFlagSet("trace", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, name := range []string{"p", "pid"} {
		fs.IntVar(&c.PID, name, 0, "trace the process with this `PID`")
	}
	fs.StringVar(&c.Exe, "exe", "", "trace every process running this executable `path`, those started while tracing too")
	for _, name := range []string{"d", "duration"} {
		fs.Var(durationFlag{&c.Duration}, name, "stop after this `duration` (default: at Ctrl-C, or when the process exits)")
	}
	fs.BoolVar(&c.Latency, "latency", false, "time each call: log2 histogram with p50/p90/p99 (costs a second probe hit per call)")
	fs.BoolVar(&c.JSON, "json", false, "print the results as JSON")
	fs.Var(overheadFlag{&c.MaxOverhead}, "max-overhead", "detach functions whose probes take more than this `share` of one CPU (e.g. 2%, 0.5%), or off (default 2%)")
	var funcs []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Print(traceUsage)
				fs.SetOutput(os.Stdout)
				fs.PrintDefaults()
				return nil, err
			}
			return nil, usageError{err}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		// Flags may follow function names; "--" ends the flags.
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			funcs = append(funcs, rest...)
			break
		}
		funcs = append(funcs, rest[0])
		args = rest[1:]
	}
	c.Functions = funcs
	if err := c.Validate(); err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

func traceCmd(args []string, stdout, stderr io.Writer) error {
	c, err := parseTrace(args)
	if err != nil {
		return err
	}
	if err := trace.CheckPrivileges(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	live := isTerminal(os.Stderr)
	t, err := trace.Start(trace.Options{
		Target:      trace.Target{PID: c.PID, Exe: c.Exe},
		Functions:   c.Functions,
		Latency:     c.Latency,
		MaxOverhead: c.MaxOverhead,
		Duration:    c.Duration,
		Progress: func(p trace.Progress) {
			if live {
				fmt.Fprintf(stderr, "\r\033[K%s", traceProgressLine(p))
			}
		},
		OnDetach: func(d trace.Detach) {
			if live {
				fmt.Fprint(stderr, "\r\033[K")
			}
			fmt.Fprintln(stderr, "flint: "+detachLine(d))
		},
	})
	if err != nil {
		return err
	}
	defer t.Close()
	if _, err := dropPrivileges(privilege.Trace, warnTo(stderr)); err != nil {
		return err
	}
	fmt.Fprintln(stderr, "flint: "+startLine(c, t))
	for _, f := range t.Functions() {
		if c.Latency && f.NoLatency != "" {
			fmt.Fprintf(stderr, "flint: warning: %s: calls counted, latency not measured: %s\n", f.Display(), f.NoLatency)
		}
		if c.Exe != "" && f.Library {
			fmt.Fprintf(stderr, "flint: warning: %s: with --exe, a probe in a shared library traps in every process that maps it; "+
				"only %s's hits are counted, the others' cost is neither seen nor bounded (use -p to probe one process)\n",
				f.Display(), c.Exe)
		}
	}
	res, err := t.Run(ctx)
	if live {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if err != nil {
		return err
	}
	if res.Exited {
		fmt.Fprintf(stderr, "flint: pid %d exited after %s\n", c.PID, fmtSeconds(res.Duration))
	}
	if c.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(traceJSON(res))
	}
	writeTraceText(stdout, res)
	for _, w := range traceWarnings(res) {
		fmt.Fprintln(stderr, "flint: warning: "+w)
	}
	return nil
}

func startLine(c *TraceConfig, t *trace.Tracer) string {
	what := fmt.Sprintf("pid %d", c.PID)
	if c.Exe != "" {
		what = "every process running " + c.Exe
	}
	n := len(t.Functions())
	s := fmt.Sprintf("tracing %d function%s (%d probes) in %s; a probe hit costs %s here",
		n, plural(n), t.Probes(), what, fmtNs(float64(t.Cost().Hit)))
	if c.Latency {
		s += ", a timed call " + fmtNs(float64(t.Cost().TimedCall))
	}
	if c.MaxOverhead > 0 {
		s += fmt.Sprintf("; budget %s of a CPU", fmtPercent(c.MaxOverhead))
	} else {
		s += "; no overhead limit"
	}
	if c.Duration > 0 {
		return s + fmt.Sprintf("; for %s (Ctrl-C stops early)", c.Duration)
	}
	return s + "; Ctrl-C to stop"
}

func traceProgressLine(p trace.Progress) string {
	var parts []string
	for _, f := range p.Functions {
		s := fmt.Sprintf("%s %s/s", f.Name, fmtCount(f.Rate))
		if f.Detached {
			s = f.Name + " detached"
		}
		parts = append(parts, s)
	}
	return fmt.Sprintf("%s: %s; probes %s of a CPU", fmtSeconds(p.Elapsed), strings.Join(parts, ", "), fmtPercent(p.ProbeCPU))
}

func detachLine(d trace.Detach) string {
	return fmt.Sprintf("detached %s after %s: %s calls/s x %s = %s of a CPU, over the %s budget (--max-overhead off keeps it)",
		d.Function, fmtSeconds(d.After), fmtCount(d.Rate), fmtNs(float64(d.Cost)), fmtPercent(d.ProbeCPU), fmtPercent(d.Budget))
}

// writeTraceText prints the results for a person: a table of calls, the
// latency of each timed function, then what the probes cost.
func writeTraceText(w io.Writer, r *trace.Result) {
	target := fmt.Sprintf("pid %d", r.PID)
	if r.Exe != "" {
		target = r.Exe
	} else if len(r.Processes) > 0 && r.Processes[0].Comm != "" {
		target += " (" + r.Processes[0].Comm + ")"
	}
	fmt.Fprintf(w, "%s, traced %s\n\n", target, fmtSeconds(r.Duration))

	width := len("FUNCTION")
	for _, f := range r.Functions {
		width = max(width, len(f.Display()))
	}
	fmt.Fprintf(w, "%-*s  %12s  %10s\n", width, "FUNCTION", "CALLS", "CALLS/S")
	for _, f := range r.Functions {
		note := ""
		if f.Detached != nil {
			note = "  detached after " + fmtSeconds(f.Detached.After) + ": over budget"
		}
		fmt.Fprintf(w, "%-*s  %12d  %10s%s\n", width, f.Display(), f.Calls, fmtRate(f.Rate), note)
	}

	for _, f := range r.Functions {
		if f.Latency == nil {
			continue
		}
		writeLatency(w, &f)
	}

	fmt.Fprintf(w, "\nOverhead: a probe hit costs %s on this machine (%s where the kernel emulates the probed instruction)",
		fmtNs(float64(r.Cost.Hit)), fmtNs(float64(r.Cost.HitEmulated)))
	if r.Latency {
		fmt.Fprintf(w, ", a timed Go call %s", fmtNs(float64(r.Cost.TimedCall)))
	}
	fmt.Fprintf(w, "; measured at start, median of %d rounds.\n", r.Cost.Rounds)
	if r.Latency {
		fmt.Fprintf(w, "  Latencies include part of the probes' own time: an empty Go function measures %s.\n", fmtNs(float64(r.Cost.Floor)))
	}
	for _, f := range r.Functions {
		fmt.Fprintf(w, "  %s: %s calls/s x %s = %s of a CPU\n", f.Display(), fmtCount(f.Rate),
			fmtNs(float64(f.CostPerCall)), fmtPercent(f.ProbeCPU))
	}
	for _, p := range r.Processes {
		fmt.Fprintf(w, "  %s\n", slowdownLine(p))
	}
	if r.MaxOverhead > 0 {
		fmt.Fprintf(w, "  Budget: %s of a CPU for all probes (--max-overhead).\n", fmtPercent(r.MaxOverhead))
	}
}

func writeLatency(w io.Writer, f *trace.FunctionResult) {
	h := f.Latency
	n := h.Count()
	fmt.Fprintf(w, "\n%s: %d timed calls", f.Display(), n)
	if n == 0 {
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintf(w, ", p50 %s  p90 %s  p99 %s  mean %s\n",
		fmtNs(h.Percentile(0.5)), fmtNs(h.Percentile(0.9)), fmtNs(h.Percentile(0.99)), fmtNs(h.Mean()))
	buckets := h.Log2()
	var peak uint64
	for _, b := range buckets {
		peak = max(peak, b.Count)
	}
	for _, b := range buckets {
		bar := int(math.Round(40 * float64(b.Count) / float64(peak)))
		fmt.Fprintf(w, "  %8s .. %-8s %10d |%-40s|\n", fmtNs(float64(b.LowNs)), fmtNs(float64(b.HighNs)), b.Count, strings.Repeat("*", bar))
	}
	if f.Unmatched+f.Lost > 0 {
		fmt.Fprintf(w, "  (%d returns without a recorded entry, %d entries lost)\n", f.Unmatched, f.Lost)
	}
}

func slowdownLine(p trace.ProcessResult) string {
	who := fmt.Sprintf("pid %d (%s)", p.PID, p.Comm)
	if p.Exited {
		who += ", exited,"
	}
	if p.Traced <= 0 || p.CPU <= 0 {
		return fmt.Sprintf("%s: %d probe hits; too little CPU time measured to estimate its slowdown", who, p.Calls)
	}
	used := fmt.Sprintf("%s used %.2f CPU while traced, %s of it in probes", who, p.CPU, fmtPercent(min(p.ProbeCPU/p.CPU, 1)))
	switch {
	case p.Slowdown > 10:
		// Past this the estimate, cpu/(cpu-probe), divides by the small
		// difference of two measured numbers.
		return used + ": it runs >10x slower while traced"
	case p.Slowdown >= 1.5:
		return used + fmt.Sprintf(": it runs ~%.0fx slower while traced", p.Slowdown)
	}
	return used + fmt.Sprintf(": it runs ~%s slower while traced", fmtPercent(p.Slowdown-1))
}

func traceWarnings(r *trace.Result) []string {
	var ws []string
	e := r.Errors
	if e.CountsFull > 0 {
		ws = append(ws, fmt.Sprintf("%d probe hits lost: the (process, function) map was full", e.CountsFull))
	}
	if e.FramesFull+e.StartsFull > 0 {
		ws = append(ws, fmt.Sprintf("%d calls not timed: the map of calls in progress was full", e.FramesFull+e.StartsFull))
	}
	if e.Missed > 0 {
		ws = append(ws, fmt.Sprintf("%d probe hits not counted: another BPF program was running on the CPU", e.Missed))
	}
	for _, f := range r.Functions {
		if f.Calls == 0 && f.Lang == trace.Go && f.Detached == nil {
			ws = append(ws, fmt.Sprintf("%s: no calls seen; if the compiler inlined it into its callers, a probe on its body never fires (check with go build -gcflags=-m)", f.Display()))
		}
	}
	return ws
}

// The JSON form. Units are in the field names; shares are of one CPU.
type traceJSONResult struct {
	PID         int                 `json:"pid,omitempty"`
	Exe         string              `json:"exe,omitempty"`
	DurationS   float64             `json:"duration_s"`
	Exited      bool                `json:"exited"`
	ProbeHitNs  int64               `json:"probe_hit_ns"`
	EmulatedNs  int64               `json:"probe_hit_emulated_ns"`
	TimedCallNs int64               `json:"timed_call_ns,omitempty"`
	FloorNs     int64               `json:"latency_floor_ns,omitempty"`
	MaxOverhead *float64            `json:"max_overhead"` // null: no limit
	Functions   []traceJSONFunction `json:"functions"`
	Processes   []traceJSONProcess  `json:"processes"`
	Errors      trace.Errors        `json:"errors"`
}

type traceJSONFunction struct {
	Name          string            `json:"name"`
	Object        string            `json:"object"`
	Lang          trace.Lang        `json:"lang"`
	Probes        int               `json:"probes"`
	Calls         uint64            `json:"calls"`
	CallsPerS     float64           `json:"calls_per_s"`
	AttachedS     float64           `json:"attached_s"`
	CostPerCallNs int64             `json:"cost_per_call_ns"`
	ProbeCPU      float64           `json:"probe_cpu"`
	Returns       uint64            `json:"returns"`
	Unmatched     uint64            `json:"unmatched_returns"`
	Lost          uint64            `json:"lost_entries"`
	NoLatency     string            `json:"no_latency,omitempty"`
	Latency       *traceJSONLatency `json:"latency,omitempty"`
	Detached      *traceJSONDetach  `json:"detached,omitempty"`
}

type traceJSONLatency struct {
	Count   uint64             `json:"count"`
	MeanNs  float64            `json:"mean_ns"`
	P50Ns   float64            `json:"p50_ns"`
	P90Ns   float64            `json:"p90_ns"`
	P99Ns   float64            `json:"p99_ns"`
	Buckets []trace.Log2Bucket `json:"log2_buckets"`
}

type traceJSONDetach struct {
	AfterS    float64 `json:"after_s"`
	CallsPerS float64 `json:"calls_per_s"`
	ProbeCPU  float64 `json:"probe_cpu"`
	Budget    float64 `json:"budget"`
}

type traceJSONProcess struct {
	PID      int     `json:"pid"`
	Comm     string  `json:"comm"`
	TracedS  float64 `json:"traced_s"`
	CPU      float64 `json:"cpu"`
	ProbeCPU float64 `json:"probe_cpu"`
	// Slowdown is null when it cannot be estimated (no CPU measured, or
	// the probes took all of it).
	Slowdown *float64 `json:"slowdown"`
	Calls    uint64   `json:"calls"`
	Exited   bool     `json:"exited"`
}

func traceJSON(r *trace.Result) traceJSONResult {
	out := traceJSONResult{PID: r.PID, Exe: r.Exe, DurationS: r.Duration.Seconds(), Exited: r.Exited,
		ProbeHitNs: r.Cost.Hit.Nanoseconds(), EmulatedNs: r.Cost.HitEmulated.Nanoseconds(),
		TimedCallNs: r.Cost.TimedCall.Nanoseconds(), FloorNs: r.Cost.Floor.Nanoseconds(), Errors: r.Errors,
		Functions: []traceJSONFunction{}, Processes: []traceJSONProcess{}}
	if r.MaxOverhead > 0 {
		out.MaxOverhead = &r.MaxOverhead
	}
	for _, f := range r.Functions {
		jf := traceJSONFunction{Name: f.Name, Object: f.Object, Lang: f.Lang, Probes: f.Probes, Calls: f.Calls,
			CallsPerS: f.Rate, AttachedS: f.Attached.Seconds(), CostPerCallNs: f.CostPerCall.Nanoseconds(),
			ProbeCPU: f.ProbeCPU, Returns: f.Returns, Unmatched: f.Unmatched, Lost: f.Lost, NoLatency: f.NoLatency}
		if h := f.Latency; h != nil {
			jf.Latency = &traceJSONLatency{Count: h.Count(), MeanNs: h.Mean(), P50Ns: h.Percentile(0.5),
				P90Ns: h.Percentile(0.9), P99Ns: h.Percentile(0.99), Buckets: h.Log2()}
			if jf.Latency.Buckets == nil {
				jf.Latency.Buckets = []trace.Log2Bucket{}
			}
		}
		if d := f.Detached; d != nil {
			jf.Detached = &traceJSONDetach{AfterS: d.After.Seconds(), CallsPerS: d.Rate, ProbeCPU: d.ProbeCPU, Budget: d.Budget}
		}
		out.Functions = append(out.Functions, jf)
	}
	for _, p := range r.Processes {
		jp := traceJSONProcess{PID: p.PID, Comm: p.Comm, TracedS: p.Traced.Seconds(), CPU: p.CPU,
			ProbeCPU: p.ProbeCPU, Calls: p.Calls, Exited: p.Exited}
		if p.Slowdown > 0 && !math.IsInf(p.Slowdown, 0) {
			s := p.Slowdown
			jp.Slowdown = &s
		}
		out.Processes = append(out.Processes, jp)
	}
	return out
}

// fmtNs prints a duration in ns with three significant digits: 812ns,
// 4.80us, 1.05ms, 2.31s.
func fmtNs(ns float64) string {
	switch {
	case ns < 1e3:
		return fmt.Sprintf("%.0fns", ns)
	case ns < 1e6:
		return trimUnit(ns/1e3, "us")
	case ns < 1e9:
		return trimUnit(ns/1e6, "ms")
	}
	return trimUnit(ns/1e9, "s")
}

func trimUnit(v float64, unit string) string {
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f%s", v, unit)
	case v < 100:
		return fmt.Sprintf("%.1f%s", v, unit)
	}
	return fmt.Sprintf("%.0f%s", v, unit)
}

func fmtSeconds(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

// fmtCount prints a rate compactly: 0.5, 950, 12.3k, 2.10M.
func fmtCount(v float64) string {
	switch {
	case v < 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v < 1e3:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v < 1e6:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(v/1e6, 'f', 2, 64) + "M"
}

func fmtRate(v float64) string {
	if v < 100 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func fmtPercent(share float64) string {
	p := share * 100
	switch {
	case p < 0.1:
		return strconv.FormatFloat(p, 'f', 3, 64) + "%"
	case p < 10:
		return strconv.FormatFloat(p, 'f', 1, 64) + "%"
	}
	return strconv.FormatFloat(p, 'f', 0, 64) + "%"
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
