package doctor

import (
	"math"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// LatencyBuckets is the size of a Call's latency histogram: bucket b counts
// calls that took [2^b, 2^(b+1)) ns, the last one everything from 2.1 s.
const LatencyBuckets = 32

// Syscalls is what the tracer counted.
type Syscalls struct {
	// Duration is how long tracing ran: the denominator of every rate.
	Duration time.Duration
	// Every is set when every syscall was traced (raw_syscalls); else
	// only Traced were, and writes only to stdout and stderr.
	Every   bool
	Traced  []string
	Skipped []string // asked for but without a tracepoint here
	Calls   []*Call
	// Comms names the processes that made calls, as they were first seen.
	Comms map[int]string
	// Warnings say what the tracer lost, one line each.
	Warnings []string
}

// Call is one thread's calls of one syscall with one class of arguments.
type Call struct {
	PID, TID int
	Thread   string // thread name, "" when the thread was gone
	Syscall  string // "epoll_wait", or "syscall_N" when unnamed
	Nr       uint32
	// ZeroTimeout: a poll-family call told not to wait.
	ZeroTimeout bool
	// Stdout, Stderr: a write or writev to fd 1 or 2.
	Stdout, Stderr bool
	// Deadline: a clock_nanosleep until an absolute time (TIMER_ABSTIME).
	Deadline bool

	Count  uint64
	Errors uint64 // returned -errno
	Empty  uint64 // returned 0: no events, nothing written
	Bytes  uint64 // written to stdout or stderr
	Total  time.Duration
	// LastErrno is the latest error seen, 0 if none.
	LastErrno unix.Errno
	Latency   [LatencyBuckets]uint64
	// Stacks are the user stacks sampled at entry (at most one per CPU
	// every 100 µs, so counts are a sample), most frequent first.
	Stacks []CallStack
}

// CallResult is how the calls of a sampled stack ended.
type CallResult string

// Call results.
const (
	ResultOK     CallResult = "ok"
	ResultFailed CallResult = "failed"
	ResultEmpty  CallResult = "empty"
)

// CallStack is a user stack sampled at syscall entry and how many times.
type CallStack struct {
	Count  uint64
	Result CallResult
	Frames []Frame // leaf first
}

// Quantile estimates the latency below which a fraction q of calls fell,
// interpolating inside the log2 bucket: within a factor of two of the truth.
func Quantile(hist []uint64, q float64) time.Duration {
	var total uint64
	for _, n := range hist {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var seen float64
	for b, n := range hist {
		if n == 0 {
			continue
		}
		if seen+float64(n) >= rank {
			lo := math.Ldexp(1, b)
			if b == 0 {
				lo = 0
			}
			hi := math.Ldexp(1, b+1)
			frac := (rank - seen) / float64(n)
			return time.Duration(lo + frac*(hi-lo))
		}
		seen += float64(n)
	}
	return time.Duration(math.Ldexp(1, len(hist)))
}

// Row is one line of the syscall table: one process's calls of one syscall,
// all threads and argument classes together.
type Row struct {
	PID     int           `json:"pid"`
	Comm    string        `json:"comm"`
	Syscall string        `json:"syscall"`
	Calls   uint64        `json:"calls"`
	Rate    float64       `json:"rate"` // calls per second
	Errors  uint64        `json:"errors"`
	Errno   string        `json:"last_errno,omitempty"`
	Total   time.Duration `json:"total_ns"`
	P50     time.Duration `json:"p50_ns"`
	P99     time.Duration `json:"p99_ns"`
	// Stacks are the most frequent calling stacks, each with its share of
	// the stacks sampled for this row.
	Stacks []RowStack `json:"stacks,omitempty"`

	latency [LatencyBuckets]uint64
}

// RowStack is a calling stack of a Row.
type RowStack struct {
	Share  float64 `json:"share"` // of the row's sampled stacks, 0..1
	Frames []Frame `json:"frames"`
}

// Table aggregates the calls per process and syscall, most time first, with
// up to topStacks stacks each. comm names processes.
func (s *Syscalls) Table(comm func(pid int) string, topStacks int) []Row {
	type key struct {
		pid     int
		syscall string
	}
	rows := map[key]*Row{}
	stacks := map[key]map[string]*RowStack{}
	counts := map[key]map[string]uint64{}
	var order []key
	for _, c := range s.Calls {
		k := key{c.PID, c.Syscall}
		r := rows[k]
		if r == nil {
			r = &Row{PID: c.PID, Comm: comm(c.PID), Syscall: c.Syscall}
			rows[k] = r
			stacks[k] = map[string]*RowStack{}
			counts[k] = map[string]uint64{}
			order = append(order, k)
		}
		r.Calls += c.Count
		r.Errors += c.Errors
		r.Total += c.Total
		if c.LastErrno != 0 {
			r.Errno = errnoName(c.LastErrno)
		}
		for i, n := range c.Latency {
			r.latency[i] += n
		}
		for _, st := range c.Stacks {
			id := stackID(st.Frames)
			if stacks[k][id] == nil {
				stacks[k][id] = &RowStack{Frames: st.Frames}
			}
			counts[k][id] += st.Count
		}
	}
	out := make([]Row, 0, len(rows))
	for _, k := range order {
		r := rows[k]
		if s.Duration > 0 {
			r.Rate = float64(r.Calls) / s.Duration.Seconds()
		}
		r.P50 = Quantile(r.latency[:], 0.5)
		r.P99 = Quantile(r.latency[:], 0.99)
		var total uint64
		ids := make([]string, 0, len(counts[k]))
		for id, n := range counts[k] {
			total += n
			ids = append(ids, id)
		}
		slices.SortFunc(ids, func(a, b string) int {
			if d := int64(counts[k][b]) - int64(counts[k][a]); d != 0 {
				return int(d)
			}
			return strings.Compare(a, b)
		})
		for _, id := range ids[:min(topStacks, len(ids))] {
			st := stacks[k][id]
			st.Share = float64(counts[k][id]) / float64(total)
			r.Stacks = append(r.Stacks, *st)
		}
		out = append(out, *r)
	}
	slices.SortStableFunc(out, func(a, b Row) int {
		if a.Total != b.Total {
			return int(b.Total - a.Total)
		}
		return int(b.Calls) - int(a.Calls)
	})
	return out
}

func stackID(frames []Frame) string {
	var b strings.Builder
	for _, f := range frames {
		b.WriteString(f.Function)
		b.WriteByte(0)
	}
	return b.String()
}

// errnoName spells an errno as C does ("EAGAIN"), or its number.
func errnoName(e unix.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return "errno " + e.Error()
}
