package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flint-dev/flint/internal/collect"
	"github.com/flint-dev/flint/internal/privilege"
	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/sampler"
)

// RecordConfig is what `flint record` was asked to do.
type RecordConfig struct {
	PID       int
	All       bool
	Container string
	Duration  time.Duration
	Frequency int
	Output    string // "-" for stdout
	Format    profile.Format
	NoKernel  bool
	NoPython  bool
	// OffCPU records where threads wait (--off-cpu), Wall that and CPU
	// time in one profile (--wall); OffCPUMin and OffCPUSample bound its
	// cost.
	OffCPU, Wall bool
	OffCPUMin    time.Duration
	OffCPUSample uint
	Transfer     sampler.Transfer
	// UnwindMemory is kernel memory for unwind tables, bytes; 0: none.
	UnwindMemory int64
}

// maxFrequency bounds -F: beyond it the timer handler would take a large
// share of each CPU.
const maxFrequency = 10000

// maxDuration bounds -d; the agent is for longer.
const maxDuration = 24 * time.Hour

// Validate checks the config and fills the format from the output name.
func (c *RecordConfig) Validate() error {
	targets := 0
	for _, set := range []bool{c.PID != 0, c.All, c.Container != ""} {
		if set {
			targets++
		}
	}
	switch {
	case targets == 0:
		return errors.New("say what to record: -p PID, -a (every process) or --container ID")
	case targets > 1:
		return errors.New("-p, -a and --container exclude each other")
	case c.PID < 0:
		return fmt.Errorf("-p %d: not a PID", c.PID)
	case c.Frequency <= 0 || c.Frequency > maxFrequency:
		return fmt.Errorf("-F %d: frequency must be between 1 and %d Hz", c.Frequency, maxFrequency)
	case c.Duration <= 0 || c.Duration > maxDuration:
		return fmt.Errorf("-d %s: duration must be between 1ms and %s", c.Duration, maxDuration)
	case c.Transfer != sampler.Aggregate && c.Transfer != sampler.RingBuffer:
		return fmt.Errorf("--transfer %q: want %s or %s", c.Transfer, sampler.Aggregate, sampler.RingBuffer)
	case c.OffCPU && c.Wall:
		return errors.New("--off-cpu and --wall exclude each other (--wall has both)")
	}
	if err := checkOffCPU(c.OffCPUMin, c.OffCPUSample); err != nil {
		return err
	}
	if err := checkUnwindMemory(c.UnwindMemory); err != nil {
		return err
	}
	if c.Container != "" && strings.Trim(strings.ToLower(c.Container), "0123456789abcdef") != "" {
		return fmt.Errorf("--container %q: a container ID is hexadecimal", c.Container)
	}
	c.Container = strings.ToLower(c.Container)
	if c.Format == "" {
		if c.Output == "-" {
			c.Format = profile.FormatFolded
		} else {
			f, err := profile.FormatOf(c.Output)
			if err != nil {
				return err
			}
			c.Format = f
		}
	}
	return nil
}

// durationFlag accepts Go durations ("10s", "1m30s") or plain seconds.
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f durationFlag) Set(s string) error {
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		*f.d = time.Duration(n * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("bad duration %q (want e.g. 10s, 2m, 1h)", s)
	}
	*f.d = d
	return nil
}

type formatFlag struct{ f *profile.Format }

func (f formatFlag) String() string {
	if f.f == nil {
		return ""
	}
	return string(*f.f)
}

func (f formatFlag) Set(s string) error {
	v, err := profile.ParseFormat(s)
	*f.f = v
	return err
}

// checkOffCPU checks --off-cpu-min and --off-cpu-sample, of flint record
// and flint agent.
func checkOffCPU(min time.Duration, sample uint) error {
	switch {
	case min < 0 || min > time.Minute:
		return fmt.Errorf("--off-cpu-min %s: must be between 0 and 1m", min)
	case sample < 1 || sample > 1<<20:
		return fmt.Errorf("--off-cpu-sample %d: must be between 1 and %d", sample, 1<<20)
	}
	return nil
}

func parseRecord(args []string) (*RecordConfig, error) {
	c := &RecordConfig{Duration: 10 * time.Second, Frequency: 99, Output: "flint.svg", Transfer: sampler.RingBuffer, UnwindMemory: sampler.DefaultUnwindMemory,
		OffCPUMin: sampler.DefaultOffCPUMin, OffCPUSample: 1}
	fs := flag.NewFlagSet("record", flag.ContinueOnError)
	for _, name := range []string{"p", "pid"} {
		fs.IntVar(&c.PID, name, 0, "record the process with this `PID` (all its threads)")
	}
	for _, name := range []string{"a", "all"} {
		fs.BoolVar(&c.All, name, false, "record every process on the machine")
	}
	fs.StringVar(&c.Container, "container", "", "record the processes of the container whose `ID` starts with this")
	for _, name := range []string{"d", "duration"} {
		fs.Var(durationFlag{&c.Duration}, name, "stop after this `duration` (Ctrl-C stops early; output is still written)")
	}
	for _, name := range []string{"F", "frequency"} {
		fs.IntVar(&c.Frequency, name, c.Frequency, "samples per second per CPU (`Hz`)")
	}
	for _, name := range []string{"o", "output"} {
		fs.StringVar(&c.Output, name, c.Output, "output `file`; its extension picks the format (.svg .html .pb.gz .pprof .pgo .folded .json); - for stdout")
	}
	fs.Var(formatFlag{&c.Format}, "format", "output `format`: svg, html, pprof, folded, json (default: from -o)")
	fs.BoolVar(&c.NoKernel, "no-kernel", false, "drop kernel frames")
	fs.BoolVar(&c.NoPython, "no-python", false, "leave CPython's eval loop as native frames, its Python frames unread")
	fs.BoolVar(&c.OffCPU, "off-cpu", false, "record where threads wait off the CPU (blocked time), not CPU time")
	fs.BoolVar(&c.Wall, "wall", false, "record CPU time and off-CPU time in one profile")
	fs.Var(durationFlag{&c.OffCPUMin}, "off-cpu-min", "shortest time off the CPU recorded (`duration`)")
	fs.UintVar(&c.OffCPUSample, "off-cpu-sample", c.OffCPUSample, "record one span off the CPU in `N`, each counting N times")
	fs.Var(transferFlag{&c.Transfer}, "transfer", "kernel-to-user `path`: ringbuf, or aggregate (in-kernel maps; for benchmarks)")
	unwindMemoryFlag(fs, &c.UnwindMemory)
	if err := parseFlags(fs, args, "Usage: flint record [-p PID | -a | --container ID] [flags]\n\nSamples on-CPU stacks (or where threads wait: --off-cpu, --wall) and writes a flame graph, pprof, folded stacks or a JSON tree."); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

// unwindMemoryFlag defines --unwind-memory, shared by record and agent.
func unwindMemoryFlag(fs *flag.FlagSet, n *int64) {
	fs.Var(byteSize{n}, "unwind-memory", "kernel memory `size` for the unwind tables of code built without frame pointers (e.g. 64MB; 0: frame pointers only)")
}

// maxUnwindMemory keeps the unwind rows' index within 32 bits, with room.
const maxUnwindMemory = 4 << 30

func checkUnwindMemory(n int64) error {
	if n < 0 || n > maxUnwindMemory {
		return fmt.Errorf("--unwind-memory %d: must be between 0 and 4GiB", n)
	}
	return nil
}

type transferFlag struct{ t *sampler.Transfer }

func (f transferFlag) String() string {
	if f.t == nil {
		return ""
	}
	return string(*f.t)
}

func (f transferFlag) Set(s string) error { *f.t = sampler.Transfer(s); return nil }

func record(args []string) error {
	c, err := parseRecord(args)
	if err != nil {
		return err
	}
	if err := sampler.CheckPrivileges(); err != nil {
		return err
	}
	out, err := createOutput(c.Output)
	if err != nil {
		return err
	}
	defer out.abort()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	live := isTerminal(os.Stderr)
	jvms := jvmDumper(warnTo(os.Stderr))
	defer jvms.Close()
	res, err := collect.Record(ctx, collect.RecordOptions{
		JVMMaps:      jvms,
		Frequency:    c.Frequency,
		Duration:     c.Duration,
		PID:          c.PID,
		Container:    c.Container,
		KernelStacks: !c.NoKernel,
		NoPython:     c.NoPython,
		Kind:         c.kind(),
		OffCPU:       &sampler.OffCPU{Min: c.OffCPUMin, SampleEvery: uint32(c.OffCPUSample)},
		Transfer:     c.Transfer,
		UnwindMemory: c.UnwindMemory,
		Loaded: func() error {
			_, err := dropPrivileges(privilege.Record, warnTo(os.Stderr))
			return err
		},
		Progress: func(p collect.Progress) {
			if live {
				fmt.Fprintf(os.Stderr, "\r\033[K%s", progressLine(p))
			}
		},
	})
	if live {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
	if err != nil {
		return err
	}
	if err := profile.Write(out, res.Profile, c.Format, title(c)); err != nil {
		return fmt.Errorf("write %s: %w", c.Output, err)
	}
	if err := out.commit(); err != nil {
		return err
	}
	p := res.Profile
	what := fmt.Sprintf("%d samples", p.Total())
	if p.Kind != profile.CPU {
		what = fmt.Sprintf("%s %s", time.Duration(p.Total()).Round(time.Millisecond), map[profile.Kind]string{profile.OffCPU: "off the CPU", profile.Wall: "on and off the CPU"}[p.Kind])
	}
	fmt.Fprintf(os.Stderr, "flint: %s of %d processes in %s written to %s (%s)\n",
		what, processes(p), p.Duration.Round(time.Millisecond), c.Output, c.Format)
	for _, comment := range p.Comments {
		fmt.Fprintln(os.Stderr, "flint: "+comment)
	}
	for _, w := range res.Warnings {
		fmt.Fprintln(os.Stderr, "flint: warning: "+w)
	}
	return nil
}

func progressLine(p collect.Progress) string {
	s := fmt.Sprintf("recording %s/%s: %d samples, %d processes",
		p.Elapsed.Round(time.Second), p.Duration, p.Samples, p.Processes)
	if p.Dropped > 0 || p.StacksLost > 0 {
		s += fmt.Sprintf(", %d dropped, %d stacks lost", p.Dropped, p.StacksLost)
	}
	return s
}

// kind is the profile asked for.
func (c *RecordConfig) kind() profile.Kind {
	switch {
	case c.OffCPU:
		return profile.OffCPU
	case c.Wall:
		return profile.Wall
	}
	return profile.CPU
}

func title(c *RecordConfig) string {
	what := c.kind().Title()
	switch {
	case c.PID != 0:
		return fmt.Sprintf("%s: pid %d", what, c.PID)
	case c.Container != "":
		return what + ": container " + c.Container
	}
	return what + ": all processes"
}

func processes(p *profile.Profile) int {
	pids := map[string]bool{}
	for _, s := range p.Samples {
		pids[s.Labels[profile.LabelPID]] = true
	}
	return len(pids)
}

// output is where a profile goes: stdout, or a temporary file beside the
// destination renamed into place once complete, so a failed or interrupted
// run never leaves half a file. It is created before recording so an
// unwritable destination fails at once, not after the recording.
type output struct {
	io.Writer
	tmp  *os.File
	dest string
}

func createOutput(path string) (*output, error) {
	if path == "-" {
		return &output{Writer: os.Stdout}, nil
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("output %s is a directory", path)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, fmt.Errorf("cannot write output %s: %w", path, errors.Unwrap(err))
	}
	return &output{Writer: tmp, tmp: tmp, dest: path}, nil
}

func (o *output) commit() error {
	if o.tmp == nil {
		return nil
	}
	if err := o.tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", o.dest, err)
	}
	if err := os.Chmod(o.tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", o.dest, err)
	}
	if err := os.Rename(o.tmp.Name(), o.dest); err != nil {
		return fmt.Errorf("write %s: %w", o.dest, err)
	}
	o.tmp = nil
	return nil
}

func (o *output) abort() {
	if o.tmp != nil {
		o.tmp.Close()
		os.Remove(o.tmp.Name())
	}
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
