package profile

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// svgFrame is one frame <g> of WriteSVG's output, children nested.
type svgFrame struct {
	Title string `xml:"title"`
	Rect  struct {
		X     float64 `xml:"x,attr"`
		Y     float64 `xml:"y,attr"`
		Width float64 `xml:"width,attr"`
		Fill  string  `xml:"fill,attr"`
	} `xml:"rect"`
	Text     string     `xml:"text"`
	Children []svgFrame `xml:"g"`
}

type svgDoc struct {
	Width  float64 `xml:"width,attr"`
	Height float64 `xml:"height,attr"`
	Texts  []struct {
		ID   string `xml:"id,attr"`
		Text string `xml:",chardata"`
	} `xml:"text"`
	Frames struct {
		Children []svgFrame `xml:"g"`
	} `xml:"g"`
	Script string `xml:"script"`
}

func (d *svgDoc) text(id string) string {
	for _, t := range d.Texts {
		if t.ID == id {
			return t.Text
		}
	}
	return ""
}

// parseSVG decodes an SVG strictly, as a browser's XML parser would.
func parseSVG(t *testing.T, b []byte) *svgDoc {
	t.Helper()
	if !utf8.Valid(b) {
		t.Fatal("svg is not valid UTF-8")
	}
	var doc svgDoc
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = true
	if err := d.Decode(&doc); err != nil {
		t.Fatalf("parse svg: %v", err)
	}
	return &doc
}

// checkFrames walks the tree and the drawn frames together: every frame at
// least svgMinWidth wide is drawn, named by its title, as wide as its share
// of the root and placed right after its drawn and pruned left siblings.
// It returns how many frames it checked.
func checkFrames(t *testing.T, n *Node, f svgFrame, x, scale float64, total int64) int {
	t.Helper()
	if want := xmlClean(n.Name) + " ("; !strings.HasPrefix(f.Title, want) {
		t.Fatalf("frame title %q, want prefix %q", f.Title, want)
	}
	if want := float64(n.Total) * scale; math.Abs(f.Rect.Width-want) > 0.006 {
		t.Errorf("frame %q width %v, want %.3f", n.Name, f.Rect.Width, want)
	}
	if math.Abs(f.Rect.X-x) > 0.006 {
		t.Errorf("frame %q x %v, want %.3f", n.Name, f.Rect.X, x)
	}
	checked := 1
	var drawn []*Node
	var xs []float64
	for _, c := range n.Children {
		if float64(c.Total)*scale >= svgMinWidth {
			drawn = append(drawn, c)
			xs = append(xs, x)
		}
		x += float64(c.Total) * scale
	}
	if len(drawn) != len(f.Children) {
		t.Fatalf("frame %q has %d child frames, want %d", n.Name, len(f.Children), len(drawn))
	}
	for i, c := range drawn {
		if f.Children[i].Rect.Y != f.Rect.Y-svgFrameHeight {
			t.Errorf("frame %q y %v, want one row above its parent's %v", c.Name, f.Children[i].Rect.Y, f.Rect.Y)
		}
		checked += checkFrames(t, c, f.Children[i], xs[i], scale, total)
	}
	return checked
}

func TestWriteSVG(t *testing.T) {
	tests := []struct {
		name  string
		root  *Node
		title string
	}{
		{"profile", flameTestProfile().Tree(), "CPU <profile> & \"more\""},
		{"hostile names", &Node{Name: "all", Kind: KindRoot, Total: 10, Children: []*Node{
			{Name: "proc\x00\x01\t\n", Kind: KindProcess, Total: 10, Children: []*Node{
				{Name: `ns::f<a&b>("x")`, Kind: KindUser, Module: "/lib/<odd>&.so", File: "a\"b.cc", Line: 3, Total: 4, Self: 4},
				{Name: "bad\xff\xfeutf8 \xed\xa0\x80 surrogate \uffff", Kind: KindInline, Total: 3, Self: 3},
				{Name: "]]></script><script>alert(1)</script>", Kind: KindKernel, Total: 2, Self: 2},
				{Name: "", Kind: KindUser, Total: 1, Self: 1},
			}},
		}}, "title\x00\xff"},
		{"random", randomFlameTree(5000), "random"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteSVG(&buf, tt.root, tt.title); err != nil {
				t.Fatal(err)
			}
			doc := parseSVG(t, buf.Bytes())
			if doc.Width != svgWidth {
				t.Errorf("width %v, want %d", doc.Width, svgWidth)
			}
			if got, want := doc.text("title"), xmlClean(tt.title); got != want {
				t.Errorf("title %q, want %q", got, want)
			}
			if len(doc.Frames.Children) != 1 {
				t.Fatalf("got %d root frames, want 1", len(doc.Frames.Children))
			}
			scale := float64(svgWidth-2*svgPad) / float64(tt.root.Total)
			n := checkFrames(t, tt.root, doc.Frames.Children[0], svgPad, scale, tt.root.Total)
			if !strings.Contains(buf.String(), "<!-- flint flame graph: "+strconv.Itoa(n)+" frames drawn") {
				t.Errorf("comment does not say %d frames drawn", n)
			}
			if !strings.Contains(doc.Script, "function zoom(") {
				t.Errorf("script missing")
			}
		})
	}
}

func TestWriteSVGTooltip(t *testing.T) {
	root := flameTestProfile().Tree()
	var buf bytes.Buffer
	if err := WriteSVG(&buf, root, "t"); err != nil {
		t.Fatal(err)
	}
	doc := parseSVG(t, buf.Bytes())
	titles := map[string]string{}
	var walk func(f svgFrame)
	walk = func(f svgFrame) {
		name, _, _ := strings.Cut(f.Title, " (")
		titles[name] = f.Title
		for _, c := range f.Children {
			walk(c)
		}
	}
	walk(doc.Frames.Children[0])
	tests := []struct{ frame, want string }{
		{"all", "all (105 samples, 100.00%)"},
		{`idle<&>"`, `idle<&>" (10 samples, 9.52%)`},
		{"main.main", "main.main (95 samples, 90.48%)\n/src/app/m.go:10\n/usr/bin/app"},
		{"runtime.nextFreeFast", "runtime.nextFreeFast (60 samples, 57.14%)\n/src/app/r.go:10\n/usr/bin/app"},
	}
	for _, tt := range tests {
		if got := titles[tt.frame]; got != tt.want {
			t.Errorf("title of %q = %q, want %q", tt.frame, got, tt.want)
		}
	}
}

func TestWriteSVGEmpty(t *testing.T) {
	for _, root := range []*Node{nil, {Name: "all", Kind: KindRoot}} {
		var buf bytes.Buffer
		if err := WriteSVG(&buf, root, "empty"); err != nil {
			t.Fatal(err)
		}
		doc := parseSVG(t, buf.Bytes())
		if len(doc.Frames.Children) != 0 || doc.text("subtitle") != "no samples" {
			t.Errorf("empty profile: %d frames, subtitle %q", len(doc.Frames.Children), doc.text("subtitle"))
		}
	}
}

// TestWriteSVGPrunes checks that a tree too wide to draw stays small: of
// 100,000 leaves only those at least 0.1 px wide are written.
func TestWriteSVGPrunes(t *testing.T) {
	proc := &Node{Name: "proc", Kind: KindProcess}
	root := &Node{Name: "all", Kind: KindRoot, Children: []*Node{proc}}
	for i := range 100_000 {
		n := int64(1)
		if i%1000 == 0 {
			n = 1000 // 100 leaves of 5.9 px; the rest are 0.006 px
		}
		proc.Children = append(proc.Children, &Node{Name: "leaf" + strconv.Itoa(i), Kind: KindUser, Self: n, Total: n})
		proc.Total += n
	}
	root.Total = proc.Total
	var buf bytes.Buffer
	if err := WriteSVG(&buf, root, "wide"); err != nil {
		t.Fatal(err)
	}
	if buf.Len() > 5<<20 {
		t.Errorf("svg is %d bytes, want under 5 MiB", buf.Len())
	}
	doc := parseSVG(t, buf.Bytes())
	scale := float64(svgWidth-2*svgPad) / float64(root.Total)
	if n := checkFrames(t, root, doc.Frames.Children[0], svgPad, scale, root.Total); n != 102 {
		t.Errorf("drew %d frames, want 102", n)
	}
	if want := "199,900 samples; 99,900 frames narrower than 0.1 px not drawn"; doc.text("subtitle") != want {
		t.Errorf("subtitle %q, want %q", doc.text("subtitle"), want)
	}
}

func TestWriteSizes(t *testing.T) {
	root := randomFlameTree(100_000)
	for _, w := range []struct {
		name  string
		write func(io.Writer, *Node, string) error
	}{{"svg", WriteSVG}, {"html", WriteHTML}} {
		var buf bytes.Buffer
		if err := w.write(&buf, root, "random"); err != nil {
			t.Fatal(err)
		}
		if buf.Len() > 20<<20 {
			t.Errorf("%s of a 100,000-frame tree is %d bytes, want under 20 MiB", w.name, buf.Len())
		}
		t.Logf("%s of a 100,000-frame tree: %d bytes", w.name, buf.Len())
	}
}

func TestFitLabel(t *testing.T) {
	tests := []struct {
		name  string
		width float64
		want  string
	}{
		{"runtime.mallocgc", 1000, "runtime.mallocgc"},
		{"runtime.mallocgc", 2*svgTextPad + 16*svgCharWidth, "runtime.mallocgc"},
		{"runtime.mallocgc", 2*svgTextPad + 10*svgCharWidth, "runtime..."},
		{"日本語の関数名です", 2*svgTextPad + 5*svgCharWidth, "日本語.."},
		{"runtime.mallocgc", 2*svgTextPad + 3*svgCharWidth, "r.."},
		{"runtime.mallocgc", 2*svgTextPad + 2.9*svgCharWidth, ""},
		{"ab", 0.5, ""},
	}
	for _, tt := range tests {
		if got := fitLabel(tt.name, tt.width); got != tt.want {
			t.Errorf("fitLabel(%q, %v) = %q, want %q", tt.name, tt.width, got, tt.want)
		}
	}
}

func TestFrameColour(t *testing.T) {
	hue := func(n *Node) float64 { h, _, _ := frameHSL(n); return h }
	user := func(name, module string) *Node { return &Node{Name: name, Kind: KindUser, Module: module} }
	tests := []struct {
		name string
		a, b *Node
		same bool // same hue
	}{
		{"one Go package", user("net/http.(*conn).serve", ""), user("net/http.HandlerFunc.ServeHTTP", ""), true},
		{"one C++ namespace", user("std::vector<int>::at(unsigned long)", ""), user("std::sort<foo::T>", ""), true},
		{"one C library", user("malloc", "/lib/libc.so.6"), user("free", "/lib/libc.so.6"), true},
		{"two Go packages", user("net/http.Serve", ""), user("runtime.mallocgc", ""), false},
	}
	for _, tt := range tests {
		if got := hue(tt.a) == hue(tt.b); got != tt.same {
			t.Errorf("%s: same hue = %v, want %v", tt.name, got, tt.same)
		}
	}
	for _, n := range []*Node{user("a", ""), user("zzz.b", ""), user("std::c", "")} {
		if h := hue(n); h > 30 && h < 350 {
			t.Errorf("user frame %q hue %v is not warm", n.Name, h)
		}
	}
	if h := hue(&Node{Name: "f", Kind: KindInline}); h < 170 || h > 190 {
		t.Errorf("inline hue %v, want aqua", h)
	}
	if got := hslHex(0, 100, 50); got != "#ff0000" {
		t.Errorf("hslHex(0, 100, 50) = %s, want #ff0000", got)
	}
	if got := hslHex(180, 100, 25); got != "#008080" {
		t.Errorf("hslHex(180, 100, 25) = %s, want #008080", got)
	}
}

// TestFlamegraphScripts checks the embedded JavaScript parses; it needs
// node, which go test does not.
func TestFlamegraphScripts(t *testing.T) {
	if strings.Contains(svgScript, "]]>") {
		t.Error("svg.js contains ]]>, which would end its CDATA section")
	}
	if strings.Contains(strings.ToLower(htmlScript), "</script") {
		t.Error("flame.js contains </script, which would end its element")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed: cannot check the JavaScript syntax")
	}
	for _, f := range []string{"svg.js", "flame.js"} {
		if out, err := exec.Command(node, "--check", filepath.Join("flamegraph", f)).CombinedOutput(); err != nil {
			t.Errorf("node --check %s: %v\n%s", f, err, out)
		}
	}
}

func BenchmarkWriteSVG(b *testing.B) {
	root := randomFlameTree(100_000)
	for b.Loop() {
		if err := WriteSVG(io.Discard, root, "bench"); err != nil {
			b.Fatal(err)
		}
	}
}

func TestWriteSVGTimeProfile(t *testing.T) {
	p := flameTestProfile()
	p.Kind, p.Period = OffCPU, time.Nanosecond
	for _, s := range p.Samples {
		s.Count *= int64(time.Millisecond)
	}
	var buf bytes.Buffer
	if err := WriteSVG(&buf, p.Tree(), "t"); err != nil {
		t.Fatal(err)
	}
	doc := parseSVG(t, buf.Bytes())
	if got, want := doc.Frames.Children[0].Title, "all (105ms, 100.00%)"; got != want {
		t.Errorf("root title %q, want %q", got, want)
	}
}
