// A flame graph (root at the bottom) or icicle (root at the top) on a
// canvas. Drawing is one pass over the zoomed subtree that skips whole
// subtrees narrower than a pixel fraction, rectangles filled one path per
// colour and text only where it fits, so 100,000 frames draw in a few
// milliseconds. Hit testing searches the frames drawn, row by row.

import { Palette, HIGHLIGHT, deltaColor, frameColors } from './colors';
import { type Flat, delta, kindName } from './tree';
import * as fmt from './format';

const ROW = 18; // px per frame row
const MIN_WIDTH = 0.35; // px: narrower frames (and their callees) are not drawn
const FONT = '11px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace';

export interface FlameOptions {
  /** Called with the frame clicked. */
  onClick?: (i: number) => void;
  /** Total the tooltip's "of all" share is taken against; default the root's. */
  label?: string;
}

export class FlameGraph {
  readonly canvas: HTMLCanvasElement;
  private ctx: CanvasRenderingContext2D;
  private tooltip: HTMLElement;
  private f: Flat | null = null;
  private palette = new Palette();
  private colors: Uint16Array = new Uint16Array(0);
  private highlightId = 0;
  private hit: Uint8Array | null = null;
  private zoom = 0;
  private icicle = false;
  private diffMax = 0;
  // Frames drawn by the last draw, grouped by depth and in x order within
  // a depth: drawn[rowStart[d] .. rowStart[d+1]).
  private drawn = new Int32Array(0);
  private scratch = new Int32Array(0);
  // Rectangles of the last draw: x, width, depth, colour.
  private rectX = new Float64Array(0);
  private rectW = new Float64Array(0);
  private rectD = new Int32Array(0);
  private rectC = new Int32Array(0);
  private rowStart = new Int32Array(0);
  private rows = 0;
  private width = 0;
  private charWidth = 6.6;
  /** lastDrawMs is how long the last draw took. */
  lastDrawMs = 0;

  constructor(
    readonly container: HTMLElement,
    tooltip: HTMLElement,
    private opts: FlameOptions = {},
  ) {
    this.canvas = document.createElement('canvas');
    this.canvas.className = 'flame-canvas';
    container.append(this.canvas);
    this.ctx = this.canvas.getContext('2d')!;
    this.tooltip = tooltip;
    this.canvas.addEventListener('mousemove', (e) => this.hover(e));
    this.canvas.addEventListener('mouseleave', () => this.hideTooltip());
    this.canvas.addEventListener('click', (e) => {
      const i = this.frameAt(e.offsetX, e.offsetY);
      if (i >= 0) this.opts.onClick?.(i);
    });
    new ResizeObserver(() => {
      if (this.container.clientWidth !== this.width) this.draw();
    }).observe(container);
  }

  /** setData shows a new tree; a diff tree is coloured by change. */
  setData(f: Flat | null): void {
    this.f = f;
    this.palette = new Palette();
    this.zoom = 0;
    this.hit = null;
    if (!f) {
      this.draw();
      return;
    }
    if (f.base) {
      this.diffMax = 0;
      for (let i = 1; i < f.n; i++) this.diffMax = Math.max(this.diffMax, Math.abs(delta(f, i)));
      this.colors = new Uint16Array(f.n);
      for (let i = 0; i < f.n; i++) this.colors[i] = this.palette.id(deltaColor(delta(f, i), this.diffMax));
    } else {
      this.colors = frameColors(f, this.palette);
    }
    this.highlightId = this.palette.id(HIGHLIGHT);
  }

  get data(): Flat | null {
    return this.f;
  }

  get zoomed(): number {
    return this.zoom;
  }

  setZoom(i: number): void {
    this.zoom = i;
  }

  setIcicle(on: boolean): void {
    this.icicle = on;
  }

  /** setHighlight marks frames (search matches, a focused function). */
  setHighlight(hit: Uint8Array | null): void {
    this.hit = hit;
  }

  /** draw renders the current data, zoom and highlight. */
  draw(): void {
    const t0 = performance.now();
    const f = this.f;
    const width = (this.width = this.container.clientWidth);
    const dpr = window.devicePixelRatio || 1;
    if (!f || f.total[0] <= 0 || width === 0) {
      this.canvas.width = 0;
      this.canvas.height = 0;
      this.rows = 0;
      return;
    }
    const z = this.zoom;
    const x0 = f.x[z];
    const scale = width / f.total[z];

    // Collect what is drawn: the zoomed frame's ancestors at full width,
    // then its subtree, skipping subtrees too narrow to see.
    if (this.drawn.length < f.n) {
      this.drawn = new Int32Array(f.n);
      this.scratch = new Int32Array(f.n);
    }
    const buf = this.scratch;
    let count = 0;
    for (let a = f.parent[z]; a >= 0; a = f.parent[a]) buf[count++] = a;
    let maxDepth = f.depth[z];
    const end = f.end[z];
    const minTotal = MIN_WIDTH / scale;
    const total = f.total;
    const depth = f.depth;
    for (let i = z; i < end; ) {
      if (total[i] < minTotal) {
        i = f.end[i];
        continue;
      }
      buf[count++] = i;
      if (depth[i] > maxDepth) maxDepth = depth[i];
      i++;
    }
    const rows = (this.rows = maxDepth + 1);

    // Group by depth for hit testing (counting sort keeps x order).
    const rowStart = new Int32Array(rows + 1);
    for (let k = 0; k < count; k++) rowStart[f.depth[buf[k]] + 1]++;
    for (let d = 0; d < rows; d++) rowStart[d + 1] += rowStart[d];
    const fill = rowStart.slice(0, rows);
    for (let k = 0; k < count; k++) this.drawn[fill[f.depth[buf[k]]]++] = buf[k];
    this.rowStart = rowStart;

    const height = rows * ROW;
    this.canvas.style.width = width + 'px';
    this.canvas.style.height = height + 'px';
    this.canvas.width = Math.round(width * dpr);
    this.canvas.height = Math.round(height * dpr);
    const ctx = this.ctx;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);

    // Rectangles snapped to whole pixels, so none is antialiased. Within a
    // row, runs of frames of one colour that touch are merged into one
    // rectangle, and a frame whose pixels are already painted is skipped:
    // a row never needs more rectangles than it has pixels, and 100,000
    // sub-pixel frames become a few thousand fills.
    const rx = this.rectX.length >= count ? this.rectX : (this.rectX = new Float64Array(count));
    const rw = this.rectW.length >= count ? this.rectW : (this.rectW = new Float64Array(count));
    const rd = this.rectD.length >= count ? this.rectD : (this.rectD = new Int32Array(count));
    const rc = this.rectC.length >= count ? this.rectC : (this.rectC = new Int32Array(count));
    const zDepth = depth[z];
    const open = new Int32Array(rows).fill(-1); // per row: its last rectangle
    let nRects = 0;
    for (let k = 0; k < count; k++) {
      const i = buf[k];
      const d = depth[i];
      const anc = d < zDepth;
      const x = anc ? 0 : (f.x[i] - x0) * scale;
      const w = anc ? width : total[i] * scale;
      let a = Math.round(x);
      let b = Math.round(x + w);
      if (b - a >= 3) b--; // a gap between frames wide enough to see it
      else if (b <= a) b = a + 1;
      const c = this.hit && this.hit[i] ? this.highlightId : this.colors[i];
      const last = open[d];
      if (last >= 0) {
        const end = rx[last] + rw[last];
        if (b <= end) continue; // already painted
        if (a < end) a = end;
        if (a === end && rc[last] === c && w < 3) {
          rw[last] = b - rx[last];
          continue;
        }
      }
      rx[nRects] = a;
      rw[nRects] = b - a;
      rd[nRects] = d;
      rc[nRects] = c;
      open[d] = nRects++;
    }
    const nColors = this.palette.colors.length;
    const byColor = new Int32Array(nColors + 1);
    for (let r = 0; r < nRects; r++) byColor[rc[r] + 1]++;
    for (let c = 0; c < nColors; c++) byColor[c + 1] += byColor[c];
    const order = new Int32Array(nRects);
    const next = byColor.slice(0, nColors);
    for (let r = 0; r < nRects; r++) order[next[rc[r]]++] = r;
    for (let c = 0; c < nColors; c++) {
      if (byColor[c] === byColor[c + 1]) continue;
      ctx.fillStyle = this.palette.colors[c];
      for (let k = byColor[c]; k < byColor[c + 1]; k++) {
        const r = order[k];
        ctx.fillRect(rx[r], this.rowY(rd[r]), rw[r], ROW - 1);
      }
    }
    if (f.base) {
      // Unchanged frames are white: outline them against the page.
      ctx.strokeStyle = 'rgba(0, 0, 0, 0.2)';
      ctx.lineWidth = 1;
      ctx.beginPath();
      for (let r = 0; r < nRects; r++) if (rw[r] >= 3) ctx.rect(rx[r] + 0.5, this.rowY(rd[r]) + 0.5, rw[r] - 1, ROW - 2);
      ctx.stroke();
    }
    // Names, where at least three characters fit.
    ctx.font = FONT;
    this.charWidth = ctx.measureText('m').width || this.charWidth;
    ctx.fillStyle = '#1a1a1a';
    ctx.textBaseline = 'middle';
    const minText = this.charWidth * 3 + 6;
    const minTextTotal = minText / scale;
    for (let k = 0; k < count; k++) {
      const i = buf[k];
      const anc = depth[i] < zDepth;
      if (!anc && total[i] < minTextTotal) continue;
      const x = anc ? 0 : (f.x[i] - x0) * scale;
      const w = anc ? width : total[i] * scale;
      const name = f.strings[f.name[i]];
      const fit = Math.floor((w - 6) / this.charWidth);
      const text = name.length <= fit ? name : name.slice(0, fit - 1) + '…';
      ctx.fillText(text, Math.round(x) + 3, this.rowY(depth[i]) + ROW / 2);
    }
    this.lastDrawMs = performance.now() - t0;
    performance.measure('flame-draw', { start: t0, duration: this.lastDrawMs, detail: { frames: count, rects: nRects } });
  }

  /** span is frame i's x and width in CSS pixels; ancestors of the zoomed frame span everything. */
  private span(i: number, x0: number, scale: number, width: number): [number, number] {
    const f = this.f!;
    if (f.depth[i] < f.depth[this.zoom]) return [0, width];
    return [(f.x[i] - x0) * scale, f.total[i] * scale];
  }

  private rowY(depth: number): number {
    return this.icicle ? depth * ROW : (this.rows - 1 - depth) * ROW;
  }

  /** frameAt returns the frame drawn at (x, y) in CSS pixels, or -1. */
  frameAt(x: number, y: number): number {
    const f = this.f;
    if (!f || this.rows === 0) return -1;
    const row = Math.floor(y / ROW);
    const depth = this.icicle ? row : this.rows - 1 - row;
    if (depth < 0 || depth >= this.rows) return -1;
    const scale = this.width / f.total[this.zoom];
    const x0 = f.x[this.zoom];
    let lo = this.rowStart[depth];
    let hi = this.rowStart[depth + 1] - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const i = this.drawn[mid];
      const [fx, w] = this.span(i, x0, scale, this.width);
      if (x < fx) hi = mid - 1;
      else if (x >= fx + Math.max(w, 1)) lo = mid + 1;
      else return i;
    }
    return -1;
  }

  /** rectOf returns the CSS-pixel rectangle of the widest drawn frame named
   * name, relative to the canvas, or null: for tests and keyboard users. */
  rectOf(name: string): { x: number; y: number; w: number; h: number } | null {
    const f = this.f;
    if (!f) return null;
    const scale = this.width / f.total[this.zoom];
    let best: { x: number; y: number; w: number; h: number } | null = null;
    for (let k = 0; k < this.rowStart[this.rows]; k++) {
      const i = this.drawn[k];
      if (f.strings[f.name[i]] !== name) continue;
      const [x, w] = this.span(i, f.x[this.zoom], scale, this.width);
      if (!best || w > best.w) best = { x, y: this.rowY(f.depth[i]), w, h: ROW };
    }
    return best;
  }

  private hover(e: MouseEvent): void {
    const i = this.frameAt(e.offsetX, e.offsetY);
    if (i < 0) {
      this.hideTooltip();
      return;
    }
    this.canvas.style.cursor = 'pointer';
    this.tooltip.innerHTML = this.describe(i);
    this.tooltip.hidden = false;
    const pad = 14;
    const tw = this.tooltip.offsetWidth;
    const th = this.tooltip.offsetHeight;
    let left = e.clientX + pad;
    let top = e.clientY + pad;
    if (left + tw > window.innerWidth - 4) left = Math.max(4, e.clientX - pad - tw);
    if (top + th > window.innerHeight - 4) top = Math.max(4, e.clientY - pad - th);
    this.tooltip.style.left = left + 'px';
    this.tooltip.style.top = top + 'px';
  }

  private hideTooltip(): void {
    this.tooltip.hidden = true;
    this.canvas.style.cursor = '';
  }

  /** describe is the tooltip's HTML for frame i. */
  describe(i: number): string {
    const f = this.f!;
    const e = fmt.escapeHTML;
    const all = f.total[0];
    const lines = [`<div class="tt-name">${e(f.strings[f.name[i]])}</div>`];
    const kind = kindName(f.kind[i]);
    const where: string[] = [kind];
    if (f.module[i] >= 0) where.push(e(f.strings[f.module[i]]));
    lines.push(`<div class="tt-dim">${where.join(' · ')}</div>`);
    if (f.file[i] >= 0) lines.push(`<div class="tt-dim">${e(f.strings[f.file[i]])}${f.line[i] ? ':' + f.line[i] : ''}</div>`);
    if (f.base) {
      const base = f.baseTotal! > 0 ? f.base[i] / f.baseTotal! : 0;
      const cur = all > 0 ? f.total[i] / all : 0;
      const d = cur - base;
      lines.push(
        `<table><tr><td>base</td><td>${fmt.pct(base)}</td><td>${fmt.amount(f.base[i], f.unit)}</td></tr>` +
          `<tr><td>current</td><td>${fmt.pct(cur)}</td><td>${fmt.amount(f.total[i], f.unit)}</td></tr>` +
          `<tr><td>change</td><td class="${d > 0 ? 'grew' : d < 0 ? 'shrank' : ''}">${fmt.signedPct(d)}</td><td>of all ${f.unit === 'ns' ? 'time' : 'samples'}</td></tr></table>`,
      );
    } else {
      const z = this.zoom;
      const ofZoom = z > 0 && f.total[z] > 0 ? ` · ${fmt.pct(f.total[i] / f.total[z])} of zoom` : '';
      lines.push(
        `<table><tr><td>total</td><td>${fmt.pct(f.total[i] / all)}</td><td>${fmt.amount(f.total[i], f.unit)}${ofZoom}</td></tr>` +
          `<tr><td>self</td><td>${fmt.pct(f.self[i] / all)}</td><td>${fmt.amount(f.self[i], f.unit)}</td></tr></table>`,
      );
    }
    lines.push('<div class="tt-dim">click to zoom</div>');
    return lines.join('');
  }
}
