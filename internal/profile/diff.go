package profile

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// LabelBase marks the samples of a differential profile that come from the
// base profile. It is the label `go tool pprof -diff_base` sets, so pprof
// reads a profile made by Diff as it reads its own diffs.
const LabelBase = "pprof::base"

// Diff returns the differential profile of current against base in the
// representation `go tool pprof -diff_base` uses: current's samples as they
// are, then base's samples with negated counts and the label
// "pprof::base"="true" added. Counts are neither normalized (see Scale)
// nor converted between periods (see InPeriod); Start, Duration and
// Period are current's. Either argument may be nil or empty.
//
// The result shares locations and mappings with its arguments and must be
// encoded with WriteDiff: Tree, Folded and Write would subtract base from
// current frame by frame, which is not a diff anyone can read.
func Diff(base, current *Profile) *Profile {
	d := &Profile{}
	if current != nil {
		d.Start, d.Duration, d.Kind, d.Period = current.Start, current.Duration, current.Kind, current.Period
		d.Samples = append(d.Samples, current.Samples...)
	}
	if base != nil {
		if current == nil {
			d.Kind, d.Period = base.Kind, base.Period
		}
		for _, s := range base.Samples {
			labels := make(map[string]string, len(s.Labels)+1)
			for k, v := range s.Labels {
				labels[k] = v
			}
			labels[LabelBase] = "true"
			d.Samples = append(d.Samples, &Sample{Stack: s.Stack, Count: -s.Count, Labels: labels})
		}
	}
	return d
}

// isBase reports whether a sample of a differential profile is from the base.
func isBase(s *Sample) bool { return s.Labels[LabelBase] == "true" }

// SplitDiff separates a profile made by Diff into its base and current
// profiles, base counts positive again and without the LabelBase label.
func SplitDiff(d *Profile) (base, current *Profile) {
	base = &Profile{Kind: d.Kind, Period: d.Period}
	current = &Profile{Start: d.Start, Duration: d.Duration, Kind: d.Kind, Period: d.Period}
	for _, s := range d.Samples {
		if !isBase(s) {
			current.Samples = append(current.Samples, s)
			continue
		}
		labels := make(map[string]string, len(s.Labels))
		for k, v := range s.Labels {
			if k != LabelBase {
				labels[k] = v
			}
		}
		base.Samples = append(base.Samples, &Sample{Stack: s.Stack, Count: -s.Count, Labels: labels})
	}
	return base, current
}

// Scale returns a copy of p with every count multiplied by ratio and
// rounded to the nearest integer; samples that round to zero are dropped.
// Scale(base, float64(current.Total())/float64(base.Total())) normalizes a
// base profile before Diff, as `go tool pprof -normalize` does.
func Scale(p *Profile, ratio float64) *Profile {
	out := &Profile{Start: p.Start, Duration: p.Duration, Kind: p.Kind, Period: p.Period}
	for _, s := range p.Samples {
		c := math.Round(float64(s.Count) * ratio)
		if c == 0 || math.IsNaN(c) {
			continue
		}
		if math.Abs(c) > math.MaxInt64/2 {
			c = math.Copysign(math.MaxInt64/2, c)
		}
		out.Samples = append(out.Samples, &Sample{Stack: s.Stack, Count: int64(c), Labels: s.Labels})
	}
	return out
}

// InPeriod returns p with its counts as counts of period (p's period
// or a shorter one), rounded: the same CPU time, so that ranges sampled
// at different rates compare. It returns p itself when its period is
// period or unknown (0).
func InPeriod(p *Profile, period time.Duration) *Profile {
	if p.Period == period || p.Period == 0 || period == 0 {
		return p
	}
	out := Scale(p, float64(p.Period)/float64(period))
	out.Period = period
	return out
}

// WriteDiff encodes a profile made by Diff in format f:
//
//   - pprof: the differential profile as `go tool pprof -diff_base` builds
//     it (base samples negative, labelled pprof::base=true), so
//     `go tool pprof -top diff.pb.gz` shows what changed;
//   - folded: "stack base current" lines, as FlameGraph's difffolded.pl
//     writes them for flamegraph.pl;
//   - json: the DiffTree;
//   - svg, html: current's flame graph, each frame coloured by the change
//     of its share (DeltaColour): grew red, shrank blue.
//
// title heads the flame graphs.
func WriteDiff(w io.Writer, d *Profile, f Format, title string) error {
	switch f {
	case FormatPprof:
		if err := d.diffProto(w); err != nil {
			return fmt.Errorf("write pprof diff: %w", err)
		}
		return nil
	case FormatFolded:
		var b strings.Builder
		for _, line := range d.DiffFolded() {
			b.WriteString(line)
			b.WriteByte('\n')
		}
		_, err := io.WriteString(w, b.String())
		return err
	case FormatJSON:
		if err := json.NewEncoder(w).Encode(d.DiffTree()); err != nil {
			return fmt.Errorf("encode diff tree as json: %w", err)
		}
		return nil
	case FormatSVG:
		return WriteSVG(w, d.DiffTree().flame(), title)
	case FormatHTML:
		return WriteHTML(w, d.DiffTree().flame(), title)
	}
	return fmt.Errorf("unknown format %q", f)
}

// diffProto writes the pprof encoding: Proto keeps only flint's own labels,
// so the base label is put back on the samples it converted, which are in
// the same order as d's.
func (d *Profile) diffProto(w io.Writer) error {
	pp := d.Proto()
	if len(pp.Sample) != len(d.Samples) {
		return fmt.Errorf("proto has %d samples for %d", len(pp.Sample), len(d.Samples))
	}
	for i, s := range d.Samples {
		if isBase(s) {
			pp.Sample[i].Label[LabelBase] = []string{"true"}
		}
	}
	return pp.Write(w)
}

// DiffFolded writes a profile made by Diff as folded stacks with two counts,
// "stack base current", one line per stack seen in either profile, sorted;
// a stack missing from one side counts 0 there. Stacks are spelled as
// Folded spells them.
func (d *Profile) DiffFolded() []string {
	base, current := SplitDiff(d)
	type pair struct{ base, current int64 }
	counts := map[string]*pair{}
	add := func(lines []string, side func(*pair) *int64) {
		for _, line := range lines {
			stack, n, ok := SplitFolded(line)
			if !ok {
				continue // cannot happen: Folded writes "stack count"
			}
			p := counts[stack]
			if p == nil {
				p = &pair{}
				counts[stack] = p
			}
			*side(p) += n
		}
	}
	add(base.Folded(), func(p *pair) *int64 { return &p.base })
	add(current.Folded(), func(p *pair) *int64 { return &p.current })
	lines := make([]string, 0, len(counts))
	for stack, p := range counts {
		lines = append(lines, fmt.Sprintf("%s %d %d", stack, p.base, p.current))
	}
	sort.Strings(lines)
	return lines
}

// DiffNode is a node of a differential call tree: one frame reached by one
// path from the root, with its samples in the base and the current profile.
// Shares, and so the delta, are computed against the root's totals.
type DiffNode struct {
	Name     string      `json:"name"`
	Kind     FrameKind   `json:"kind"`
	Module   string      `json:"module,omitempty"`
	File     string      `json:"file,omitempty"`
	Line     int         `json:"line,omitempty"`
	Base     int64       `json:"base"`         // base samples in this frame and its callees
	Current  int64       `json:"current"`      // current samples in this frame and its callees
	BaseSelf int64       `json:"base_self"`    // base samples in this frame itself
	Self     int64       `json:"current_self"` // current samples in this frame itself
	Children []*DiffNode `json:"children,omitempty"`
	// Unit, on the root, is how counts read, as Node's.
	Unit string `json:"unit,omitempty"`
}

// DiffTree builds the call tree of a profile made by Diff: Tree's nodes for
// both profiles, matched by path, with both counts. A frame seen on one
// side only has 0 on the other. Children are sorted by name, then kind.
func (d *Profile) DiffTree() *DiffNode {
	base, current := SplitDiff(d)
	root := &DiffNode{Name: "all", Kind: KindRoot, Unit: d.Kind.Unit()}
	mergeTree(root, base.Tree(), true)
	mergeTree(root, current.Tree(), false)
	sortDiffTree(root)
	return root
}

// mergeTree adds n's counts, and its children's, to dn as one side.
func mergeTree(dn *DiffNode, n *Node, isBase bool) {
	if isBase {
		dn.Base += n.Total
		dn.BaseSelf += n.Self
	} else {
		dn.Current += n.Total
		dn.Self += n.Self
	}
	if len(n.Children) == 0 {
		return
	}
	index := make(map[string]*DiffNode, len(dn.Children))
	for _, c := range dn.Children {
		index[string(c.Kind)+"\x00"+c.Name] = c
	}
	for _, c := range n.Children {
		key := string(c.Kind) + "\x00" + c.Name
		dc := index[key]
		if dc == nil {
			dc = &DiffNode{Name: c.Name, Kind: c.Kind, Module: c.Module, File: c.File, Line: c.Line}
			index[key] = dc
			dn.Children = append(dn.Children, dc)
		}
		mergeTree(dc, c, isBase)
	}
}

func sortDiffTree(n *DiffNode) {
	sort.Slice(n.Children, func(i, j int) bool {
		a, b := n.Children[i], n.Children[j]
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Kind < b.Kind
	})
	for _, c := range n.Children {
		sortDiffTree(c)
	}
}

// Delta is the change in n's share of all samples,
// current/currentTotal - base/baseTotal, between -1 and 1. A side with no
// samples at all has share 0 everywhere.
func (n *DiffNode) Delta(baseTotal, currentTotal int64) float64 {
	share := func(v, total int64) float64 {
		if total == 0 {
			return 0
		}
		return float64(v) / float64(total)
	}
	return share(n.Current, currentTotal) - share(n.Base, baseTotal)
}

// DeltaColour is the fill of a frame whose share changed by delta in a
// graph whose largest change is maxDelta (both as Delta returns them):
// white for no change, deepening red as the frame grew and blue as it
// shrank, the largest change fully saturated, as flamegraph.pl colours
// differential flame graphs.
func DeltaColour(delta, maxDelta float64) string {
	if maxDelta <= 0 || math.IsNaN(delta) || math.IsNaN(maxDelta) {
		return "#ffffff"
	}
	t := math.Min(math.Abs(delta)/maxDelta, 1)
	v := int(math.Round(255 - 210*t)) // 255 (white) down to 45
	if delta > 0 {
		return fmt.Sprintf("#ff%02x%02x", v, v)
	}
	if delta < 0 {
		return fmt.Sprintf("#%02x%02xff", v, v)
	}
	return "#ffffff"
}

// flame turns a diff tree into a flame graph of the current samples whose
// frames are filled by their change in share; frames absent from the
// current profile have no width and are left out.
func (n *DiffNode) flame() *Node {
	var maxDelta float64
	var walk func(d *DiffNode)
	walk = func(d *DiffNode) {
		maxDelta = math.Max(maxDelta, math.Abs(d.Delta(n.Base, n.Current)))
		for _, c := range d.Children {
			walk(c)
		}
	}
	walk(n)
	var build func(d *DiffNode) *Node
	build = func(d *DiffNode) *Node {
		out := &Node{Name: d.Name, Kind: d.Kind, Module: d.Module, File: d.File, Line: d.Line,
			Self: d.Self, Total: d.Current, Fill: DeltaColour(d.Delta(n.Base, n.Current), maxDelta)}
		for _, c := range d.Children {
			if c.Current > 0 {
				out.Children = append(out.Children, build(c))
			}
		}
		return out
	}
	return build(n)
}
