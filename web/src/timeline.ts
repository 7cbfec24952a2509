// CPUs (or threads) over time, stacked by one label's values, on a
// canvas. Dragging selects a range; a click clears it.

import type { SeriesResponse } from './api';
import * as fmt from './format';

const HEIGHT = 180;
const PAD = { left: 48, right: 12, top: 10, bottom: 22 };

/** seriesColor is the i-th series' colour; "other" is grey. */
export function seriesColor(i: number, other: boolean): string {
  if (other) return 'hsl(0, 0%, 72%)';
  const hues = [212, 28, 140, 350, 265, 48, 185, 320, 95, 5, 235, 160];
  const hue = hues[i % hues.length];
  const light = 52 + 10 * (Math.floor(i / hues.length) % 3);
  return `hsl(${hue}, 62%, ${light}%)`;
}

export interface TimelineOptions {
  /** Called with the range dragged over (Unix seconds), or null when a click clears it. */
  onSelect: (from: number, to: number) => void;
  onClear: () => void;
}

export class Timeline {
  readonly canvas: HTMLCanvasElement;
  private ctx: CanvasRenderingContext2D;
  private data: SeriesResponse | null = null;
  private from = 0;
  private to = 0;
  private stacked: Float64Array[] = []; // cumulative rates, series by series
  private unit: fmt.Unit = '';
  private max = 0;
  private selection: [number, number] | null = null;
  private drag: { x0: number; x1: number } | null = null;
  private hoverX = -1;
  private width = 0;

  constructor(
    readonly container: HTMLElement,
    private tooltip: HTMLElement,
    private opts: TimelineOptions,
  ) {
    this.canvas = document.createElement('canvas');
    this.canvas.className = 'timeline-canvas';
    container.append(this.canvas);
    this.ctx = this.canvas.getContext('2d')!;
    this.canvas.addEventListener('pointerdown', (e) => {
      if (!this.data || e.button !== 0) return;
      this.canvas.setPointerCapture(e.pointerId);
      this.drag = { x0: this.clampX(e.offsetX), x1: this.clampX(e.offsetX) };
    });
    this.canvas.addEventListener('pointermove', (e) => {
      if (this.drag) {
        this.drag.x1 = this.clampX(e.offsetX);
        this.draw();
        return;
      }
      this.hoverX = e.offsetX;
      this.draw();
      this.showTooltip(e);
    });
    this.canvas.addEventListener('pointerup', (e) => {
      const d = this.drag;
      this.drag = null;
      if (!d) return;
      this.canvas.releasePointerCapture(e.pointerId);
      const [a, b] = [Math.min(d.x0, d.x1), Math.max(d.x0, d.x1)];
      if (b - a < 3) {
        if (this.selection) this.opts.onClear();
        this.draw();
        return;
      }
      this.opts.onSelect(this.timeAt(a), this.timeAt(b));
    });
    this.canvas.addEventListener('pointerleave', () => {
      this.hoverX = -1;
      this.tooltip.hidden = true;
      this.draw();
    });
    new ResizeObserver(() => {
      if (this.container.clientWidth !== this.width) this.draw();
    }).observe(container);
  }

  /** setData shows a series response, whose points count in unit, and
   * the selection (Unix seconds, or null). */
  setData(data: SeriesResponse | null, selection: [number, number] | null, unit: fmt.Unit = ''): void {
    this.data = data;
    this.unit = unit;
    this.selection = selection;
    this.stacked = [];
    this.max = 0;
    if (data) {
      this.from = Date.parse(data.from) / 1000;
      this.to = Date.parse(data.to) / 1000;
      const n = data.series[0]?.points.length ?? 0;
      let below = new Float64Array(n);
      for (const s of data.series) {
        const sum = new Float64Array(n);
        for (let k = 0; k < n; k++) sum[k] = below[k] + (s.points[k]?.[1] ?? 0);
        this.stacked.push(sum);
        below = sum;
      }
      for (let k = 0; k < n; k++) this.max = Math.max(this.max, below[k]);
    }
    this.draw();
  }

  /** range is the time range shown, Unix seconds, as the agent widened it. */
  get range(): [number, number] {
    return [this.from, this.to];
  }

  private plotWidth(): number {
    return Math.max(1, this.width - PAD.left - PAD.right);
  }

  private clampX(x: number): number {
    return Math.min(Math.max(x, PAD.left), PAD.left + this.plotWidth());
  }

  private timeAt(x: number): number {
    return this.from + ((x - PAD.left) / this.plotWidth()) * (this.to - this.from);
  }

  private xAt(t: number): number {
    return PAD.left + ((t - this.from) / (this.to - this.from)) * this.plotWidth();
  }

  /** xOf is the x of time t on the canvas, for tests. */
  xOf(t: number): number {
    return this.xAt(t);
  }

  draw(): void {
    const width = (this.width = this.container.clientWidth);
    const dpr = window.devicePixelRatio || 1;
    this.canvas.style.width = width + 'px';
    this.canvas.style.height = HEIGHT + 'px';
    this.canvas.width = Math.round(width * dpr);
    this.canvas.height = Math.round(HEIGHT * dpr);
    const ctx = this.ctx;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, HEIGHT);
    const data = this.data;
    if (!data || width === 0) return;
    const plotH = HEIGHT - PAD.top - PAD.bottom;
    // The axis is nice in what it shows (CPUs, threads), not in counts.
    const scale = fmt.rateScale(this.unit, data.period ?? 0);
    const max = niceMax(this.max * scale || 1) / scale;
    const yAt = (v: number) => PAD.top + plotH - (v / max) * plotH;

    // Grid and axes.
    ctx.font = '11px system-ui, sans-serif';
    ctx.fillStyle = '#666';
    ctx.strokeStyle = '#e6e6e6';
    ctx.lineWidth = 1;
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'right';
    for (let k = 0; k <= 4; k++) {
      const v = (max * k) / 4;
      const y = Math.round(yAt(v)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(PAD.left, y);
      ctx.lineTo(width - PAD.right, y);
      ctx.stroke();
      ctx.fillText(fmt.rate(v * scale), PAD.left - 6, y);
    }
    ctx.textAlign = 'center';
    ctx.textBaseline = 'top';
    const span = this.to - this.from;
    const tick = niceTick(span / Math.max(2, Math.floor(this.plotWidth() / 110)));
    const tz = new Date().getTimezoneOffset() * 60;
    for (let t = Math.ceil((this.from - tz) / tick) * tick + tz; t <= this.to; t += tick) {
      const x = this.xAt(t);
      ctx.fillText(span > 2 * 86400 && tick >= 86400 ? fmt.date(t) : fmt.clock(t, tick < 60), x, HEIGHT - PAD.bottom + 5);
      ctx.beginPath();
      ctx.moveTo(Math.round(x) + 0.5, PAD.top);
      ctx.lineTo(Math.round(x) + 0.5, HEIGHT - PAD.bottom);
      ctx.stroke();
    }

    // Stacked areas, each a step shape: a point covers its whole step.
    const step = data.step;
    for (let s = data.series.length - 1; s >= 0; s--) {
      const top = this.stacked[s];
      const bottom = s > 0 ? this.stacked[s - 1] : null;
      const pts = data.series[s].points;
      ctx.fillStyle = seriesColor(s, !!data.series[s].other);
      ctx.beginPath();
      ctx.moveTo(this.xAt(pts[0][0]), yAt(bottom ? bottom[0] : 0));
      for (let k = 0; k < pts.length; k++) {
        ctx.lineTo(this.xAt(pts[k][0]), yAt(top[k]));
        ctx.lineTo(this.xAt(pts[k][0] + step), yAt(top[k]));
      }
      for (let k = pts.length - 1; k >= 0; k--) {
        const b = bottom ? bottom[k] : 0;
        ctx.lineTo(this.xAt(pts[k][0] + step), yAt(b));
        ctx.lineTo(this.xAt(pts[k][0]), yAt(b));
      }
      ctx.closePath();
      ctx.fill();
    }

    // The selection, or the range being dragged.
    let sel: [number, number] | null = null;
    if (this.drag) sel = [Math.min(this.drag.x0, this.drag.x1), Math.max(this.drag.x0, this.drag.x1)];
    else if (this.selection) sel = [this.clampX(this.xAt(this.selection[0])), this.clampX(this.xAt(this.selection[1]))];
    if (sel) {
      ctx.fillStyle = 'rgba(255, 255, 255, 0.6)';
      ctx.fillRect(PAD.left, PAD.top, sel[0] - PAD.left, plotH);
      ctx.fillRect(sel[1], PAD.top, PAD.left + this.plotWidth() - sel[1], plotH);
      ctx.strokeStyle = '#1f5fbf';
      ctx.lineWidth = 1.5;
      ctx.strokeRect(sel[0], PAD.top, sel[1] - sel[0], plotH);
    }
    if (this.hoverX >= PAD.left && this.hoverX <= PAD.left + this.plotWidth() && !this.drag) {
      ctx.strokeStyle = 'rgba(0, 0, 0, 0.4)';
      ctx.lineWidth = 1;
      ctx.beginPath();
      ctx.moveTo(Math.round(this.hoverX) + 0.5, PAD.top);
      ctx.lineTo(Math.round(this.hoverX) + 0.5, HEIGHT - PAD.bottom);
      ctx.stroke();
    }
  }

  private showTooltip(e: PointerEvent): void {
    const data = this.data;
    if (!data || data.series.length === 0 || e.offsetX < PAD.left || e.offsetX > PAD.left + this.plotWidth()) {
      this.tooltip.hidden = true;
      return;
    }
    const t = this.timeAt(e.offsetX);
    const k = Math.min(data.series[0].points.length - 1, Math.max(0, Math.floor((t - this.from) / data.step)));
    const at = data.series[0].points[k][0];
    const rows = data.series
      .map((s, i) => ({ s, i, v: s.points[k][1] }))
      .filter((r) => r.v > 0)
      .sort((a, b) => b.v - a.v);
    const total = rows.reduce((a, r) => a + r.v, 0);
    const e2 = fmt.escapeHTML;
    let html = `<div class="tt-name">${fmt.dateTime(at)} + ${fmt.duration(data.step)}</div><table>`;
    html += `<tr><td>all</td><td>${fmt.perSecond(total, this.unit, data.period)}</td></tr>`;
    for (const r of rows.slice(0, 8)) {
      const name = r.s.other ? 'other' : r.s.value === '' ? '(no ' + e2(data.by) + ')' : e2(r.s.value);
      html += `<tr><td><span class="swatch" data-color="${r.i}"></span>${name}</td><td>${fmt.perSecond(r.v, this.unit, data.period)}</td></tr>`;
    }
    if (rows.length > 8) html += `<tr><td class="tt-dim">and ${rows.length - 8} more</td><td></td></tr>`;
    html += '</table><div class="tt-dim">drag to select a range</div>';
    this.tooltip.innerHTML = html;
    this.tooltip.querySelectorAll<HTMLElement>('.swatch').forEach((el) => {
      el.style.background = seriesColor(Number(el.dataset.color), !!data.series[Number(el.dataset.color)].other);
    });
    this.tooltip.hidden = false;
    const tw = this.tooltip.offsetWidth;
    let left = e.clientX + 14;
    if (left + tw > window.innerWidth - 4) left = e.clientX - 14 - tw;
    this.tooltip.style.left = left + 'px';
    this.tooltip.style.top = e.clientY + 14 + 'px';
  }
}

/** niceMax rounds v up to 1, 2 or 5 times a power of ten. */
export function niceMax(v: number): number {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

/** niceTick picks a round time interval of at least secs. */
export function niceTick(secs: number): number {
  const ticks = [1, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800];
  for (const t of ticks) if (t >= secs) return t;
  return Math.ceil(secs / 86400) * 86400;
}
