package doctor

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// hot-debug-output: printing on the hot path. A fmt.Println of a request or
// a protobuf message left over from debugging formats the whole value with
// reflection on every call, and a program writing stdout or stderr at a
// high rate pays a syscall per line.
//
// Two ways to fire, for one process:
//   - printing: at least PrintShare (10%) of its CPU samples are inside a
//     print function (fmt.Print/Printf/Println, the log package's Print,
//     Fatal and Panic families and Logger methods, C's printf family), or
//     inside formatting (fmt, encoding/json, protobuf text) reached from a
//     function of the program's own that writes to stdout or stderr; and
//     the process used at least PrintMinCPU (0.05 CPU);
//   - writing: it wrote to stdout or stderr at least StdioWriteRate times
//     (1000) or StdioWriteBytes (1 MiB) a second, and used at least
//     StdioWriteMinCPU (0.05 CPU).
//
// The evidence names the program's own function and line that prints.
func hotDebugOutput(d *Data, t Thresholds) []Finding {
	writes := stdioWrites(d)
	x := d.index()
	pids := map[int]bool{}
	for pid := range x.byPID {
		pids[pid] = true
	}
	for pid := range writes {
		pids[pid] = true
	}
	var out []Finding
	for pid := range pids {
		p := d.Processes[pid]
		cpu := d.processCPU(pid)
		w := writes[pid]
		pr := printing(d, pid, w)
		printFires := pr.share >= t.PrintShare && cpu >= t.PrintMinCPU && x.samples[pid] >= minPrintSamples
		var wRate, bRate float64
		if w != nil && d.Syscalls.Duration > 0 {
			wRate = float64(w.count) / d.Syscalls.Duration.Seconds()
			bRate = float64(w.bytes) / d.Syscalls.Duration.Seconds()
		}
		writeFires := (wRate >= t.StdioWriteRate || bRate >= t.StdioWriteBytes) && cpu >= t.StdioWriteMinCPU
		if !printFires && !writeFires {
			continue
		}
		f := Finding{ID: "hot-debug-output", PID: pid, Comm: d.Comm(pid)}
		where := pr.where
		if where == (Frame{}) && w != nil {
			where = w.where
		}
		if where != (Frame{}) {
			f.Where = &where
		}
		switch {
		case printFires:
			f.Summary = fmt.Sprintf("%s spends %s of its CPU printing", f.Comm, pct(pr.share))
			if f.Where != nil {
				f.Summary += ", in " + f.Where.String()
			}
			f.Cost = pr.share * cpu
			f.Stack = pr.stack
		default:
			f.Summary = fmt.Sprintf("%s writes to %s %s", f.Comm, w.target(), rate(wRate))
			if f.Where != nil {
				f.Summary += ", from " + f.Where.String()
			}
			f.Stack = w.stack
		}
		if pr.share > 0 {
			f.Evidence = append(f.Evidence, Evidence{Name: "print_share", Value: pr.share, Unit: "ratio",
				Text: fmt.Sprintf("%s of its CPU samples are in %s", pct(pr.share), strings.Join(pr.funcs, ", "))})
		}
		f.Evidence = append(f.Evidence, Evidence{Name: "process_cpu", Value: cpu, Unit: "CPU",
			Text: fmt.Sprintf("the process used %.2f CPU", cpu)})
		if f.Where != nil {
			f.Evidence = append(f.Evidence, Evidence{Name: "caller", Text: "printed from " + f.Where.String()})
		}
		if w != nil {
			f.Evidence = append(f.Evidence,
				Evidence{Name: "stdio_writes_per_second", Value: wRate, Unit: "1/s",
					Text: fmt.Sprintf("%s writes to %s", rate(wRate), w.target())},
				Evidence{Name: "stdio_bytes_per_second", Value: bRate, Unit: "B/s",
					Text: fmt.Sprintf("%s written per second", bytesText(bRate))})
			if writeCost := w.time.Seconds() / d.Syscalls.Duration.Seconds(); writeCost > f.Cost {
				f.Cost = writeCost
			}
		}
		if p != nil && p.Stdout != "" {
			f.Evidence = append(f.Evidence, Evidence{Name: "stdout", Text: "stdout is " + p.Stdout + ", stderr is " + p.Stderr})
		}
		f.Fix = "Take the print off the hot path: it is debug output (fmt formats the whole value with reflection on every call). " +
			"Delete it, or log a few fields at a debug level that is off in production; " +
			"if the output is needed, buffer it (bufio.Writer) and write it off the request path."
		f.Severity = severityOf(f.Cost, f.Cost/max(cpu, 0.01))
		out = append(out, f)
	}
	return out
}

// minPrintSamples is the fewest samples of a process for its print share
// to count.
const minPrintSamples = 30

// printFuncs print to stdout or stderr by definition.
var printFuncs = []string{
	"fmt.Print", // Print, Printf, Println
	"log.Print", "log.Fatal", "log.Panic", "log.(*Logger).",
	"printf", "vprintf", "puts", "putchar", "perror",
}

// formatPrefixes format values: costly when their output is printed.
var formatPrefixes = []string{
	"fmt.", "encoding/json.", "google.golang.org/protobuf/encoding/prototext.",
	"google.golang.org/protobuf/internal/encoding/text.", "github.com/golang/protobuf/proto.",
}

// isPrintFunc matches Go names by prefix ("fmt.Print" covers Printf and
// Println) and C names exactly.
func isPrintFunc(fn string) bool {
	for _, p := range printFuncs {
		if fn == p || strings.Contains(p, ".") && strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

func isFormatFunc(fn string) bool {
	for _, p := range formatPrefixes {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// stdioWrite is a process's writes to stdout and stderr.
type stdioWrite struct {
	count, bytes   uint64
	time           time.Duration
	stdout, stderr bool
	where          Frame   // the program's own frame that writes most
	callers        []Frame // the program's own frames (lines) that write
	stack          []Frame
}

func (w *stdioWrite) target() string {
	switch {
	case w.stdout && w.stderr:
		return "stdout and stderr"
	case w.stderr:
		return "stderr"
	}
	return "stdout"
}

func stdioWrites(d *Data) map[int]*stdioWrite {
	out := map[int]*stdioWrite{}
	if d.Syscalls == nil {
		return out
	}
	best := map[int]uint64{}
	for _, c := range d.Syscalls.Calls {
		if !c.Stdout && !c.Stderr {
			continue
		}
		w := out[c.PID]
		if w == nil {
			w = &stdioWrite{}
			out[c.PID] = w
		}
		w.count += c.Count
		w.bytes += c.Bytes
		w.time += c.Total
		w.stdout = w.stdout || c.Stdout
		w.stderr = w.stderr || c.Stderr
		for _, s := range c.Stacks {
			own, ok := ownFrame(s.Frames, d.Processes[c.PID])
			if !ok {
				continue
			}
			if !slices.ContainsFunc(w.callers, own.sameLine) {
				w.callers = append(w.callers, own)
			}
			if s.Count > best[c.PID] {
				best[c.PID] = s.Count
				w.where, w.stack = own, s.Frames
			}
		}
	}
	return out
}

// printStats is how much of a process's CPU goes to printing.
type printStats struct {
	share float64
	funcs []string // the print functions seen, most CPU first
	where Frame    // the program's own frame that prints most
	stack []Frame
}

func printing(d *Data, pid int, w *stdioWrite) printStats {
	x := d.index()
	total := x.samples[pid]
	if total == 0 {
		return printStats{}
	}
	p := d.Processes[pid]
	var in int64
	funcs := map[string]int64{}
	wheres := map[Frame]int64{}
	stacks := map[Frame][]Frame{}
	for _, s := range x.byPID[pid] {
		frames := sampleFrames(s)
		fn, idx := printFrame(frames, p, w)
		if fn == "" {
			continue
		}
		in += s.Count
		funcs[fn] += s.Count
		if own, ok := ownFrame(frames[idx:], p); ok {
			own.Module = ""
			wheres[own] += s.Count
			if stacks[own] == nil {
				stacks[own] = userFrames(frames)
			}
		}
	}
	st := printStats{share: float64(in) / float64(total)}
	for fn := range funcs {
		st.funcs = append(st.funcs, fn)
	}
	slices.SortFunc(st.funcs, func(a, b string) int {
		if funcs[a] != funcs[b] {
			return int(funcs[b] - funcs[a])
		}
		return strings.Compare(a, b)
	})
	var most int64
	for f, n := range wheres {
		if n > most || n == most && f.Function < st.where.Function {
			most, st.where, st.stack = n, f, stacks[f]
		}
	}
	return st
}

// printFrame finds the outermost print function on a sample's stack, or a
// formatting function called from a line of the program's own that writes
// to stdout or stderr (so that a JSON response encoded by the same function
// does not count); "" when the sample is not printing. idx is the frame's
// position (leaf first).
func printFrame(frames []Frame, p *Process, w *stdioWrite) (fn string, idx int) {
	for i := len(frames) - 1; i >= 0; i-- {
		if !frames[i].Kernel && isPrintFunc(frames[i].Function) {
			return frames[i].Function, i
		}
	}
	if w == nil || len(w.callers) == 0 {
		return "", 0
	}
	for i := len(frames) - 1; i >= 0; i-- {
		f := frames[i]
		if f.Kernel || !isFormatFunc(f.Function) {
			continue
		}
		if own, ok := ownFrame(frames[i:], p); ok && slices.ContainsFunc(w.callers, own.sameLine) {
			return f.Function, i
		}
		return "", 0
	}
	return "", 0
}

func bytesText(b float64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}
