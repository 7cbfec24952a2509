// The top table (functions by self and total samples, sortable) and, for a
// diff, the list of the largest changes.

import type { Sort } from './state';
import type { Row } from './tree';
import * as fmt from './format';

const MAX_ROWS = 500; // a longer table is no use and slows the page

export interface TopOptions {
  sort: Sort;
  focus: string;
  /** Root totals, for shares. */
  total: number;
  /** How the counts read. */
  unit: fmt.Unit;
  baseTotal?: number;
  onSort: (s: Sort) => void;
  onPick: (name: string) => void;
}

function shareOf(n: number, total: number): number {
  return total > 0 ? n / total : 0;
}

/** renderTop fills table with rows sorted by o.sort. */
export function renderTop(table: HTMLTableElement, rows: Row[], o: TopOptions): void {
  const sorted = [...rows].sort((a, b) => {
    if (o.sort === 'name') return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
    const k = o.sort;
    return b[k] - a[k] || b.total - a.total || (a.name < b.name ? -1 : 1);
  });
  const diff = o.baseTotal !== undefined;
  const e = fmt.escapeHTML;
  const head = (key: Sort, label: string, cls = '') =>
    `<th class="${cls} sortable${o.sort === key ? ' sorted' : ''}" data-sort="${key}" aria-sort="${o.sort === key ? (key === 'name' ? 'ascending' : 'descending') : 'none'}" tabindex="0">${label}</th>`;
  let html =
    '<thead><tr>' +
    head('name', 'function') +
    head('self', 'self', 'num') +
    '<th class="num">self %</th>' +
    head('total', 'total', 'num') +
    '<th class="num">total %</th>' +
    (diff ? '<th class="num">change</th>' : '') +
    '</tr></thead><tbody>';
  for (const r of sorted.slice(0, MAX_ROWS)) {
    const cls = (r.name === o.focus ? 'focus ' : '') + (r.kind === 'kernel' ? 'kernel' : '');
    const where = r.file || r.module;
    html +=
      `<tr class="${cls}" data-name="${e(r.name)}" tabindex="0">` +
      `<td class="fn"><span class="fn-name">${e(r.name)}</span>${r.kind === 'kernel' ? ' <span class="tag">kernel</span>' : ''}` +
      (where ? `<span class="fn-where">${e(where)}</span>` : '') +
      `</td><td class="num">${fmt.value(r.self, o.unit)}</td><td class="num">${fmt.pct(shareOf(r.self, o.total))}</td>` +
      `<td class="num">${fmt.value(r.total, o.unit)}</td><td class="num">${fmt.pct(shareOf(r.total, o.total))}</td>`;
    if (diff) {
      const d = shareOf(r.total, o.total) - shareOf(r.baseTotalOf, o.baseTotal!);
      html += `<td class="num ${d > 0 ? 'grew' : d < 0 ? 'shrank' : ''}">${fmt.signedPct(d)}</td>`;
    }
    html += '</tr>';
  }
  html += '</tbody>';
  if (sorted.length > MAX_ROWS) html += `<caption>the first ${MAX_ROWS} of ${fmt.count(sorted.length)} functions</caption>`;
  table.innerHTML = html;
  table.querySelectorAll<HTMLElement>('th.sortable').forEach((th) => {
    const go = () => o.onSort(th.dataset.sort as Sort);
    th.addEventListener('click', go);
    th.addEventListener('keydown', (ev) => ev.key === 'Enter' && go());
  });
  table.querySelectorAll<HTMLElement>('tbody tr').forEach((tr) => {
    const go = () => o.onPick(tr.dataset.name!);
    tr.addEventListener('click', go);
    tr.addEventListener('keydown', (ev) => ev.key === 'Enter' && go());
  });
  table.querySelector('tr.focus')?.scrollIntoView({ block: 'nearest' });
}

/** Change is one function's change of total share in a diff. */
export interface Change {
  name: string;
  base: number;
  current: number;
  delta: number;
}

/** changes lists the functions whose share of all samples changed most. */
export function changes(rows: Row[], total: number, baseTotal: number, n = 15): Change[] {
  return rows
    .map((r) => {
      const base = shareOf(r.baseTotalOf, baseTotal);
      const current = shareOf(r.total, total);
      return { name: r.name, base, current, delta: current - base };
    })
    .filter((c) => c.delta !== 0)
    .sort((a, b) => Math.abs(b.delta) - Math.abs(a.delta) || (a.name < b.name ? -1 : 1))
    .slice(0, n);
}

/** renderChanges fills el with the largest changes. */
export function renderChanges(el: HTMLElement, list: Change[], onPick: (name: string) => void): void {
  const e = fmt.escapeHTML;
  if (list.length === 0) {
    el.innerHTML = '<h3>Top changes</h3><p class="dim">No function changed its share of samples.</p>';
    return;
  }
  el.innerHTML =
    '<h3>Top changes <span class="dim">(share of all samples, base → current)</span></h3><table class="changes"><tbody>' +
    list
      .map(
        (c) =>
          `<tr data-name="${e(c.name)}" tabindex="0"><td class="num ${c.delta > 0 ? 'grew' : 'shrank'}">${fmt.signedPct(c.delta)}</td>` +
          `<td class="fn"><span class="fn-name">${e(c.name)}</span></td><td class="num dim">${fmt.pct(c.base)} → ${fmt.pct(c.current)}</td></tr>`,
      )
      .join('') +
    '</tbody></table>';
  el.querySelectorAll<HTMLElement>('tr[data-name]').forEach((tr) => tr.addEventListener('click', () => onPick(tr.dataset.name!)));
}
