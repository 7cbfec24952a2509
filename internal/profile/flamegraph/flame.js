// flame.js draws the call tree embedded by WriteHTML (the JSON in
// #flint-data, as WriteJSON writes it) as a flame graph on a <canvas>, with
// zoom, breadcrumbs, search, a tooltip and a flame/icicle toggle.
(function () {
  "use strict";
  var FRAME_H = 18;   // px per stack level
  var MIN_W = 0.5;    // narrower frames, and so their children, are not drawn
  var TEXT_PAD = 4;   // label inset, px
  var FONT = "12px Verdana, 'DejaVu Sans', sans-serif";
  var MATCH = "#e600e6";

  var root = JSON.parse(document.getElementById("flint-data").textContent);
  var canvas = document.getElementById("canvas");
  var ctx = canvas.getContext("2d");
  var tooltip = document.getElementById("tooltip");
  var crumbs = document.getElementById("crumbs");
  var resetBtn = document.getElementById("reset");
  var orientBtn = document.getElementById("orient");
  var searchBox = document.getElementById("search");
  var regexBox = document.getElementById("regex");
  var matchedEl = document.getElementById("matched");

  // Link the tree once: parent, depth and start (samples left of the node in
  // the root's coordinates), so layout at any zoom is arithmetic. An explicit
  // stack because a deep tree would overflow recursion.
  var maxDepth = 0, nodeCount = 0;
  root.p = null; root.d = 0; root.s = 0;
  for (var todo = [root]; todo.length;) {
    var n = todo.pop();
    nodeCount++;
    n.dn = clean(n.name);
    if (n.d > maxDepth) maxDepth = n.d;
    var start = n.s;
    var kids = n.children || [];
    for (var i = 0; i < kids.length; i++) {
      var c = kids[i];
      c.p = n; c.d = n.d + 1; c.s = start;
      start += c.total;
      todo.push(c);
    }
  }

  var zoomed = root;   // the frame drawn at full width
  var flame = true;    // root at the bottom; false draws an icicle
  var hovered = null;
  var matcher = null;  // function(name) bool while a search is active
  var rows = [];       // rows[depth]: frames drawn last time, left to right, for hit tests
  var pending = false;

  // clean makes a name printable in one line, as svg.go's xmlClean does, so
  // both outputs show and colour names alike.
  function clean(s) {
    return String(s).replace(/[\u0000-\u001f\u007f\ufffe\uffff]/g, "\ufffd");
  }

  // hash is 32-bit FNV-1a over code points, like svg.go's nameHash.
  function hash(s) {
    var h = 2166136261;
    for (var ch of s) {
      h ^= ch.codePointAt(0);
      h = Math.imul(h, 16777619) >>> 0;
    }
    return h;
  }
  function u(h, shift) { return ((h >>> shift) & 255) / 255; }

  // colourKey mirrors svg.go: the package part of a function name, else the
  // module's base name, so one library reads as one hue family.
  function colourKey(name, module) {
    var i = name.search(/[(<[]/);
    if (i >= 0) name = name.slice(0, i);
    i = name.indexOf("::");
    if (i > 0) return name.slice(0, i);
    var slash = name.lastIndexOf("/");
    i = name.indexOf(".", slash + 1);
    if (i > slash + 1) return name.slice(0, i);
    if (module) {
      var m = module.replace(/\/+$/, "");
      return m.slice(m.lastIndexOf("/") + 1) || "/";
    }
    return name;
  }

  // hsl mirrors svg.go's frameHSL.
  function hsl(n) {
    var fn = hash(n.dn);
    switch (n.kind) {
      case "root": return [0, 0, 62];
      case "process": return [0, 0, 70 + 8 * u(fn, 0)];
      case "kernel": return [40 + 8 * u(fn, 0), 60, 40 + 7 * u(fn, 8)];
      case "inline": return [172 + 16 * u(fn, 0), 55, 55 + 10 * u(fn, 8)];
    }
    var pkg = hash(colourKey(n.dn, n.module || ""));
    return [(350 + 38 * u(pkg, 0)) % 360, 75 + 15 * u(fn, 0), 55 + 10 * u(fn, 8)];
  }
  function colour(n) {
    if (!n.c && n.fill) n.c = n.fill; // diff graphs colour frames by change
    if (!n.c) {
      var c = hsl(n);
      n.c = "hsl(" + c[0].toFixed(1) + "," + c[1].toFixed(1) + "%," + c[2].toFixed(1) + "%)";
    }
    return n.c;
  }

  function fmt(v) { return v.toLocaleString("en-US"); }
  // amount formats a count: samples, or time for a tree in nanoseconds
  // (off-CPU and wall profiles).
  function amount(v) {
    if (root.unit !== "ns") return fmt(v) + " samples";
    if (v >= 1e9) return (v / 1e9).toFixed(3) + " s";
    if (v >= 1e6) return (v / 1e6).toFixed(3) + " ms";
    return (v / 1e3).toFixed(1) + " us";
  }
  function pct(v, of) { return of > 0 ? (100 * v / of).toFixed(2) + "%" : "0%"; }

  // Text measurement is the costly part of a redraw, so each name's width is
  // measured once and labels are cut by proportion before a final check.
  function label(n, w) {
    var avail = w - 2 * TEXT_PAD;
    if (avail < 20) return "";
    if (n.tw === undefined) n.tw = ctx.measureText(n.dn).width;
    if (n.tw <= avail) return n.dn;
    var k = Math.floor(n.dn.length * avail / n.tw);
    var s;
    while (k > 1 && ctx.measureText(s = n.dn.slice(0, k) + "…").width > avail) k--;
    return k > 1 ? s : "";
  }

  function schedule() {
    if (!pending) {
      pending = true;
      requestAnimationFrame(draw);
    }
  }

  function rowY(d) { return flame ? (maxDepth - d) * FRAME_H : d * FRAME_H; }

  function draw() {
    pending = false;
    var width = canvas.clientWidth;
    var height = (maxDepth + 1) * FRAME_H;
    var dpr = window.devicePixelRatio || 1;
    // Resizing a canvas clears it and is slow, so only when the size changed.
    if (canvas.width !== Math.round(width * dpr) || canvas.height !== Math.round(height * dpr)) {
      canvas.width = Math.round(width * dpr);
      canvas.height = Math.round(height * dpr);
      canvas.style.height = height + "px";
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = FONT;
    ctx.textBaseline = "middle";
    rows = [];
    if (!(root.total > 0)) {
      ctx.fillStyle = "#888";
      ctx.fillText("no samples", TEXT_PAD, FRAME_H / 2);
      return;
    }

    // Ancestors of the zoomed frame span the full width, dimmed.
    for (var a = zoomed.p; a; a = a.p) frame(a, 0, width, true);
    // The zoomed subtree, depth first; children are pushed right to left so
    // each row fills left to right, which the hit test relies on.
    var scale = width / zoomed.total;
    var x0 = zoomed.s;
    for (var todo = [zoomed]; todo.length;) {
      var n = todo.pop();
      var w = n.total * scale;
      if (w < MIN_W) continue;
      frame(n, (n.s - x0) * scale, w, false);
      var kids = n.children;
      if (kids) for (var i = kids.length - 1; i >= 0; i--) todo.push(kids[i]);
    }
  }

  function frame(n, x, w, dim) {
    var y = rowY(n.d);
    (rows[n.d] || (rows[n.d] = [])).push({ n: n, x: x, w: w });
    ctx.globalAlpha = dim ? 0.5 : 1;
    ctx.fillStyle = n.m ? MATCH : colour(n);
    // A 1 px gap separates frames wide enough to spare it.
    ctx.fillRect(x, y, w >= 3 ? w - 1 : w, FRAME_H - 1);
    if (n === hovered) {
      ctx.strokeStyle = "#000";
      ctx.lineWidth = 1;
      ctx.strokeRect(x + 0.5, y + 0.5, Math.max(w - 2, 0), FRAME_H - 2);
    }
    var s = label(n, w);
    if (s) {
      ctx.fillStyle = "#000";
      ctx.fillText(s, x + TEXT_PAD, y + FRAME_H / 2);
    }
    ctx.globalAlpha = 1;
  }

  // hit finds the frame drawn under canvas point (x, y) by binary search in
  // its row. A redraw still waiting for its animation frame is done first,
  // or the rows would describe the layout before the last zoom.
  function hit(x, y) {
    if (pending) draw();
    var d = Math.floor(y / FRAME_H);
    if (flame) d = maxDepth - d;
    var row = rows[d];
    if (!row) return null;
    var lo = 0, hi = row.length - 1;
    while (lo <= hi) {
      var mid = (lo + hi) >> 1, r = row[mid];
      if (x < r.x) hi = mid - 1;
      else if (x >= r.x + r.w) lo = mid + 1;
      else return r.n;
    }
    return null;
  }

  function zoom(n) {
    zoomed = n || root;
    resetBtn.disabled = zoomed === root;
    renderCrumbs();
    updateMatched();
    schedule();
  }

  function renderCrumbs() {
    var path = [];
    for (var n = zoomed; n; n = n.p) path.unshift(n);
    crumbs.textContent = "";
    path.forEach(function (n, i) {
      if (i > 0) {
        var sep = document.createElement("span");
        sep.className = "sep";
        sep.textContent = "›";
        crumbs.appendChild(sep);
      }
      var el;
      if (n === zoomed) {
        el = document.createElement("span");
        el.className = "current";
      } else {
        el = document.createElement("button");
        el.addEventListener("click", function () { zoom(n); });
      }
      el.textContent = n.dn;
      el.title = amount(n.total);
      crumbs.appendChild(el);
    });
  }

  // runSearch marks matching frames (n.m) and reports the matched share. A
  // regular expression that does not compile marks the box and matches
  // nothing rather than throwing on every keystroke.
  function runSearch() {
    var q = searchBox.value;
    matcher = null;
    searchBox.classList.remove("invalid");
    if (q) {
      if (regexBox.checked) {
        try {
          var re = new RegExp(q);
          matcher = function (s) { return re.test(s); };
        } catch (e) {
          searchBox.classList.add("invalid");
          matcher = function () { return false; };
        }
      } else {
        var lq = q.toLowerCase();
        matcher = function (s, n) {
          // Lower-casing 100,000 names on every keystroke is most of a search.
          if (n.lc === undefined) n.lc = s.toLowerCase();
          return n.lc.indexOf(lq) >= 0;
        };
      }
    }
    for (var todo = [root]; todo.length;) {
      var n = todo.pop();
      n.m = matcher ? matcher(n.dn, n) : false;
      if (n.children) for (var i = 0; i < n.children.length; i++) todo.push(n.children[i]);
    }
    updateMatched();
    schedule();
  }

  // matchedIn sums the samples under n in matching frames, counting a match
  // nested in another match once, so shares never exceed 100%.
  function matchedIn(n) {
    for (var a = n; a; a = a.p) if (a.m) return n.total;
    var sum = 0;
    for (var todo = [n]; todo.length;) {
      var t = todo.pop();
      if (t.m) { sum += t.total; continue; }
      if (t.children) for (var i = 0; i < t.children.length; i++) todo.push(t.children[i]);
    }
    return sum;
  }

  function updateMatched() {
    if (!matcher) {
      matchedEl.textContent = "";
      return;
    }
    var all = matchedIn(root);
    var s = "Matched: " + (root.total > 0 ? (100 * all / root.total).toFixed(1) : "0") + "%";
    if (zoomed !== root) s += " (" + (100 * matchedIn(zoomed) / zoomed.total).toFixed(1) + "% of zoomed frame)";
    matchedEl.textContent = s;
  }

  var KIND_NAMES = { root: "root", process: "process", user: "user code", inline: "inlined", kernel: "kernel" };

  function showTooltip(n, cx, cy) {
    tooltip.textContent = "";
    function line(text, cls) {
      var div = document.createElement("div");
      if (cls) div.className = cls;
      div.textContent = text;
      tooltip.appendChild(div);
    }
    line(n.dn, "name");
    line(KIND_NAMES[n.kind] || n.kind, "dim");
    var rel = zoomed !== root && n.d >= zoomed.d ? ", " + pct(n.total, zoomed.total) + " of zoomed frame" : "";
    line("Total: " + amount(n.total) + " (" + pct(n.total, root.total) + " of all" + rel + ")");
    line("Self: " + amount(n.self) + " (" + pct(n.self, root.total) + " of all)");
    if (n.file) line(n.file + (n.line ? ":" + n.line : ""), "dim");
    if (n.module) line(n.module, "dim");
    tooltip.hidden = false;
    // Keep the tooltip inside the window, flipping to the cursor's other side.
    var r = tooltip.getBoundingClientRect();
    var x = cx + 14, y = cy + 14;
    if (x + r.width > window.innerWidth) x = Math.max(0, cx - r.width - 14);
    if (y + r.height > window.innerHeight) y = Math.max(0, cy - r.height - 14);
    tooltip.style.left = x + "px";
    tooltip.style.top = y + "px";
  }

  canvas.addEventListener("mousemove", function (e) {
    var n = hit(e.offsetX, e.offsetY);
    if (n !== hovered) {
      hovered = n;
      schedule();
    }
    if (n) showTooltip(n, e.clientX, e.clientY);
    else tooltip.hidden = true;
  });
  canvas.addEventListener("mouseleave", function () {
    hovered = null;
    tooltip.hidden = true;
    schedule();
  });
  canvas.addEventListener("click", function (e) {
    var n = hit(e.offsetX, e.offsetY);
    if (n) zoom(n);
  });
  resetBtn.addEventListener("click", function () { zoom(root); });
  orientBtn.addEventListener("click", function () {
    flame = !flame;
    orientBtn.textContent = flame ? "Icicle" : "Flame";
    schedule();
    scrollToRoot();
  });
  searchBox.addEventListener("input", runSearch);
  regexBox.addEventListener("change", runSearch);
  window.addEventListener("keydown", function (e) {
    if ((e.ctrlKey || e.metaKey) && (e.key === "f" || e.key === "F")) {
      e.preventDefault(); // the browser's find cannot see canvas text
      searchBox.focus();
      searchBox.select();
    } else if (e.key === "Escape") {
      if (document.activeElement === searchBox && searchBox.value) {
        searchBox.value = "";
        runSearch();
      } else {
        zoom(root);
      }
    }
  });
  if (window.ResizeObserver) new ResizeObserver(schedule).observe(canvas);
  else window.addEventListener("resize", schedule);

  // A flame graph's root is at the bottom of a possibly tall canvas; scroll
  // it into view so the widest frames are what the reader sees first.
  function scrollToRoot() {
    window.scrollTo(0, flame ? document.documentElement.scrollHeight : 0);
  }

  function renderLegend() {
    var legend = document.getElementById("legend");
    function item(text, colours, dimmed) {
      var span = document.createElement("span");
      colours.forEach(function (c) {
        var sw = document.createElement("span");
        sw.className = "swatch" + (dimmed ? " dimmed" : "");
        sw.style.background = c;
        span.appendChild(sw);
      });
      span.appendChild(document.createTextNode(" " + text));
      legend.appendChild(span);
    }
    var user = ["runtime.a", "net/http.a", "std::a", "main.a", "libc.a"].map(function (p) {
      return colour({ dn: p, kind: "user" });
    });
    item("user code, one hue per package", user);
    item("inlined", [colour({ dn: "a", kind: "inline" }), colour({ dn: "b", kind: "inline" })]);
    item("kernel", [colour({ dn: "a", kind: "kernel" }), colour({ dn: "b", kind: "kernel" })]);
    item("process", [colour({ dn: "a", kind: "process" })]);
    item("search match", [MATCH]);
    item("above the zoomed frame", [colour({ dn: "a", kind: "process" })], true);
  }

  document.getElementById("summary").textContent =
    amount(root.total || 0) + ", " + fmt(nodeCount) + " frames";
  renderLegend();
  renderCrumbs();
  draw();
  scrollToRoot();
})();
