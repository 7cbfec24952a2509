package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/flint-dev/flint/internal/collect"
	"github.com/flint-dev/flint/internal/doctor"
	"github.com/flint-dev/flint/internal/privilege"
	"github.com/flint-dev/flint/internal/sampler"
)

// DoctorConfig is what `flint doctor` was asked to do.
type DoctorConfig struct {
	PID       int
	All       bool
	Container string
	Duration  time.Duration
	Frequency int
	JSON      bool
	// EverySyscall traces every syscall of PID (slows the node's syscalls).
	EverySyscall bool
}

// Validate checks the config.
func (c *DoctorConfig) Validate() error {
	if err := validateTarget(c.PID, c.All, &c.Container, "examine"); err != nil {
		return err
	}
	switch {
	case c.Frequency <= 0 || c.Frequency > maxFrequency:
		return fmt.Errorf("-F %d: frequency must be between 1 and %d Hz", c.Frequency, maxFrequency)
	case c.Duration <= 0 || c.Duration > maxDuration:
		return fmt.Errorf("-d %s: duration must be between 1ms and %s", c.Duration, maxDuration)
	case c.EverySyscall && c.PID == 0:
		return errors.New("--every-syscall needs -p PID: tracing every syscall of every process slows the whole node")
	}
	return nil
}

// validateTarget checks that exactly one of -p, -a and --container is set
// and normalises the container ID.
func validateTarget(pid int, all bool, container *string, verb string) error {
	targets := 0
	for _, set := range []bool{pid != 0, all, *container != ""} {
		if set {
			targets++
		}
	}
	switch {
	case targets == 0:
		return fmt.Errorf("say what to %s: -p PID, -a (every process) or --container ID", verb)
	case targets > 1:
		return errors.New("-p, -a and --container exclude each other")
	case pid < 0:
		return fmt.Errorf("-p %d: not a PID", pid)
	}
	if *container != "" && strings.Trim(strings.ToLower(*container), "0123456789abcdef") != "" {
		return fmt.Errorf("--container %q: a container ID is hexadecimal", *container)
	}
	*container = strings.ToLower(*container)
	return nil
}

// targetFlags declares -p, -a and --container.
func targetFlags(fs *flag.FlagSet, pid *int, all *bool, container *string, verb string) {
	for _, name := range []string{"p", "pid"} {
		fs.IntVar(pid, name, 0, verb+" the process with this `PID` (all its threads)")
	}
	for _, name := range []string{"a", "all"} {
		fs.BoolVar(all, name, false, verb+" every process on the machine")
	}
	fs.StringVar(container, "container", "", verb+" the processes of the container whose `ID` starts with this")
}

func parseDoctor(args []string) (*DoctorConfig, error) {
	c := &DoctorConfig{Duration: 10 * time.Second, Frequency: 99}
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	targetFlags(fs, &c.PID, &c.All, &c.Container, "examine")
	for _, name := range []string{"d", "duration"} {
		fs.Var(durationFlag{&c.Duration}, name, "record for this `duration` (Ctrl-C stops early and still reports)")
	}
	for _, name := range []string{"F", "frequency"} {
		fs.IntVar(&c.Frequency, name, c.Frequency, "CPU samples per second per CPU (`Hz`)")
	}
	fs.BoolVar(&c.JSON, "json", false, "print the findings as a JSON list")
	fs.BoolVar(&c.EverySyscall, "every-syscall", false, "trace every syscall of -p PID, not only those the detectors need (slows every syscall on the node while it runs)")
	err := parseFlags(fs, args, "Usage: flint doctor [-p PID | -a | --container ID] [flags]\n\n"+
		"Records CPU stacks and traces a few syscalls, then reports known problems with the evidence measured and the fix:\n"+
		strings.Join(doctor.Detectors(), ", ")+".")
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

func doctorCmd(args []string, stdout, stderr io.Writer) error {
	c, err := parseDoctor(args)
	if err != nil {
		return err
	}
	if err := sampler.CheckPrivileges(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	live := isTerminal(os.Stderr)
	findings, data, err := doctor.Run(ctx, doctor.Options{
		PID: c.PID, Container: c.Container, Duration: c.Duration, Frequency: c.Frequency,
		EverySyscall: c.EverySyscall,
		Loaded: func() error {
			_, err := dropPrivileges(privilege.Doctor, warnTo(stderr))
			return err
		},
		Progress: func(p collect.Progress) {
			if live {
				fmt.Fprintf(stderr, "\r\033[K%s", progressLine(p))
			}
		},
	})
	if live {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if err != nil {
		return err
	}
	if c.JSON {
		if findings == nil {
			findings = []doctor.Finding{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(findings); err != nil {
			return fmt.Errorf("write findings: %w", err)
		}
		for _, n := range data.Notes {
			fmt.Fprintln(stderr, "flint: note: "+n)
		}
		return nil
	}
	writeFindings(stdout, doctorTitle(c, data), findings, nil, data.Notes)
	return nil
}

func doctorTitle(c *DoctorConfig, d *doctor.Data) string {
	what := "every process"
	switch {
	case c.PID != 0:
		what = fmt.Sprintf("pid %d (%s)", c.PID, d.Comm(c.PID))
	case c.Container != "":
		what = "container " + c.Container
	}
	return fmt.Sprintf("flint doctor: %s, %s", what, d.Duration.Round(100*time.Millisecond))
}

// writeFindings prints findings worst first, then the notes.
// writeFindings prints findings worst first; seen, when not nil, adds a
// line under each saying when it was seen.
func writeFindings(w io.Writer, title string, findings []doctor.Finding, seen []string, notes []string) {
	switch len(findings) {
	case 0:
		fmt.Fprintf(w, "%s: no problems found\n", title)
	case 1:
		fmt.Fprintf(w, "%s: 1 finding\n", title)
	default:
		fmt.Fprintf(w, "%s: %d findings\n", title, len(findings))
	}
	for i, f := range findings {
		who := fmt.Sprintf("pid %d (%s)", f.PID, f.Comm)
		if f.PID == 0 {
			who = "node"
		}
		if f.TID != 0 && f.TID != f.PID {
			who += fmt.Sprintf(" thread %d (%s)", f.TID, f.Thread)
		}
		fmt.Fprintf(w, "\n%d. [%s] %s: %s\n", i+1, f.Severity, f.ID, who)
		if seen != nil {
			fmt.Fprintf(w, "   %s\n", seen[i])
		}
		fmt.Fprintf(w, "   %s\n", f.Summary)
		fmt.Fprintln(w, "   evidence:")
		for _, e := range f.Evidence {
			fmt.Fprintf(w, "     - %s\n", e.Text)
		}
		printStack(w, "stack", f.Stack)
		printStack(w, "holder's stack", f.Holder)
		fmt.Fprintf(w, "   fix: %s\n", f.Fix)
	}
	if len(notes) > 0 {
		fmt.Fprintln(w, "\nnotes:")
		for _, n := range notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
	}
}

// printStack prints the first frames of a finding's stack, if it has one.
func printStack(w io.Writer, title string, stack []doctor.Frame) {
	if len(stack) == 0 {
		return
	}
	fmt.Fprintf(w, "   %s (innermost first):\n", title)
	for i, fr := range stack {
		if i == 12 {
			fmt.Fprintf(w, "       … %d more\n", len(stack)-i)
			break
		}
		fmt.Fprintf(w, "       %s\n", frameText(fr))
	}
}

func frameText(f doctor.Frame) string {
	s := f.String()
	if f.File == "" && f.Module != "" {
		s += " [" + f.Module + "]"
	}
	return s
}

// SyscallsConfig is what `flint syscalls` was asked to do.
type SyscallsConfig struct {
	PID       int
	All       bool
	Container string
	Duration  time.Duration
	// Syscalls to trace through their own tracepoints; empty traces every
	// syscall of PID through raw_syscalls.
	Syscalls []string
	Top      int // table rows
	Stacks   int // stacks per row
	JSON     bool
}

// Validate checks the config.
func (c *SyscallsConfig) Validate() error {
	if err := validateTarget(c.PID, c.All, &c.Container, "trace"); err != nil {
		return err
	}
	switch {
	case c.Duration <= 0 || c.Duration > maxDuration:
		return fmt.Errorf("-d %s: duration must be between 1ms and %s", c.Duration, maxDuration)
	case c.PID == 0 && len(c.Syscalls) == 0:
		return errors.New("name the syscalls with -s (e.g. -s epoll_wait,read): tracing every syscall of every process slows the whole node; every syscall is traced only for -p PID")
	case c.Top < 1:
		return fmt.Errorf("-n %d: want at least one row", c.Top)
	case c.Stacks < 0:
		return fmt.Errorf("--stacks %d: cannot be negative", c.Stacks)
	}
	for _, s := range c.Syscalls {
		if !doctor.KnownSyscall(s) {
			return fmt.Errorf("-s %s: no such syscall on this architecture", s)
		}
	}
	return nil
}

func parseSyscalls(args []string) (*SyscallsConfig, error) {
	c := &SyscallsConfig{Duration: 10 * time.Second, Top: 20, Stacks: 3}
	fs := flag.NewFlagSet("syscalls", flag.ContinueOnError)
	targetFlags(fs, &c.PID, &c.All, &c.Container, "trace")
	for _, name := range []string{"d", "duration"} {
		fs.Var(durationFlag{&c.Duration}, name, "trace for this `duration` (Ctrl-C stops early and still reports)")
	}
	var list string
	fs.StringVar(&list, "s", "", "trace only these `syscalls` (comma-separated) through their own tracepoints; default with -p: every syscall")
	fs.IntVar(&c.Top, "n", c.Top, "show this many `rows`, most time first")
	fs.IntVar(&c.Stacks, "stacks", c.Stacks, "calling stacks shown per row (`count`)")
	fs.BoolVar(&c.JSON, "json", false, "print the table as JSON")
	err := parseFlags(fs, args, "Usage: flint syscalls [-p PID | -a | --container ID] [-s read,write] [flags]\n\n"+
		"Counts and times syscalls per process: calls, rate, errors, total time, p50/p99 latency and the calling stacks.\n"+
		"Tracing every syscall (-p PID without -s) slows every syscall on the node while it runs (docs/BENCHMARKS.md).")
	if err != nil {
		return nil, err
	}
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.Syscalls = append(c.Syscalls, s)
		}
	}
	if err := c.Validate(); err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

// syscallsJSON is the JSON form of `flint syscalls`.
type syscallsJSON struct {
	DurationNs int64            `json:"duration_ns"`
	Traced     []string         `json:"traced"`
	Rows       []doctor.Row     `json:"rows"`
	Findings   []doctor.Finding `json:"findings"`
	Notes      []string         `json:"notes,omitempty"`
}

func syscallsCmd(args []string, stdout, stderr io.Writer) error {
	c, err := parseSyscalls(args)
	if err != nil {
		return err
	}
	if err := sampler.CheckPrivileges(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	data, err := doctor.TraceSyscalls(ctx, doctor.SyscallOptions{
		PID: c.PID, Container: c.Container, Duration: c.Duration, Syscalls: c.Syscalls,
	})
	if err != nil {
		return err
	}
	rows := data.Syscalls.Table(data.Comm, c.Stacks)
	rows = rows[:min(c.Top, len(rows))]
	// Only the detectors that read syscalls alone: the others need a CPU
	// profile (flint doctor).
	findings := slices.DeleteFunc(doctor.Analyze(data), func(f doctor.Finding) bool {
		return f.ID != "busy-poll" && f.ID != "syscall-errors"
	})
	if c.JSON {
		out := syscallsJSON{DurationNs: data.Syscalls.Duration.Nanoseconds(), Traced: data.Syscalls.Traced,
			Rows: rows, Findings: findings, Notes: data.Notes}
		if out.Rows == nil {
			out.Rows = []doctor.Row{}
		}
		if out.Findings == nil {
			out.Findings = []doctor.Finding{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
		return nil
	}
	what := "every syscall"
	if !data.Syscalls.Every {
		what = strings.Join(data.Syscalls.Traced, ", ")
	}
	title := fmt.Sprintf("flint syscalls: %s, %s", what, data.Syscalls.Duration.Round(100*time.Millisecond))
	writeSyscallTable(stdout, title, rows)
	if len(findings) > 0 || len(data.Notes) > 0 {
		fmt.Fprintln(stdout)
		writeFindings(stdout, "findings", findings, nil, data.Notes)
	}
	return nil
}

func writeSyscallTable(w io.Writer, title string, rows []doctor.Row) {
	fmt.Fprintln(w, title)
	if len(rows) == 0 {
		fmt.Fprintln(w, "no calls traced")
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PID\tCOMM\tSYSCALL\tCALLS\tRATE/s\tERRORS\tLAST ERRNO\tTOTAL\tP50\tP99\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%.0f\t%d\t%s\t%s\t%s\t%s\t\n", r.PID, r.Comm, r.Syscall, r.Calls, r.Rate,
			r.Errors, orDash(r.Errno), roundDuration(r.Total), roundDuration(r.P50), roundDuration(r.P99))
	}
	tw.Flush()
	for _, r := range rows {
		if len(r.Stacks) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s by pid %d (%s):\n", r.Syscall, r.PID, r.Comm)
		for _, s := range r.Stacks {
			var names []string
			for _, f := range s.Frames {
				if len(names) == 6 {
					names = append(names, "…")
					break
				}
				names = append(names, f.String())
			}
			fmt.Fprintf(w, "  %5.1f%%  %s\n", 100*s.Share, strings.Join(names, " <- "))
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// roundDuration keeps three significant digits.
func roundDuration(d time.Duration) string {
	for _, unit := range []time.Duration{time.Second, time.Millisecond, time.Microsecond} {
		if d >= unit {
			return d.Round(unit / 100).String()
		}
	}
	return d.String()
}
