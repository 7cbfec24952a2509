package profile

import (
	"bufio"
	_ "embed"
	"fmt"
	"io"
	"math"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// SVG layout, in pixels. flamegraph/svg.js reads the frame geometry from the
// root frame and uses the same font metrics, so change them together.
const (
	svgWidth       = 1200
	svgPad         = 10   // left and right margin
	svgTop         = 60   // room for the title, subtitle and controls
	svgBottom      = 34   // room for the status line
	svgFrameHeight = 16   // one stack level; rects are 1 px shorter to leave a gap
	svgMinWidth    = 0.1  // narrower frames are not drawn: invisible, but they cost bytes
	svgFontSize    = 12   // px
	svgCharWidth   = 7.08 // average Verdana advance at 12 px (0.59 em), for clipping labels
	svgTextPad     = 3    // label inset from the frame's left edge
)

//go:embed flamegraph/svg.js
var svgScript string

// svgStyle dims the ancestors of a zoomed frame (class "parent") and hides
// controls that do not apply (class "hide").
const svgStyle = `text { font-family: Verdana, sans-serif; font-size: 12px; fill: #000; }
#title { font-size: 17px; text-anchor: middle; }
#subtitle { fill: #555; text-anchor: middle; }
#unzoom, #search { cursor: pointer; }
#search, #matched { text-anchor: end; }
#frames g { cursor: pointer; }
#frames g:hover > rect { stroke: #000; stroke-width: 0.5; }
#frames text { pointer-events: none; }
.parent > rect, .parent > text { opacity: 0.5; }
.hide { display: none; }
`

// WriteSVG writes the tree as a self-contained interactive flame graph in
// SVG, root at the bottom, in the style of Brendan Gregg's flamegraph.pl.
// Each frame is a <g> holding a <title> tooltip, a <rect> and a label clipped
// to fit; a frame's children are nested inside its <g>. Frames narrower than
// 0.1 px are not drawn (the subtitle says how many), which bounds the output
// at about 11,800 frames per stack level however large the tree. The
// embedded script zooms on click, searches by regular expression (Search or
// Ctrl-F) and shows the hovered frame in the status line. Names are made
// valid UTF-8 XML: bytes XML cannot hold become U+FFFD.
func WriteSVG(w io.Writer, root *Node, title string) error {
	if root == nil {
		root = &Node{Name: "all", Kind: KindRoot}
	}
	l := svgLayout{scale: float64(svgWidth-2*svgPad) / float64(root.Total)}
	if root.Total > 0 {
		l.measure(root, 0)
	}
	height := svgTop + (l.depth+1)*svgFrameHeight + svgBottom
	l.bottom = float64(height - svgBottom)
	l.total = root.Total
	l.unit = root.Unit

	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<svg version="1.1" width="%d" height="%d" viewBox="0 0 %d %d" xmlns="http://www.w3.org/2000/svg">
<!-- flint flame graph: %d frames drawn, %d narrower than %g px left out -->
<style>
%s</style>
<defs><linearGradient id="bg" x1="0" y1="0" x2="0" y2="1"><stop offset="5%%" stop-color="#eeeeee"/><stop offset="95%%" stop-color="#eeeeb0"/></linearGradient></defs>
<rect width="100%%" height="100%%" fill="url(#bg)"/>
`, svgWidth, height, svgWidth, height, l.drawn, l.pruned, svgMinWidth, svgStyle)
	fmt.Fprintf(b, "<text id=\"title\" x=\"%d\" y=\"24\">%s</text>\n", svgWidth/2, xmlEscape(title))
	subtitle := "no samples"
	if root.Total > 0 {
		subtitle = amount(root.Total, root.Unit)
		if l.pruned > 0 {
			subtitle += fmt.Sprintf("; %s narrower than %g px not drawn", plural(int64(l.pruned), "frame"), svgMinWidth)
		}
	}
	fmt.Fprintf(b, "<text id=\"subtitle\" x=\"%d\" y=\"42\">%s</text>\n", svgWidth/2, xmlEscape(subtitle))
	fmt.Fprintf(b, "<text id=\"unzoom\" class=\"hide\" x=\"%d\" y=\"24\">Reset Zoom</text>\n", svgPad)
	fmt.Fprintf(b, "<text id=\"search\" x=\"%d\" y=\"24\">Search</text>\n", svgWidth-svgPad)
	fmt.Fprintf(b, "<text id=\"details\" x=\"%d\" y=\"%d\"> </text>\n", svgPad, height-12)
	fmt.Fprintf(b, "<text id=\"matched\" x=\"%d\" y=\"%d\"> </text>\n", svgWidth-svgPad, height-12)
	b.WriteString("<g id=\"frames\">\n")
	if root.Total > 0 {
		l.write(b, root, 0, 0)
	}
	b.WriteString("</g>\n<script type=\"text/ecmascript\"><![CDATA[\n")
	b.WriteString(svgScript)
	b.WriteString("]]></script>\n</svg>\n")
	if err := b.Flush(); err != nil {
		return fmt.Errorf("write svg: %w", err)
	}
	return nil
}

// svgLayout places frames: x from the samples left of a frame, y from its
// depth, with the root's row at the bottom.
type svgLayout struct {
	scale         float64 // px per sample
	total         int64   // root samples, for percentages
	unit          string  // the root's Unit
	bottom        float64 // y of the root row's bottom edge
	depth         int     // deepest drawn level
	drawn, pruned int
}

// measure finds the deepest drawn level and counts drawn and pruned frames.
func (l *svgLayout) measure(n *Node, depth int) {
	l.drawn++
	l.depth = max(l.depth, depth)
	for _, c := range n.Children {
		if float64(c.Total)*l.scale < svgMinWidth {
			l.pruned += countNodes(c)
		} else {
			l.measure(c, depth+1)
		}
	}
}

func countNodes(n *Node) int {
	k := 1
	for _, c := range n.Children {
		k += countNodes(c)
	}
	return k
}

// write writes n, which starts start samples from the left, and its drawn
// descendants nested inside its <g>.
func (l *svgLayout) write(b *bufio.Writer, n *Node, depth int, start int64) {
	x := svgPad + float64(start)*l.scale
	w := float64(n.Total) * l.scale
	y := l.bottom - float64((depth+1)*svgFrameHeight)
	b.WriteString("<g><title>")
	b.WriteString(xmlEscape(n.Name))
	fmt.Fprintf(b, " (%s, %.2f%%)", amount(n.Total, l.unit), 100*float64(n.Total)/float64(l.total))
	if n.File != "" {
		b.WriteByte('\n')
		b.WriteString(xmlEscape(n.File))
		if n.Line > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(n.Line))
		}
	}
	if n.Module != "" {
		b.WriteByte('\n')
		b.WriteString(xmlEscape(n.Module))
	}
	fmt.Fprintf(b, "</title><rect x=\"%s\" y=\"%s\" width=\"%s\" height=\"%d\" fill=\"%s\" rx=\"2\"/>",
		px(x), px(y), px(w), svgFrameHeight-1, frameColour(n))
	// Labels are cut from the escaped name's source, not the escaped text,
	// so an entity is never split.
	if label := fitLabel(xmlClean(n.Name), w); label != "" {
		fmt.Fprintf(b, "<text x=\"%s\" y=\"%s\">%s</text>", px(x+svgTextPad), px(y+svgFrameHeight-4.5), xmlEscape(label))
	}
	b.WriteByte('\n')
	for _, c := range n.Children {
		if float64(c.Total)*l.scale >= svgMinWidth {
			l.write(b, c, depth+1, start)
		}
		start += c.Total
	}
	b.WriteString("</g>\n")
}

// fitLabel clips name to the characters that fit in a frame width px wide,
// marking a cut with "..", or returns "" when fewer than three fit.
// flamegraph/svg.js clips the same way when zooming.
func fitLabel(name string, width float64) string {
	// The epsilon keeps a width computed as n characters from rounding down to n-1.
	fit := int((width-2*svgTextPad)/svgCharWidth + 1e-9)
	if fit < 3 {
		return ""
	}
	if utf8.RuneCountInString(name) <= fit {
		return name
	}
	r := []rune(name)
	return string(r[:fit-2]) + ".."
}

// px formats a coordinate with at most two decimals, which is finer than
// the 0.1 px pruning limit.
func px(v float64) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// amount formats a count of a tree whose root has unit: samples, or for
// "ns" a duration ("1.5s").
func amount(n int64, unit string) string {
	if unit == "ns" {
		return time.Duration(n).Round(time.Microsecond).String()
	}
	return plural(n, "sample")
}

// plural formats n with thousands separators and the noun, pluralised.
func plural(n int64, noun string) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	b.WriteByte(' ')
	b.WriteString(noun)
	if n != 1 {
		b.WriteByte('s')
	}
	return b.String()
}

// xmlClean makes s printable text that XML 1.0 can hold: invalid UTF-8,
// control characters (a name is one line) and code points outside XML's
// Char production become U+FFFD. encoding/json makes the same replacement
// for invalid UTF-8, so SVG and HTML agree on names and colours.
func xmlClean(s string) string {
	ok := true
	for _, r := range s {
		if !xmlPrintable(r) {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if !xmlPrintable(r) {
			r = utf8.RuneError
		}
		b.WriteRune(r)
	}
	return b.String()
}

func xmlPrintable(r rune) bool {
	switch {
	case r == utf8.RuneError: // also how range reports a byte that is not UTF-8
		return true
	case r < 0x20 || r == 0x7f:
		return false
	case r >= 0xd800 && r <= 0xdfff, r == 0xfffe, r == 0xffff:
		return false
	}
	return r <= utf8.MaxRune
}

var xmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")

// xmlEscape makes s safe as XML character data and in a double-quoted
// attribute.
func xmlEscape(s string) string {
	return xmlEscaper.Replace(xmlClean(s))
}

// frameColour picks a frame's fill, matching colour() in
// flamegraph/flame.js: user frames warm, one hue per package so a library
// reads as one family, varied in lightness per function; inlined frames
// aqua; kernel frames ochre; processes and the root grey.
func frameColour(n *Node) string {
	if n.Fill != "" {
		return n.Fill
	}
	h, s, l := frameHSL(n)
	return hslHex(h, s, l)
}

// frameHSL returns hue in degrees, saturation and lightness in percent.
func frameHSL(n *Node) (h, s, l float64) {
	fn := nameHash(xmlClean(n.Name))
	u := func(h uint32, shift uint) float64 { return float64((h>>shift)&0xff) / 255 }
	switch n.Kind {
	case KindRoot:
		return 0, 0, 62
	case KindProcess:
		return 0, 0, 70 + 8*u(fn, 0)
	case KindKernel:
		return 40 + 8*u(fn, 0), 60, 40 + 7*u(fn, 8)
	case KindInline:
		return 172 + 16*u(fn, 0), 55, 55 + 10*u(fn, 8)
	}
	pkg := nameHash(colourKey(xmlClean(n.Name), n.Module))
	return math.Mod(350+38*u(pkg, 0), 360), 75 + 15*u(fn, 0), 55 + 10*u(fn, 8)
}

// colourKey is the part of a function name that names its package:
// "net/http" in "net/http.(*conn).serve", "std" in "std::vector<int>::at",
// or else the module's base name, so plain C functions in one library
// share a hue. Argument lists and type parameters are cut first because
// they name other packages.
func colourKey(name, module string) string {
	if i := strings.IndexAny(name, "(<["); i >= 0 {
		name = name[:i]
	}
	if i := strings.Index(name, "::"); i > 0 {
		return name[:i]
	}
	slash := strings.LastIndex(name, "/")
	if i := strings.Index(name[slash+1:], "."); i > 0 {
		return name[:slash+1+i]
	}
	if module != "" {
		return path.Base(module)
	}
	return name
}

// nameHash is 32-bit FNV-1a over the code points of s; flame.js computes
// the same over a JavaScript string's code points.
func nameHash(s string) uint32 {
	h := uint32(2166136261)
	for _, r := range s {
		h ^= uint32(r)
		h *= 16777619
	}
	return h
}

// hslHex converts hue (degrees), saturation and lightness (percent) to
// #rrggbb as CSS hsl() does.
func hslHex(h, s, l float64) string {
	s, l = s/100, l/100
	a := s * math.Min(l, 1-l)
	f := func(n float64) int {
		k := math.Mod(n+h/30, 12)
		v := l - a*math.Max(-1, math.Min(math.Min(k-3, 9-k), 1))
		return int(math.Round(255 * v))
	}
	return fmt.Sprintf("#%02x%02x%02x", f(0), f(8), f(4))
}
