package profile

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	pprofile "github.com/google/pprof/profile"

	"github.com/flint-dev/flint/internal/symbol"
)

// diffTestProfiles returns a base where main.work has 3 of 4 samples and a
// current where it has 2 of 8 and main.new appeared.
func diffTestProfiles() (base, current *Profile) {
	exe := &Mapping{File: "/usr/bin/app", Start: 0x400000, Limit: 0x500000}
	loc := func(fn string) *Location {
		return &Location{Address: 0x401000, Mapping: exe, Frames: []symbol.Frame{{Function: fn, File: "/src/main.go", Line: 1}}}
	}
	main, work, idle, newFn := loc("main.main"), loc("main.work"), loc("main.idle"), loc("main.new")
	labels := map[string]string{LabelComm: "app", LabelPID: "42"}
	base = &Profile{Period: 10 * time.Millisecond, Samples: []*Sample{
		{Stack: []*Location{work, main}, Count: 3, Labels: labels},
		{Stack: []*Location{idle, main}, Count: 1, Labels: labels},
	}}
	current = &Profile{Start: time.Unix(1000, 0), Duration: time.Minute, Period: 10 * time.Millisecond, Samples: []*Sample{
		{Stack: []*Location{work, main}, Count: 2, Labels: labels},
		{Stack: []*Location{idle, main}, Count: 2, Labels: labels},
		{Stack: []*Location{newFn, main}, Count: 4, Labels: labels},
	}}
	return base, current
}

func TestDiffSplitsBack(t *testing.T) {
	base, current := diffTestProfiles()
	d := Diff(base, current)
	if len(d.Samples) != 5 || d.Start != current.Start || d.Period != current.Period {
		t.Fatalf("diff has %d samples, start %v, period %v", len(d.Samples), d.Start, d.Period)
	}
	for _, s := range d.Samples[3:] {
		if s.Count >= 0 || s.Labels[LabelBase] != "true" {
			t.Errorf("base sample %+v: want a negative count and %s=true", s, LabelBase)
		}
	}
	if _, ok := base.Samples[0].Labels[LabelBase]; ok {
		t.Error("Diff changed the base profile's labels")
	}
	b, c := SplitDiff(d)
	if b.Total() != base.Total() || c.Total() != current.Total() {
		t.Errorf("split totals %d, %d; want %d, %d", b.Total(), c.Total(), base.Total(), current.Total())
	}
	if !reflect.DeepEqual(b.Samples[0].Labels, base.Samples[0].Labels) {
		t.Errorf("split base labels %v", b.Samples[0].Labels)
	}
	if got := Diff(nil, nil); len(got.Samples) != 0 {
		t.Errorf("Diff(nil, nil) has samples")
	}
}

func TestDiffPprof(t *testing.T) {
	base, current := diffTestProfiles()
	var buf bytes.Buffer
	if err := WriteDiff(&buf, Diff(base, current), FormatPprof, ""); err != nil {
		t.Fatal(err)
	}
	p, err := pprofile.ParseData(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	var pos, neg int64
	for _, s := range p.Sample {
		if s.DiffBaseSample() != (s.Value[0] < 0) {
			t.Errorf("sample %v: base label %v but value %d", s.Location[0].Line[0].Function.Name, s.DiffBaseSample(), s.Value[0])
		}
		if s.Value[0] < 0 {
			neg -= s.Value[0]
		} else {
			pos += s.Value[0]
		}
		if s.Value[1] != s.Value[0]*int64(10*time.Millisecond) {
			t.Errorf("cpu value %d for %d samples", s.Value[1], s.Value[0])
		}
	}
	if pos != 8 || neg != 4 {
		t.Errorf("current %d, base %d samples; want 8, 4", pos, neg)
	}

	// go tool pprof reads it as one of its own diffs: main.work lost one
	// sample, main.new gained four, against the base's total of 4.
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command for go tool pprof")
	}
	path := filepath.Join(t.TempDir(), "diff.pb.gz")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", "-sample_index=samples", path).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, out)
	}
	for _, want := range []string{"of 4 total", "4 100%", "-1 25.00%"} {
		if !strings.Contains(strings.Join(strings.Fields(string(out)), " "), want) {
			t.Errorf("go tool pprof -top output lacks %q:\n%s", want, out)
		}
	}
}

func TestDiffFolded(t *testing.T) {
	base, current := diffTestProfiles()
	var buf bytes.Buffer
	if err := WriteDiff(&buf, Diff(base, current), FormatFolded, ""); err != nil {
		t.Fatal(err)
	}
	want := "app;main.main;main.idle 1 2\napp;main.main;main.new 0 4\napp;main.main;main.work 3 2\n"
	if buf.String() != want {
		t.Errorf("folded diff:\n%s\nwant:\n%s", buf.String(), want)
	}
}

func TestDiffTree(t *testing.T) {
	base, current := diffTestProfiles()
	var buf bytes.Buffer
	if err := WriteDiff(&buf, Diff(base, current), FormatJSON, ""); err != nil {
		t.Fatal(err)
	}
	var root DiffNode
	if err := json.Unmarshal(buf.Bytes(), &root); err != nil {
		t.Fatal(err)
	}
	if root.Base != 4 || root.Current != 8 || len(root.Children) != 1 {
		t.Fatalf("root %+v", root)
	}
	main := root.Children[0].Children[0]
	got := map[string][4]int64{}
	for _, c := range main.Children {
		got[c.Name] = [4]int64{c.Base, c.Current, c.BaseSelf, c.Self}
	}
	want := map[string][4]int64{
		"main.idle": {1, 2, 1, 2},
		"main.new":  {0, 4, 0, 4},
		"main.work": {3, 2, 3, 2},
	}
	if main.Name != "main.main" || !reflect.DeepEqual(got, want) {
		t.Errorf("%s's children %v, want %v", main.Name, got, want)
	}
	for _, tc := range []struct {
		name  string
		delta float64
	}{{"main.work", 2.0/8 - 3.0/4}, {"main.new", 0.5}, {"main.idle", 0}} {
		for _, c := range main.Children {
			if c.Name == tc.name {
				if d := c.Delta(root.Base, root.Current); d != tc.delta {
					t.Errorf("%s delta %g, want %g", tc.name, d, tc.delta)
				}
			}
		}
	}
	if d := (&DiffNode{Current: 3}).Delta(0, 3); d != 1 {
		t.Errorf("delta against an empty base %g, want 1", d)
	}
	if root.Unit != "" {
		t.Errorf("CPU diff's unit %q, want none (samples)", root.Unit)
	}
	base.Kind, current.Kind = OffCPU, OffCPU
	if u := Diff(Scale(base, 2), current).DiffTree().Unit; u != "ns" {
		t.Errorf("off-CPU diff's unit %q, want ns", u)
	}
}

func TestDiffFlameGraphs(t *testing.T) {
	base, current := diffTestProfiles()
	for _, f := range []Format{FormatSVG, FormatHTML} {
		var buf bytes.Buffer
		if err := WriteDiff(&buf, Diff(base, current), f, "diff"); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), "main.new") || buf.Len() == 0 {
			t.Errorf("%s diff does not show current's frames", f)
		}
	}
	if err := WriteDiff(&bytes.Buffer{}, Diff(base, current), "xml", ""); err == nil {
		t.Error("unknown format accepted")
	}
}

func TestScale(t *testing.T) {
	base, current := diffTestProfiles()
	s := Scale(base, float64(current.Total())/float64(base.Total()))
	if s.Total() != current.Total() || base.Total() != 4 {
		t.Errorf("scaled total %d, want %d; original now %d", s.Total(), current.Total(), base.Total())
	}
	// 3*0.1 and 1*0.1 both round to 0.
	if got := Scale(base, 0.1); len(got.Samples) != 0 {
		t.Errorf("scaled to %d samples, want counts rounding to 0 dropped", len(got.Samples))
	}
}

func TestInPeriod(t *testing.T) {
	base, _ := diffTestProfiles()
	base.Period = 50 * time.Millisecond
	got := InPeriod(base, 10*time.Millisecond)
	if got.Period != 10*time.Millisecond || got.Total() != 5*base.Total() || base.Period != 50*time.Millisecond {
		t.Errorf("%d samples of %s, want %d of 10ms; original now of %s", got.Total(), got.Period, 5*base.Total(), base.Period)
	}
	if InPeriod(base, base.Period) != base || InPeriod(base, 0) != base {
		t.Error("a profile already in the period, or of no period, was copied")
	}
}

func TestDeltaColour(t *testing.T) {
	for _, tc := range []struct {
		delta, max float64
		want       string
	}{
		{0, 0.5, "#ffffff"},
		{0.5, 0.5, "#ff2d2d"},
		{-0.5, 0.5, "#2d2dff"},
		{1, 0.5, "#ff2d2d"},
		{0.25, 0.5, "#ff9696"},
		{0.1, 0, "#ffffff"},
	} {
		if got := DeltaColour(tc.delta, tc.max); got != tc.want {
			t.Errorf("DeltaColour(%g, %g) = %s, want %s", tc.delta, tc.max, got, tc.want)
		}
	}
}

func TestDiffFlameColoursByChange(t *testing.T) {
	grew := &Location{Frames: []symbol.Frame{{Function: "grew"}}}
	shrank := &Location{Frames: []symbol.Frame{{Function: "shrank"}}}
	sample := func(l *Location, n int64) *Sample {
		return &Sample{Stack: []*Location{l}, Count: n, Labels: map[string]string{LabelComm: "app"}}
	}
	base := &Profile{Samples: []*Sample{sample(grew, 10), sample(shrank, 90)}}
	current := &Profile{Samples: []*Sample{sample(grew, 90), sample(shrank, 10)}}
	root := Diff(base, current).DiffTree().flame()
	fills := map[string]string{}
	var walk func(n *Node)
	walk = func(n *Node) {
		fills[n.Name] = n.Fill
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(root)
	if !strings.HasPrefix(fills["grew"], "#ff") || fills["grew"] == "#ffffff" {
		t.Errorf("grew is %s, want red", fills["grew"])
	}
	if !strings.HasSuffix(fills["shrank"], "ff") || fills["shrank"] == "#ffffff" {
		t.Errorf("shrank is %s, want blue", fills["shrank"])
	}
	var svg strings.Builder
	if err := WriteDiff(&svg, Diff(base, current), FormatSVG, "diff"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(svg.String(), fills["grew"]) {
		t.Error("SVG does not use the diff colours")
	}
}

func TestSplitFolded(t *testing.T) {
	for _, c := range []struct {
		line, stack string
		count       int64
		ok          bool
	}{
		{"comm;main;f 12", "comm;main;f", 12, true},
		{"comm;operator new(unsigned long) 3", "comm;operator new(unsigned long)", 3, true},
		{"comm;main;f", "", 0, false},
		{"comm;main;f x", "comm;main;f", 0, false},
	} {
		stack, count, ok := SplitFolded(c.line)
		if ok != c.ok || ok && (stack != c.stack || count != c.count) {
			t.Errorf("SplitFolded(%q) = %q, %d, %v; want %q, %d, %v", c.line, stack, count, ok, c.stack, c.count, c.ok)
		}
	}
}
