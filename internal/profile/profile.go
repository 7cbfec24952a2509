// Package profile holds flint's one in-memory model of a CPU profile,
// stacks × labels × counts, and its encoders: folded stacks, pprof, a JSON
// tree, and interactive SVG and HTML flame graphs.
package profile

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/flint-dev/flint/internal/symbol"
)

// Well-known label names.
const (
	LabelComm      = "comm"       // process name (the thread group leader's comm)
	LabelThread    = "thread"     // thread name
	LabelPID       = "pid"        // thread group ID
	LabelTID       = "tid"        // thread ID
	LabelStartTime = "start_time" // process start, clock ticks after boot: tells reused PIDs apart
	LabelExe       = "exe"        // executable path as the process sees it
	LabelBuildID   = "build_id"   // of the executable
	LabelCgroup    = "cgroup"     // cgroup path
	LabelNode      = "node"       // host name, or the agent's --node
	LabelRuntime   = "runtime"    // what runs the code: go1.26, python3.11, jvm, node or native
	// A process in a container: its IDs come from the cgroup path, its
	// names from Kubernetes (internal/kube) where the agent can ask.
	LabelContainerID = "container_id" // container ID
	LabelPodUID      = "pod_uid"      // Kubernetes pod UID
	LabelNamespace   = "namespace"    // Kubernetes namespace
	LabelPod         = "pod"          // Kubernetes pod name
	LabelContainer   = "container"    // container name in its pod
)

// Kind is what a profile's counts measure.
type Kind uint8

// Kinds of profile.
const (
	CPU    Kind = iota // samples, each Period of CPU time
	OffCPU             // nanoseconds threads waited off the CPU
	Wall               // nanoseconds on the CPU and off it
)

// kindNames are the names of the kinds in flint's API and command line.
var kindNames = [...]string{CPU: "cpu", OffCPU: "off-cpu", Wall: "wall"}

// String is the kind's name: cpu, off-cpu or wall.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind %d", k)
}

// ParseKind reads a kind's name, as String writes it.
func ParseKind(s string) (Kind, error) {
	for k, name := range kindNames {
		if s == name {
			return Kind(k), nil
		}
	}
	return 0, fmt.Errorf("profile type %q: want cpu, off-cpu or wall", s)
}

// Title is what a profile of the kind shows, for a title: "CPU",
// "Blocked time", "Wall time".
func (k Kind) Title() string {
	return map[Kind]string{CPU: "CPU", OffCPU: "Blocked time", Wall: "Wall time"}[k]
}

// Unit is how a tree's counts read: "" for samples, "ns" for time.
func (k Kind) Unit() string {
	if k == CPU {
		return ""
	}
	return "ns"
}

// Profile is a set of sampled stacks with labels and counts.
type Profile struct {
	Start    time.Time
	Duration time.Duration
	// Kind is what Count measures; for OffCPU and Wall, Period is 1 ns.
	Kind Kind
	// Period is the time one count stands for (1/frequency of CPU time).
	Period  time.Duration
	Samples []*Sample
	// Comments say how the profile was taken (pprof's comments).
	Comments []string
}

// Sample is one distinct stack seen Count times with the same labels.
type Sample struct {
	Stack  []*Location // leaf first, as in pprof
	Count  int64
	Labels map[string]string
}

// Location is one address on a stack.
type Location struct {
	// Address is where the binary was linked to run the instruction
	// (the same in every process, whatever ASLR did) for user code in a
	// binary flint could read, else the address in the sampled address
	// space; Address-Mapping.Start+Mapping.Offset is the file offset.
	Address uint64
	Mapping *Mapping // nil when no module covers Address
	// Frames name the address, inlined callee first; never empty: an
	// address that cannot be named gets "module+0xoffset" or "[unknown]".
	Frames []symbol.Frame
}

// Mapping is a module (executable, library, kernel) mapped into memory.
type Mapping struct {
	Start, Limit, Offset uint64
	File                 string
	BuildID              string
	Kernel               bool
}

// Total is the sum of all sample counts.
func (p *Profile) Total() int64 {
	var n int64
	for _, s := range p.Samples {
		n += s.Count
	}
	return n
}

// FrameKind tells a flame graph how to colour a frame.
type FrameKind string

// Frame kinds.
const (
	KindRoot    FrameKind = "root"
	KindProcess FrameKind = "process"
	KindUser    FrameKind = "user"
	KindInline  FrameKind = "inline" // inlined into its parent frame
	KindKernel  FrameKind = "kernel"
)

// Node is a node of the call tree: a frame reached by one path from the root.
type Node struct {
	Name   string    `json:"name"`
	Kind   FrameKind `json:"kind"`
	Module string    `json:"module,omitempty"`
	File   string    `json:"file,omitempty"`
	Line   int       `json:"line,omitempty"`
	Self   int64     `json:"self"`
	Total  int64     `json:"total"`
	// Unit, on the root, is how counts read: "" samples, "ns" time.
	Unit string `json:"unit,omitempty"`
	// Fill, when set, overrides the colour scheme: a diff flame graph
	// colours frames by their change.
	Fill     string  `json:"fill,omitempty"`
	Children []*Node `json:"children,omitempty"`
}

// Tree builds the call tree: the root "all", one child per process name,
// then each stack's frames root to leaf with inlined frames expanded.
// Children are sorted by name so output is deterministic.
func (p *Profile) Tree() *Node {
	root := &Node{Name: "all", Kind: KindRoot, Unit: p.Kind.Unit()}
	index := map[*Node]map[string]*Node{}
	child := func(parent *Node, f treeFrame) *Node {
		m := index[parent]
		if m == nil {
			m = map[string]*Node{}
			index[parent] = m
		}
		key := string(f.kind) + "\x00" + f.name
		n := m[key]
		if n == nil {
			n = &Node{Name: f.name, Kind: f.kind, Module: f.module, File: f.file, Line: f.line}
			m[key] = n
			parent.Children = append(parent.Children, n)
		}
		return n
	}
	for _, s := range p.Samples {
		root.Total += s.Count
		n := child(root, treeFrame{name: s.Labels[LabelComm], kind: KindProcess})
		n.Total += s.Count
		for _, f := range stackFrames(s) {
			n = child(n, f)
			n.Total += s.Count
		}
		n.Self += s.Count
	}
	sortTree(root)
	return root
}

func sortTree(n *Node) {
	sort.Slice(n.Children, func(i, j int) bool { return n.Children[i].Name < n.Children[j].Name })
	for _, c := range n.Children {
		sortTree(c)
	}
}

type treeFrame struct {
	name, module, file string
	line               int
	kind               FrameKind
}

// stackFrames lists a sample's frames root first, inlined frames expanded.
func stackFrames(s *Sample) []treeFrame {
	var out []treeFrame
	for i := len(s.Stack) - 1; i >= 0; i-- {
		loc := s.Stack[i]
		kind, module := KindUser, ""
		if loc.Mapping != nil {
			module = loc.Mapping.File
			if loc.Mapping.Kernel {
				kind = KindKernel
			}
		}
		for j := len(loc.Frames) - 1; j >= 0; j-- {
			f := loc.Frames[j]
			k := kind
			// All but the outermost frame of an address are inlined calls.
			if j < len(loc.Frames)-1 && kind == KindUser {
				k = KindInline
			}
			out = append(out, treeFrame{name: f.Function, module: module, file: f.File, line: f.Line, kind: k})
		}
	}
	return out
}

// foldedName makes a frame name safe for the folded format, where ';'
// separates frames and a line ends with " count".
var foldedName = strings.NewReplacer(";", ":", "\n", " ", "\r", " ")

// Folded writes the profile as folded stacks, one line per distinct stack:
// "comm;root;…;leaf count", kernel frames suffixed "_[k]" as bcc's
// profile -f and FlameGraph's flamegraph.pl expect. Lines are sorted.
func (p *Profile) Folded() []string {
	counts := map[string]int64{}
	var b strings.Builder
	for _, s := range p.Samples {
		b.Reset()
		b.WriteString(foldedName.Replace(s.Labels[LabelComm]))
		for _, f := range stackFrames(s) {
			b.WriteByte(';')
			b.WriteString(foldedName.Replace(f.name))
			if f.kind == KindKernel {
				b.WriteString("_[k]")
			}
		}
		counts[b.String()] += s.Count
	}
	lines := make([]string, 0, len(counts))
	for stack, n := range counts {
		lines = append(lines, fmt.Sprintf("%s %d", stack, n))
	}
	sort.Strings(lines)
	return lines
}

// SplitFolded splits a line Folded wrote into its stack and its count; ok
// is false for a line that is not "stack count".
func SplitFolded(line string) (stack string, count int64, ok bool) {
	// A stack may hold spaces; its count follows the last one.
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.ParseInt(line[i+1:], 10, 64)
	return line[:i], n, err == nil
}

func parseInt(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }
