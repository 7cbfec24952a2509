package doctor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/flint-dev/flint/internal/sampler"
	"github.com/flint-dev/flint/internal/symbol"
	"github.com/flint-dev/flint/internal/tracefs"
)

// Probe is a uprobe attached on the node and what it did during the
// recording.
type Probe struct {
	// Program names the BPF program run on each hit ("" for a tracefs
	// uprobe event without one) and ProgramID identifies it.
	Program   string
	ProgramID uint32
	// Event names a tracefs uprobe event ("uprobes/p_app_0x1234").
	Event string
	// Kind is "uprobe", "uretprobe" or "uprobe_multi".
	Kind string
	// Attachments are where the program is attached.
	Attachments []Attachment
	// Hits is how often it fired during the recording: its program's
	// runs (a program attached at several places counts all of them), or
	// the tracefs event's hits.
	Hits uint64
	// RunTime is the time its program ran during the recording; 0 when
	// unknown (BPF statistics off).
	RunTime time.Duration
}

// Attachment is one probed instruction.
type Attachment struct {
	Path     string `json:"path"`
	Offset   uint64 `json:"offset"`             // file offset
	Function string `json:"function,omitempty"` // that contains it, when named
	PID      int    `json:"pid,omitempty"`      // only this process; 0: every process
}

// probeWatch measures the uprobes attached on the node over a recording.
type probeWatch struct {
	stats    io.Closer // keeps BPF run-time statistics on
	progs    map[ebpf.ProgramID]*ebpf.ProgramStats
	tracefs  string
	events   map[string]uint64
	disabled string    // why nothing is measured
	at       time.Time // when the starting counts were read
}

// watchProbes takes the starting counts of every uprobe on the node. BPF
// run-time statistics, which cost every BPF program ~20 ns a run, are
// turned on only when a uprobe program is attached.
func watchProbes(tracefsDir string) *probeWatch {
	w := &probeWatch{progs: map[ebpf.ProgramID]*ebpf.ProgramStats{}, tracefs: tracefsDir, at: time.Now()}
	if evs, err := tracefs.Uprobes(tracefsDir); err == nil {
		w.events = map[string]uint64{}
		for _, e := range evs {
			w.events[e.Event] = e.Hits
		}
	}
	links, err := uprobeLinks()
	if err != nil {
		w.disabled = err.Error()
		return w
	}
	if len(links) == 0 {
		return w
	}
	c, err := sampler.EnableStats()
	if err != nil {
		w.disabled = err.Error()
		return w
	}
	w.stats = c
	for id := range links {
		if st, err := programStats(id); err == nil {
			w.progs[id] = st
		}
	}
	return w
}

// stop ends the watch without reading it.
func (w *probeWatch) stop() {
	if w.stats != nil {
		w.stats.Close()
		w.stats = nil
	}
}

// finish returns the probes and what they did since watchProbes, scaled to
// a recording of d: the watch spans more, from before the tracer loads to
// after it is read, and its counts divided by d made rates 1.7 to 1.8
// times the real ones in the doctor's tests.
func (w *probeWatch) finish(d time.Duration) ([]Probe, []string) {
	defer w.stop()
	span := time.Since(w.at)
	scale, scaleTime := toRecording[uint64](d, span), toRecording[time.Duration](d, span)
	var out []Probe
	var notes []string
	if w.disabled != "" {
		notes = append(notes, "uprobe programs not measured: "+w.disabled)
	}
	links, err := uprobeLinks()
	if err == nil {
		for id, p := range links {
			before, ok := w.progs[id]
			if !ok {
				notes = append(notes, fmt.Sprintf("uprobe program %d (%s) attached during the recording: not measured", id, p.Program))
				continue
			}
			after, err := programStats(id)
			if err != nil {
				continue // detached meanwhile
			}
			p.Hits = scale(after.RunCount - before.RunCount)
			p.RunTime = scaleTime(after.Runtime - before.Runtime)
			out = append(out, *p)
		}
	}
	if evs, err := tracefs.Uprobes(w.tracefs); err == nil && w.events != nil {
		for _, e := range evs {
			before, ok := w.events[e.Event]
			if !ok || e.Hits < before {
				continue
			}
			kind := "uprobe"
			if e.Return {
				kind = "uretprobe"
			}
			out = append(out, Probe{Event: e.Event, Kind: kind, Hits: scale(e.Hits - before),
				Attachments: []Attachment{{Path: e.Path, Offset: e.Offset, Function: functionAt(e.Path, e.Offset)}}})
		}
	}
	slices.SortFunc(out, func(a, b Probe) int { return int(b.Hits) - int(a.Hits) })
	return out, notes
}

// uprobeLinks lists the BPF links attaching programs to uprobes, by program.
// Needs Linux 6.6 to describe perf-event links (earlier ones show no
// attachment and are left out).
func uprobeLinks() (map[ebpf.ProgramID]*Probe, error) {
	out := map[ebpf.ProgramID]*Probe{}
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil {
			continue
		}
		var kind string
		var atts []Attachment
		if pe := info.PerfEvent(); pe != nil {
			u := pe.Uprobe()
			if u == nil {
				continue
			}
			kind = "uprobe"
			if pe.Type == link.PerfEventUretprobe {
				kind = "uretprobe"
			}
			atts = append(atts, Attachment{Path: u.File, Offset: uint64(u.Offset)})
		} else if um := info.UprobeMulti(); um != nil {
			kind = "uprobe_multi"
			pid, _ := um.Pid()
			offs, _ := um.Offsets()
			for _, o := range offs {
				atts = append(atts, Attachment{Path: um.File, Offset: o.Offset, PID: int(pid)})
			}
		} else {
			continue
		}
		for i := range atts {
			atts[i].Function = functionAt(atts[i].Path, atts[i].Offset)
		}
		p := out[info.Program]
		if p == nil {
			p = &Probe{ProgramID: uint32(info.Program), Kind: kind}
			if prog, err := ebpf.NewProgramFromID(info.Program); err == nil {
				if pi, err := prog.Info(); err == nil {
					p.Program = pi.Name
				}
				prog.Close()
			}
			out[info.Program] = p
		}
		p.Attachments = append(p.Attachments, atts...)
	}
	if err := it.Err(); err != nil {
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("list BPF links: %w (needs CAP_SYS_ADMIN)", err)
		}
		return nil, fmt.Errorf("list BPF links: %w", err)
	}
	return out, nil
}

func programStats(id ebpf.ProgramID) (*ebpf.ProgramStats, error) {
	prog, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return nil, err
	}
	defer prog.Close()
	return prog.Stats()
}

// functionAt names the function at a file offset of the binary at path,
// "" when it cannot.
func functionAt(path string, offset uint64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, err := symbol.OpenBinary(f)
	if err != nil {
		return ""
	}
	addr, ok := b.Addr(offset)
	if !ok {
		return ""
	}
	if frames := b.Lookup(addr); len(frames) > 0 {
		return frames[len(frames)-1].Function
	}
	return ""
}
