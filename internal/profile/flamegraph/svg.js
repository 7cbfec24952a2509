// svg.js makes a flint SVG flame graph interactive: click a frame to zoom,
// Reset Zoom, Search (or Ctrl-F) by regular expression, and the hovered
// frame's details in the status line. WriteSVG nests each frame's children
// inside its <g>, so a frame's descendants are its DOM descendants, and
// writes each <g> as <title>, <rect>, then an optional <text>.
(function () {
  "use strict";
  var SVGNS = "http://www.w3.org/2000/svg";
  // Font metrics and inset as in svg.go's svgCharWidth and svgTextPad.
  var CHAR_WIDTH = 7.08, TEXT_PAD = 3;
  var MATCH_FILL = "#e600e6";

  var framesEl = document.getElementById("frames");
  var details = document.getElementById("details");
  var unzoomEl = document.getElementById("unzoom");
  var searchEl = document.getElementById("search");
  var matchedEl = document.getElementById("matched");

  // One record per frame, in document order (parents before children),
  // holding the frame's geometry as written so zoom can always be undone.
  var frames = [];
  var gs = framesEl.getElementsByTagName("g");
  for (var i = 0; i < gs.length; i++) {
    var g = gs[i];
    var rect = g.getElementsByTagName("rect")[0];
    var text = rect.nextElementSibling;
    if (text && text.tagName !== "text") text = null;
    var f = {
      g: g, rect: rect, text: text,
      x: +rect.getAttribute("x"), w: +rect.getAttribute("width"),
      y: +rect.getAttribute("y"), fill: rect.getAttribute("fill"),
      info: null, matched: false
    };
    g.fg = f;
    frames.push(f);
  }
  if (!frames.length) return;
  var root = frames[0];
  var zoomed = null;
  var searching = false;

  // info parses the tooltip lazily: "name (1,234 samples, 5.67%)", then
  // optional file:line and module lines.
  function info(f) {
    if (f.info) return f.info;
    var lines = f.g.getElementsByTagName("title")[0].textContent.split("\n");
    var m = /^(.*) \(([\d,]+) samples?, [\d.]+%\)$/.exec(lines[0]);
    f.info = {
      name: m ? m[1] : lines[0],
      samples: m ? parseInt(m[2].replace(/,/g, ""), 10) : 0,
      lines: lines
    };
    return f.info;
  }

  // label clips a name as svg.go's fitLabel does.
  function label(name, width) {
    var fit = Math.floor((width - 2 * TEXT_PAD) / CHAR_WIDTH + 1e-9);
    if (fit < 3) return "";
    var chars = Array.from(name);
    if (chars.length <= fit) return name;
    return chars.slice(0, fit - 2).join("") + "..";
  }

  function place(f, x, w) {
    f.rect.setAttribute("x", x.toFixed(2));
    f.rect.setAttribute("width", w.toFixed(2));
    var s = label(info(f).name, w);
    if (!f.text) {
      if (!s) return;
      // Frames too narrow for a label were written without a <text>.
      f.text = document.createElementNS(SVGNS, "text");
      f.text.setAttribute("y", (f.y + 11.5).toFixed(2));
      f.g.insertBefore(f.text, f.rect.nextSibling);
    }
    f.text.setAttribute("x", (x + TEXT_PAD).toFixed(2));
    f.text.textContent = s;
  }

  // zoom widens t to the full width; its ancestors span the full width too,
  // dimmed, and everything else is hidden. Zooming the root resets.
  function zoom(t) {
    if (t === root) return unzoom();
    zoomed = t;
    unzoomEl.classList.remove("hide");
    var scale = root.w / t.w;
    for (var i = 0; i < frames.length; i++) {
      var f = frames[i];
      if (t.g.contains(f.g)) {
        f.g.classList.remove("parent", "hide");
        place(f, root.x + (f.x - t.x) * scale, f.w * scale);
      } else if (f.g.contains(t.g)) {
        f.g.classList.remove("hide");
        f.g.classList.add("parent");
        place(f, root.x, root.w);
      } else {
        f.g.classList.add("hide");
      }
    }
  }

  function unzoom() {
    if (!zoomed) return;
    zoomed = null;
    unzoomEl.classList.add("hide");
    for (var i = 0; i < frames.length; i++) {
      var f = frames[i];
      f.g.classList.remove("parent", "hide");
      place(f, f.x, f.w);
    }
  }

  // search highlights frames whose name matches re and shows the share of
  // all samples they cover. A match inside another match is not counted
  // again, so the share never exceeds 100%.
  function search(re) {
    var total = 0;
    for (var i = 0; i < frames.length; i++) {
      var f = frames[i];
      f.matched = re.test(info(f).name);
      f.rect.setAttribute("fill", f.matched ? MATCH_FILL : f.fill);
      if (f.matched && !matchedAncestor(f)) total += info(f).samples;
    }
    searching = true;
    searchEl.textContent = "Reset Search";
    var all = info(root).samples;
    matchedEl.textContent = "Matched: " + (all ? (100 * total / all).toFixed(1) : "0") + "%";
  }

  function matchedAncestor(f) {
    for (var p = f.g.parentNode; p && p !== framesEl; p = p.parentNode) {
      if (p.fg && p.fg.matched) return true;
    }
    return false;
  }

  function resetSearch() {
    for (var i = 0; i < frames.length; i++) {
      frames[i].matched = false;
      frames[i].rect.setAttribute("fill", frames[i].fill);
    }
    searching = false;
    searchEl.textContent = "Search";
    matchedEl.textContent = " ";
  }

  function promptSearch() {
    var term = window.prompt("Search for a function (regular expression, e.g. ^runtime\\.)", "");
    if (!term) return;
    var re;
    try {
      re = new RegExp(term);
    } catch (e) {
      // Not a valid regular expression: match it literally instead.
      re = new RegExp(term.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
    }
    search(re);
  }

  framesEl.addEventListener("click", function (e) {
    var g = e.target.closest("g");
    if (g && g.fg) zoom(g.fg);
  });
  framesEl.addEventListener("mouseover", function (e) {
    var g = e.target.closest("g");
    if (g && g.fg) details.textContent = info(g.fg).lines.join("  |  ");
  });
  framesEl.addEventListener("mouseout", function () {
    details.textContent = " ";
  });
  unzoomEl.addEventListener("click", unzoom);
  searchEl.addEventListener("click", function () {
    if (searching) resetSearch(); else promptSearch();
  });
  window.addEventListener("keydown", function (e) {
    if ((e.ctrlKey || e.metaKey) && (e.key === "f" || e.key === "F")) {
      e.preventDefault(); // the browser's find cannot see clipped labels
      promptSearch();
    } else if (e.key === "Escape") {
      unzoom();
      resetSearch();
    }
  });
})();
