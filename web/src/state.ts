// The whole view lives in the URL's query string, so a link reproduces it:
// profile type, range, selection, grouping, filters, view, zoom, search,
// comparison.

import type { Unit } from './format';

export type Tab = 'flame' | 'top' | 'sandwich';
export type Sort = 'self' | 'total' | 'name';

/** Compare modes: the period just before, a day or a week earlier, an
 * explicit base range, or another selector over the same range. */
export type Compare = '' | 'prev' | '1d' | '1w' | 'range' | 'sel';

/** Profile types, as the API's type parameter names them: CPU time, time
 * threads waited off the CPU (agents with --off-cpu), or both. */
export type ProfileType = 'cpu' | 'off-cpu' | 'wall';
export const profileTypes: ProfileType[] = ['cpu', 'off-cpu', 'wall'];

export interface State {
  /** What the counts measure. */
  type: ProfileType;
  /** A relative range ("1h": the last hour, following now) or '' when from/to are absolute. */
  range: string;
  /** Absolute range in Unix seconds, used when range is ''. */
  from: number;
  to: number;
  /** The selection dragged on the timeline, Unix seconds; 0: none. */
  sfrom: number;
  sto: number;
  /** The label the timeline is stacked by. */
  by: string;
  /** A label selector, {comm="api",container=~"3f.*"}. */
  sel: string;
  icicle: boolean;
  tab: Tab;
  /** Names from the root's child to the zoomed frame. */
  zoom: string[];
  /** Search text (a regular expression, case-insensitive). */
  q: string;
  /** The function the top table and the sandwich view focus on. */
  fn: string;
  sort: Sort;
  cmp: Compare;
  /** Base range of cmp=range, in the API's time syntax. */
  bfrom: string;
  bto: string;
  /** Base selector of cmp=sel. */
  bsel: string;
}

export const presets = ['5m', '1h', '24h', '7d'];

export function defaults(): State {
  return {
    type: 'cpu', range: '1h', from: 0, to: 0, sfrom: 0, sto: 0, by: 'comm', sel: '', icicle: false, tab: 'flame',
    zoom: [], q: '', fn: '', sort: 'self', cmp: '', bfrom: '', bto: '', bsel: '',
  };
}

const units: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400, w: 604800 };

/** seconds parses a simple duration such as 5m, 1h30m, 7d; NaN when it is not one. */
export function seconds(d: string): number {
  const re = /(\d+(?:\.\d+)?)([smhdw])/gy;
  let total = 0;
  let end = 0;
  for (let m; (m = re.exec(d)); end = re.lastIndex) total += parseFloat(m[1]) * units[m[2]];
  return d !== '' && end === d.length && total > 0 ? total : NaN;
}

// Zoom paths join names with ';', each name with % and ; escaped.
function joinPath(names: string[]): string {
  return names.map((n) => n.replace(/%/g, '%25').replace(/;/g, '%3B')).join(';');
}

function splitPath(s: string): string[] {
  if (s === '') return [];
  return s.split(';').map((n) => n.replace(/%3B/g, ';').replace(/%25/g, '%'));
}

function num(v: string | null): number {
  const n = v === null ? NaN : Number(v);
  return isFinite(n) && n > 0 ? n : 0;
}

/** parse reads the state from a query string; what is missing or invalid takes its default. */
export function parse(search: string): State {
  const p = new URLSearchParams(search);
  const s = defaults();
  const type = p.get('type');
  if (profileTypes.includes(type as ProfileType)) s.type = type as ProfileType;
  const range = p.get('range');
  const from = num(p.get('from'));
  const to = num(p.get('to'));
  if (range !== null && !isNaN(seconds(range))) s.range = range;
  else if (from > 0 && to > from) {
    s.range = '';
    s.from = from;
    s.to = to;
  }
  const sfrom = num(p.get('sfrom'));
  const sto = num(p.get('sto'));
  if (sfrom > 0 && sto > sfrom) {
    s.sfrom = sfrom;
    s.sto = sto;
  }
  s.by = p.get('by') || s.by;
  s.sel = p.get('sel') ?? '';
  s.icicle = p.get('view') === 'icicle';
  const tab = p.get('tab');
  if (tab === 'top' || tab === 'sandwich') s.tab = tab;
  s.zoom = splitPath(p.get('zoom') ?? '');
  s.q = p.get('q') ?? '';
  s.fn = p.get('fn') ?? '';
  const sort = p.get('sort');
  if (sort === 'total' || sort === 'name') s.sort = sort;
  const cmp = p.get('cmp');
  if (cmp === 'prev' || cmp === '1d' || cmp === '1w' || cmp === 'range' || cmp === 'sel') s.cmp = cmp;
  s.bfrom = p.get('bfrom') ?? '';
  s.bto = p.get('bto') ?? '';
  s.bsel = p.get('bsel') ?? '';
  return s;
}

/** format writes the state as a query string, leaving out defaults. */
export function format(s: State): string {
  const d = defaults();
  const p = new URLSearchParams();
  if (s.type !== d.type) p.set('type', s.type);
  if (s.range !== '') {
    if (s.range !== d.range) p.set('range', s.range);
  } else {
    p.set('from', String(s.from));
    p.set('to', String(s.to));
  }
  if (s.sfrom > 0) {
    p.set('sfrom', String(s.sfrom));
    p.set('sto', String(s.sto));
  }
  if (s.by !== d.by) p.set('by', s.by);
  if (s.sel !== '') p.set('sel', s.sel);
  if (s.icicle) p.set('view', 'icicle');
  if (s.tab !== d.tab) p.set('tab', s.tab);
  if (s.zoom.length > 0) p.set('zoom', joinPath(s.zoom));
  if (s.q !== '') p.set('q', s.q);
  if (s.fn !== '') p.set('fn', s.fn);
  if (s.sort !== d.sort) p.set('sort', s.sort);
  if (s.cmp !== '') p.set('cmp', s.cmp);
  if (s.cmp === 'range') {
    p.set('bfrom', s.bfrom);
    p.set('bto', s.bto);
  }
  if (s.cmp === 'sel') p.set('bsel', s.bsel);
  const q = p.toString();
  return q ? '?' + q : '';
}

/** Range is a time range in the API's syntax. */
export interface Range {
  from: string;
  to: string;
}

/** unitOf is how the counts of a profile type read: samples for CPU,
 * nanoseconds for off-CPU and wall time. */
export function unitOf(t: ProfileType): Unit {
  return t === 'cpu' ? '' : 'ns';
}

/** typeParam is the API's type parameter for the state: '' (left out)
 * for CPU, which every agent and server answers without one. */
export function typeParam(s: State): string {
  return s.type === 'cpu' ? '' : s.type;
}

/** timelineRange is the range the timeline shows. */
export function timelineRange(s: State): Range {
  if (s.range !== '') return { from: 'now-' + s.range, to: 'now' };
  return { from: String(s.from), to: String(s.to) };
}

/** profileRange is the range profiles are taken over: the selection, or the whole timeline. */
export function profileRange(s: State): Range {
  if (s.sfrom > 0) return { from: String(s.sfrom), to: String(s.sto) };
  return timelineRange(s);
}

/** rangeSeconds is the length of the profile range in seconds. */
export function rangeSeconds(s: State): number {
  if (s.sfrom > 0) return s.sto - s.sfrom;
  if (s.range !== '') return seconds(s.range);
  return s.to - s.from;
}

/** shift moves an API time back by secs. */
function shift(t: string, secs: number): string {
  if (t === 'now') return `now-${secs}s`;
  const m = /^now-(.+)$/.exec(t);
  if (m) return `now-${seconds(m[1]) + secs}s`;
  return String(Number(t) - secs);
}

/** diffParams are the parameters /api/v1/diff takes for the state's comparison. */
export function diffParams(s: State): Record<string, string> {
  const r = profileRange(s);
  const p: Record<string, string> = { from: r.from, to: r.to, selector: s.sel, normalize: 'true' };
  if (s.type !== 'cpu') p.type = s.type;
  switch (s.cmp) {
    case '1d':
    case '1w': {
      const secs = seconds(s.cmp);
      p.base_from = shift(r.from, secs);
      p.base_to = shift(r.to, secs);
      break;
    }
    case 'range':
      p.base_from = s.bfrom;
      p.base_to = s.bto;
      break;
    case 'sel':
      p.base_from = r.from;
      p.base_to = r.to;
      p.base_selector = s.bsel;
      break;
    // prev: the API's default, the period of the same length just before.
  }
  return p;
}

/** compareText describes the base of the comparison in words. */
export function compareText(s: State): string {
  const len = rangeSeconds(s);
  switch (s.cmp) {
    case 'prev':
      return 'the period of the same length just before';
    case '1d':
      return 'the same period a day earlier';
    case '1w':
      return 'the same period a week earlier';
    case 'range':
      return `${s.bfrom || '?'} to ${s.bto || '?'}`;
    case 'sel':
      return `${s.bsel || 'everything'} over the same ${isFinite(len) ? 'range' : 'period'}`;
  }
  return '';
}

// Selectors: {name op "value", ...}, as internal/selector reads them.

export type Op = '=' | '!=' | '=~' | '!~';

export interface Matcher {
  name: string;
  op: Op;
  value: string;
}

/** parseSelector reads the selectors formatSelector writes; null when s is not one. */
export function parseSelector(s: string): Matcher[] | null {
  s = s.trim();
  if (s === '' || s === '{}') return [];
  if (!s.startsWith('{') || !s.endsWith('}')) return null;
  const re = /\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(,|$)/y;
  const body = s.slice(1, -1);
  const out: Matcher[] = [];
  let m;
  while (re.lastIndex < body.length && (m = re.exec(body))) {
    let value: string;
    try {
      value = JSON.parse('"' + m[3] + '"');
    } catch {
      return null;
    }
    out.push({ name: m[1], op: m[2] as Op, value });
    if (m[4] === '') break;
  }
  return re.lastIndex === body.length ? out : null;
}

/** formatSelector writes matchers as a selector; [] is ''. */
export function formatSelector(ms: Matcher[]): string {
  if (ms.length === 0) return '';
  return '{' + ms.map((m) => m.name + m.op + JSON.stringify(m.value)).join(',') + '}';
}

/** seriesStep is the step for a range of secs: at most points points
 * (the timeline's 300 by default), and a multiple of 10 s, so the agent's
 * 10 s windows (or any window dividing 10 s) fall evenly into steps instead
 * of alternating between one and two windows a step. */
export function seriesStep(secs: number, points = 300): number {
  const steps = [10, 20, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  for (const s of steps) if (secs / s <= points) return s;
  return Math.ceil(secs / points / 86400) * 86400;
}

/** timelineSeconds is the length of the timeline's range. */
export function timelineSeconds(s: State): number {
  return s.range !== '' ? seconds(s.range) : s.to - s.from;
}

// Nodes: the node picker edits the selector's node matcher, node="a" for
// one node and node=~"a|b" for several, leaving the other matchers as they are.

// The characters RE2 gives a meaning to.
const reMeta = /[\\.+*?()|[\]{}^$]/;

/** escapeRegex quotes s for a regular expression of the selector (RE2). */
export function escapeRegex(s: string): string {
  return s.replace(new RegExp(reMeta.source, 'g'), '\\$&');
}

/** literalAlternatives reads a=~ value that is only quoted literals joined
 * by |, as escapeRegex and withNodes write it; null when it is any other regex. */
function literalAlternatives(re: string): string[] | null {
  const out: string[] = [];
  let cur = '';
  for (let i = 0; i < re.length; i++) {
    const c = re[i];
    if (c === '\\') {
      const next = re[i + 1];
      if (next === undefined || !reMeta.test(next)) return null;
      cur += next;
      i++;
    } else if (c === '|') {
      out.push(cur);
      cur = '';
    } else if (reMeta.test(c)) {
      return null;
    } else {
      cur += c;
    }
  }
  out.push(cur);
  return out.some((v) => v === '') ? null : out;
}

/** nodesOf is the nodes the selector keeps: [] for every node, null when
 * its node matchers say something a list cannot (a pattern, a negation,
 * several matchers) or the selector cannot be read. */
export function nodesOf(sel: string): string[] | null {
  const ms = parseSelector(sel);
  if (ms === null) return null;
  const nm = ms.filter((m) => m.name === 'node');
  if (nm.length === 0) return [];
  if (nm.length > 1) return null;
  const m = nm[0];
  if (m.op === '=') return m.value === '' ? null : [m.value];
  if (m.op === '=~') return literalAlternatives(m.value);
  return null;
}

/** withNodes returns sel keeping only the given nodes (every node for []):
 * its node matchers are replaced by one, of the nodes sorted, where the
 * first of them was; null
 * when sel cannot be read. */
export function withNodes(sel: string, nodes: string[]): string | null {
  const ms = parseSelector(sel);
  if (ms === null) return null;
  const at = ms.findIndex((m) => m.name === 'node');
  const rest = ms.filter((m) => m.name !== 'node');
  const uniq = [...new Set(nodes)].sort(); // one link per set of nodes
  if (uniq.length === 0) return formatSelector(rest);
  const m: Matcher = uniq.length === 1 ? { name: 'node', op: '=', value: uniq[0] } : { name: 'node', op: '=~', value: uniq.map(escapeRegex).join('|') };
  rest.splice(at < 0 ? rest.length : at, 0, m);
  return formatSelector(rest);
}

/** Share is one value's part of a total, for the nodes summary. */
export interface Share {
  value: string;
  other: boolean;
  samples: number;
  share: number;
}

/** shares orders the series' values by samples, largest first, each with
 * its share of the total; values without samples are left out. */
export function shares(series: Array<{ value: string; other?: boolean; samples: number }>): Share[] {
  const total = series.reduce((a, s) => a + s.samples, 0);
  return series
    .filter((s) => s.samples > 0)
    .map((s) => ({ value: s.value, other: !!s.other, samples: s.samples, share: s.samples / total }))
    .sort((a, b) => Number(a.other) - Number(b.other) || b.samples - a.samples || (a.value < b.value ? -1 : 1));
}
