package profile

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"fmt"
	"html"
	"io"
)

var (
	//go:embed flamegraph/flame.css
	htmlStyle string
	//go:embed flamegraph/flame.js
	htmlScript string
)

// WriteHTML writes the tree as a self-contained HTML page that draws an
// interactive flame graph on a canvas: click to zoom (with breadcrumbs back
// out), reset, a flame/icicle toggle, substring or regular-expression search
// with the matched share, a tooltip per frame and a colour legend. The page
// needs no network. The tree is embedded as WriteJSON's JSON in a
// <script type="application/json" id="flint-data">; JSON's escaping of <, >
// and & keeps any name from closing the element.
func WriteHTML(w io.Writer, root *Node, title string) error {
	if root == nil {
		root = &Node{Name: "all", Kind: KindRoot}
	}
	data, err := json.Marshal(root)
	if err != nil {
		return fmt.Errorf("encode tree as json: %w", err)
	}
	t := html.EscapeString(xmlClean(title))
	b := bufio.NewWriter(w)
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n")
	b.WriteString("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n")
	fmt.Fprintf(b, "<title>%s</title>\n<style>\n%s</style>\n</head>\n<body>\n", t, htmlStyle)
	fmt.Fprintf(b, `<header>
<h1>%s</h1>
<div id="summary"></div>
<div class="controls">
<button id="reset" disabled title="Show the whole profile (Esc)">Reset zoom</button>
<button id="orient" title="Flip between flame graph (root at the bottom) and icicle (root at the top)">Icicle</button>
<input id="search" type="search" placeholder="Search functions (Ctrl-F)" spellcheck="false" aria-label="Search functions">
<label title="Treat the search as a JavaScript regular expression"><input id="regex" type="checkbox"> Regex</label>
<span id="matched"></span>
</div>
<nav id="crumbs" aria-label="Zoom path"></nav>
</header>
<main id="chart"><canvas id="canvas"></canvas></main>
<footer>
<div id="legend"></div>
<div class="hint">Click a frame to zoom in, a breadcrumb or Reset zoom to zoom out; Esc resets. Frames narrower than half a pixel are not drawn.</div>
</footer>
<div id="tooltip" hidden></div>
<script type="application/json" id="flint-data">`, t)
	// json.Marshal escapes <, > and & as \u003c etc., so neither "</script"
	// nor "<!--" can appear inside the element.
	b.Write(data)
	b.WriteString("</script>\n<script>\n")
	b.WriteString(htmlScript)
	b.WriteString("</script>\n</body>\n</html>\n")
	if err := b.Flush(); err != nil {
		return fmt.Errorf("write html: %w", err)
	}
	return nil
}
