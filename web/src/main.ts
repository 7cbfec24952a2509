// flint's web UI: a timeline of CPU (or off-CPU, or wall) time by process over a range, the flame
// graph of the range or of a selection dragged on it, the top functions, a
// sandwich view of one function, a comparison with another range or
// selector, downloads, and the agent's own health. All state is in the URL.

import './style.css';
import { ApiError, getJSON, hint, url, type SeriesResponse } from './api';
import { FlameGraph } from './flame';
import { Health } from './health';
import * as S from './state';
import type { State } from './state';
import { renderChanges, renderTop, changes } from './table';
import { Timeline, seriesColor } from './timeline';
import { type DiffNode, type Flat, type Node, type Row, find, flatten, flattenDiff, matcher, path, sandwich, search, top, isFunction } from './tree';
import * as fmt from './format';

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;

let state: State = S.parse(location.search);
const tooltip = $('tooltip');
const health = new Health($('health'));

// What the profile panel shows, once loaded.
let flat: Flat | null = null;
let rows: Row[] = [];
let labelNames: string[] = [];
let nodeValues: string[] = [];

const timeline = new Timeline($('timeline'), tooltip, {
  onSelect: (from, to) => {
    // Pin the range, so a link to this selection shows the same timeline.
    const [tf, tt] = timeline.range;
    const pin = state.range !== '' ? { range: '', from: tf, to: tt } : {};
    update({ ...pin, sfrom: round(from), sto: round(to), zoom: [] });
  },
  onClear: () => update({ sfrom: 0, sto: 0, zoom: [] }),
});

const flame = new FlameGraph($('flame'), tooltip, {
  onClick: (i) => {
    if (!flat) return;
    const patch: Partial<State> = { zoom: path(flat, i) };
    if (isFunction(flat, i)) patch.fn = flat.strings[flat.name[i]];
    update(patch);
  },
});
const callers = new FlameGraph($('callers'), tooltip, { onClick: (i) => pickSandwich(callers, i) });
const callees = new FlameGraph($('callees'), tooltip, { onClick: (i) => pickSandwich(callees, i) });
callees.setIcicle(true);

function pickSandwich(g: FlameGraph, i: number): void {
  const f = g.data;
  if (f && i > 0 && isFunction(f, i)) update({ fn: f.strings[f.name[i]] });
}

function round(t: number): number {
  return Math.round(t * 1000) / 1000;
}

// State changes: push the URL, then reload or redraw what depends on what changed.

type Level = 0 | 1 | 2 | 3; // nothing, view, profile, everything

function changed(a: State, b: State): Level {
  if (a.type !== b.type || a.range !== b.range || a.from !== b.from || a.to !== b.to || a.by !== b.by || a.sel !== b.sel) return 3;
  if (a.sfrom !== b.sfrom || a.sto !== b.sto || a.cmp !== b.cmp || a.bfrom !== b.bfrom || a.bto !== b.bto || a.bsel !== b.bsel) return 2;
  return S.format(a) !== S.format(b) ? 1 : 0;
}

function update(patch: Partial<State>, replace = false): void {
  const next = { ...state, ...patch };
  const level = changed(state, next);
  if (level === 0) return;
  state = next;
  const u = location.pathname + S.format(state);
  if (replace) history.replaceState(null, '', u);
  else history.pushState(null, '', u);
  apply(level);
}

window.addEventListener('popstate', () => {
  const next = S.parse(location.search);
  const level = changed(state, next);
  state = next;
  apply(level || 1);
});

function apply(level: Level): void {
  renderControls();
  if (level >= 3) {
    void loadSeries();
    void loadLabels();
  }
  if (level >= 2) {
    void loadProfile();
    void loadNodeShares();
  } else renderProfile();
}

// Messages: every empty or failed panel says why, in words.

function showMessage(el: HTMLElement, title: string, detail = '', isError = false): void {
  el.hidden = false;
  el.className = 'msg' + (isError ? ' error' : '');
  el.setAttribute('role', isError ? 'alert' : 'status');
  el.innerHTML = `<strong>${fmt.escapeHTML(title)}</strong>${detail ? `<p>${detail}</p>` : ''}`;
}

function showError(el: HTMLElement, what: string, e: unknown): void {
  if (e instanceof ApiError) {
    const status = e.status ? ` (${e.status})` : '';
    showMessage(el, `${what} failed${status}: ${e.message}`, fmt.escapeHTML(hint(e)), true);
  } else {
    showMessage(el, `${what} failed: ${(e as Error).message}`, '', true);
  }
}

function noDataHelp(): string {
  if (health.last?.get('flint_windows_written_total') === 0) {
    return 'This agent has not written its first profile yet: it writes one per window (every 10 s by default). Reload in a moment.';
  }
  if (state.type !== 'cpu') {
    return 'Off-CPU time is stored only by agents started with <code>--off-cpu</code> (<code>sudo flint agent --off-cpu</code>); without it, pick CPU.';
  }
  const filter = state.sel ? ` Nothing in it matches <code>${fmt.escapeHTML(state.sel)}</code>: remove a filter, or pick a longer range.` : '';
  return (
    'The agent stores one profile per window (every 10 s by default); a new agent shows data after its first window.' +
    filter +
    ' If nothing ever shows, check that the agent is running as root (<code>sudo flint agent</code>): it needs CAP_BPF and CAP_PERFMON to sample, and says so in its log when it cannot.'
  );
}

// The timeline.

let seriesAbort: AbortController | null = null;

async function loadSeries(): Promise<void> {
  seriesAbort?.abort();
  const abort = (seriesAbort = new AbortController());
  const msg = $('timeline-msg');
  $('timeline-panel').classList.add('loading');
  const r = S.timelineRange(state);
  try {
    const data = await getJSON<SeriesResponse>(
      'api/v1/series',
      { from: r.from, to: r.to, by: state.by, selector: state.sel, limit: 20, step: S.seriesStep(S.timelineSeconds(state)) + 's', type: S.typeParam(state) },
      abort.signal,
    );
    if (abort.signal.aborted) return;
    msg.hidden = true;
    $('timeline').hidden = false;
    const total = data.series.reduce((a, s) => a + s.samples, 0);
    timeline.setData(data, state.sfrom ? [state.sfrom, state.sto] : null, S.unitOf(state.type));
    renderLegend(data, total);
    const from = Date.parse(data.from) / 1000;
    const to = Date.parse(data.to) / 1000;
    $('range-text').textContent = `${fmt.dateTime(from)} – ${fmt.clock(to, true)} · ${fmt.duration(to - from)} in steps of ${fmt.duration(data.step)}`;
    if (total === 0) showMessage(msg, `No ${typeWords[state.type]} from ${fmt.dateTime(from)} to ${fmt.dateTime(to)}.`, noDataHelp());
  } catch (e) {
    if ((e as Error).name === 'AbortError') return;
    timeline.setData(null, null);
    $('timeline').hidden = true;
    $('legend').innerHTML = '';
    showError(msg, 'Loading the timeline', e);
  } finally {
    if (seriesAbort === abort) $('timeline-panel').classList.remove('loading');
  }
}

function renderLegend(data: SeriesResponse, total: number): void {
  const ul = $('legend');
  ul.innerHTML = '';
  data.series.forEach((s, i) => {
    if (s.samples === 0) return;
    const li = document.createElement('li');
    const sw = document.createElement('span');
    sw.className = 'swatch';
    sw.style.background = seriesColor(i, !!s.other);
    const name = s.other ? 'other' : s.value === '' ? `(no ${data.by})` : s.value;
    li.append(sw, document.createTextNode(name + ' '));
    const share = document.createElement('span');
    share.className = 'dim';
    share.textContent = fmt.pct(total > 0 ? s.samples / total : 0);
    li.append(share);
    if (!s.other) {
      li.tabIndex = 0;
      li.title = `show only ${data.by}="${s.value}"`;
      li.dataset.value = s.value;
      const go = () => addFilter({ name: data.by, op: '=', value: s.value });
      li.addEventListener('click', go);
      li.addEventListener('keydown', (e) => e.key === 'Enter' && go());
    }
    ul.append(li);
  });
}

// Labels: the "stack by" choices, the node picker and the filters.

async function loadLabels(): Promise<void> {
  const r = S.timelineRange(state);
  try {
    labelNames = await getJSON<string[]>('api/v1/labels', { from: r.from, to: r.to });
    nodeValues = labelNames.includes('node') ? await getJSON<string[]>('api/v1/labels/node/values', { from: r.from, to: r.to }) : [];
  } catch {
    labelNames = []; // the timeline shows the error
    nodeValues = [];
  }
  renderControls();
}

/** byChoices are the labels worth stacking by, in a useful order. */
function byChoices(): string[] {
  const preferred = ['comm', 'node', 'namespace', 'pod', 'container', 'runtime', 'thread', 'pid', 'exe'];
  const have = new Set([...labelNames, state.by, 'comm']);
  const skip = new Set(['tid', 'start_time', 'build_id', 'cgroup']);
  return [...preferred.filter((l) => have.has(l)), ...[...have].filter((l) => !preferred.includes(l) && !skip.has(l)).sort()];
}

function addFilter(m: S.Matcher): void {
  const ms = S.parseSelector(state.sel) ?? [];
  if (!ms.some((x) => x.name === m.name && x.op === m.op && x.value === m.value)) ms.push(m);
  update({ sel: S.formatSelector(ms), zoom: [] });
}

/** typeWords say what a profile type's profiles hold. */
const typeWords: Record<S.ProfileType, string> = { cpu: 'samples', 'off-cpu': 'time off the CPU', wall: 'time on or off the CPU' };
/** timelineWords say what the timeline plots for a profile type. */
const timelineWords: Record<S.ProfileType, string> = {
  cpu: 'CPUs used',
  'off-cpu': 'Threads off the CPU',
  wall: 'Threads on or off the CPU',
};

function renderControls(): void {
  document.querySelectorAll<HTMLButtonElement>('.presets button').forEach((b) => {
    b.classList.toggle('active', state.range === b.dataset.range);
    b.setAttribute('aria-pressed', String(state.range === b.dataset.range));
  });
  document.querySelectorAll<HTMLButtonElement>('.types button').forEach((b) => {
    b.classList.toggle('active', state.type === b.dataset.type);
    b.setAttribute('aria-pressed', String(state.type === b.dataset.type));
  });
  $('timeline-what').textContent = timelineWords[state.type];
  const by = $<HTMLSelectElement>('by');
  const choices = byChoices();
  by.innerHTML = choices.map((l) => `<option${l === state.by ? ' selected' : ''}>${fmt.escapeHTML(l)}</option>`).join('');
  $('by-text').textContent = state.by;
  renderNodes();
  const labelSel = document.querySelector<HTMLSelectElement>('#add-filter select[name=label]')!;
  const prevLabel = labelSel.value;
  const names = [...new Set(['comm', ...labelNames])].sort();
  labelSel.innerHTML = names.map((l) => `<option>${fmt.escapeHTML(l)}</option>`).join('');
  labelSel.value = names.includes(prevLabel) ? prevLabel : state.by;

  // Filter chips; a selector the chips cannot show stays as one chip.
  const chips = $('chips');
  chips.innerHTML = '';
  const ms = S.parseSelector(state.sel);
  const chip = (text: string, remove: () => void) => {
    const c = document.createElement('span');
    c.className = 'chip';
    c.textContent = text;
    const x = document.createElement('button');
    x.type = 'button';
    x.textContent = '×';
    x.title = 'remove this filter';
    x.setAttribute('aria-label', 'remove filter ' + text);
    x.addEventListener('click', remove);
    c.append(x);
    chips.append(c);
  };
  if (ms === null) chip(state.sel, () => update({ sel: '' }));
  else ms.forEach((m, i) => chip(`${m.name}${m.op}"${m.value}"`, () => update({ sel: S.formatSelector(ms.filter((_, j) => j !== i)), zoom: [] })));

  const sel = state.sfrom > 0;
  $('clear-selection').hidden = !sel;
  $('selection-text').textContent = sel ? `selected ${fmt.dateTime(state.sfrom)} – ${fmt.clock(state.sto, true)} (${fmt.duration(state.sto - state.sfrom)})` : 'drag over the chart to select a range';

  document.querySelectorAll<HTMLButtonElement>('.tabs button').forEach((b) => {
    b.classList.toggle('active', b.dataset.tab === state.tab);
    b.setAttribute('aria-selected', String(b.dataset.tab === state.tab));
  });
  const len = S.rangeSeconds(state);
  $('cmp').querySelector('option[value=prev]')!.textContent = isFinite(len) ? `the ${fmt.duration(len)} before` : 'the period before';
  $<HTMLSelectElement>('cmp').value = state.cmp;
  $('cmp-range').hidden = state.cmp !== 'range';
  $('bsel').hidden = state.cmp !== 'sel';
  setValue('bfrom', state.bfrom);
  setValue('bto', state.bto);
  setValue('bsel', state.bsel);
  setValue('search', state.q);
  $<HTMLInputElement>('icicle').checked = state.icicle;
  renderDownloads();
}

// The node picker: a list of the range's nodes to tick, narrowed by typing,
// that edits the selector's node matcher.

const MAX_NODES_LISTED = 200;

function renderNodes(): void {
  const picked = S.nodesOf(state.sel);
  const editable = S.withNodes(state.sel, []) !== null;
  $('node-controls').hidden = nodeValues.length === 0 && !picked?.length;
  const byNode = $<HTMLButtonElement>('by-node');
  byNode.classList.toggle('active', state.by === 'node');
  byNode.setAttribute('aria-pressed', String(state.by === 'node'));
  const all = nodeValues.length;
  $('nodes-text').textContent =
    picked === null ? 'custom' : picked.length === 0 ? `all${all > 1 ? ` ${fmt.count(all)}` : ''}` : picked.length === 1 ? picked[0] : `${picked.length} of ${fmt.count(Math.max(all, picked.length))}`;
  $<HTMLButtonElement>('nodes-all').disabled = !editable || picked?.length === 0;

  const find = $<HTMLInputElement>('nodes-find').value.trim().toLowerCase();
  const chosen = new Set(picked ?? []);
  const values = [...new Set([...nodeValues, ...chosen])].sort();
  const shown = values.filter((v) => v.toLowerCase().includes(find));
  const note = $('nodes-note');
  if (!editable) note.textContent = 'The filter cannot be read as label matchers: remove it to pick nodes.';
  else if (picked === null) note.textContent = 'The filter matches nodes by a pattern; ticking nodes replaces it.';
  else if (shown.length > MAX_NODES_LISTED) note.textContent = `${fmt.count(shown.length)} nodes: type to narrow the list.`;
  else if (shown.length === 0) note.textContent = find ? 'No node matches.' : 'No nodes in this range.';
  else note.textContent = '';

  // Rebuilding the list must not lose the keyboard's place in it.
  const ul = $('nodes-list');
  const focused = ul.contains(document.activeElement) ? (document.activeElement as HTMLInputElement).value : null;
  ul.innerHTML = '';
  for (const v of shown.slice(0, MAX_NODES_LISTED)) {
    const li = document.createElement('li');
    const label = document.createElement('label');
    const box = document.createElement('input');
    box.type = 'checkbox';
    box.value = v;
    box.checked = chosen.has(v);
    box.disabled = !editable;
    box.addEventListener('change', () => pickNode(v, box.checked));
    label.append(box, document.createTextNode(' ' + v));
    li.append(label);
    ul.append(li);
    if (v === focused) box.focus();
  }
}

/** pickNode adds a node to the nodes shown, or takes it away. */
function pickNode(node: string, on: boolean): void {
  const picked = S.nodesOf(state.sel) ?? [];
  setNodes(on ? [...picked, node] : picked.filter((n) => n !== node));
}

/** setNodes shows only the given nodes; [] shows every node. */
function setNodes(nodes: string[]): void {
  const sel = S.withNodes(state.sel, nodes);
  if (sel !== null) update({ sel, zoom: [] });
}

// The nodes summary: which nodes the profile's samples came from, and how many of them each.

let nodesAbort: AbortController | null = null;

async function loadNodeShares(): Promise<void> {
  nodesAbort?.abort();
  const abort = (nodesAbort = new AbortController());
  const el = $('nodes-summary');
  const r = S.profileRange(state);
  // One series per node, at a step of a sixtieth of the range: only the
  // sums are used, and the store counts every node's points, so coarse
  // steps keep a fleet's query small. Its range is widened to whole steps,
  // so the shares may include up to a step more on each side.
  const step = S.seriesStep(S.rangeSeconds(state), 60);
  try {
    const data = await getJSON<SeriesResponse>('api/v1/series', { from: r.from, to: r.to, by: 'node', selector: state.sel, limit: 20, step: step + 's', type: S.typeParam(state) }, abort.signal);
    if (abort.signal.aborted) return;
    renderNodeShares(el, data);
  } catch (e) {
    if ((e as Error).name === 'AbortError') return;
    el.hidden = false;
    el.textContent = `Nodes unknown: ${(e as Error).message}`; // the profile panel explains the error
  }
}

function renderNodeShares(el: HTMLElement, data: SeriesResponse): void {
  const shares = S.shares(data.series);
  el.innerHTML = '';
  el.hidden = shares.length === 0 || shares.every((s) => s.value === '' && !s.other);
  if (el.hidden) return;
  const named = shares.filter((s) => !s.other && s.value !== '').length;
  const head = document.createElement('span');
  head.className = 'dim';
  head.textContent = shares.some((s) => s.other) ? `the ${named} busiest nodes:` : named === 1 ? 'from 1 node:' : `from ${named} nodes:`;
  el.append(head);
  for (const s of shares) {
    const name = s.other ? 'other nodes' : s.value === '' ? '(no node)' : s.value;
    const item = document.createElement(s.other || s.value === '' ? 'span' : 'button');
    item.className = 'node-share';
    item.style.setProperty('--share', (s.share * 100).toFixed(1) + '%');
    item.dataset.node = s.value;
    item.append(document.createTextNode(name + ' '));
    const pct = document.createElement('span');
    pct.className = 'dim';
    pct.textContent = fmt.pct(s.share);
    item.append(pct);
    item.title = fmt.amount(s.samples, S.unitOf(state.type));
    if (item instanceof HTMLButtonElement) {
      item.type = 'button';
      item.title += `; show only node ${s.value}`;
      item.addEventListener('click', () => setNodes([s.value]));
    }
    el.append(item);
  }
}

function setValue(id: string, v: string): void {
  const el = $<HTMLInputElement>(id);
  if (document.activeElement !== el) el.value = v;
}

function renderDownloads(): void {
  const set = (id: string, format: string) => {
    let href: string;
    if (state.cmp) href = url('api/v1/diff', { ...S.diffParams(state), format });
    else {
      const r = S.profileRange(state);
      href = url('api/v1/profile', { from: r.from, to: r.to, selector: state.sel, format, type: S.typeParam(state) });
    }
    $<HTMLAnchorElement>(id).href = href;
  };
  const name = state.cmp ? 'flint-diff' : 'flint';
  set('dl-pprof', 'pprof');
  set('dl-folded', 'folded');
  set('dl-svg', 'svg');
  $<HTMLAnchorElement>('dl-pprof').download = name + '.pb.gz';
  $<HTMLAnchorElement>('dl-folded').download = name + '.folded.txt';
  $<HTMLAnchorElement>('dl-svg').download = name + '.svg';
}

// The profile: flame graph, top table, sandwich, diff.

let profileAbort: AbortController | null = null;

async function loadProfile(): Promise<void> {
  profileAbort?.abort();
  const abort = (profileAbort = new AbortController());
  const msg = $('profile-msg');
  $('profile-panel').classList.add('loading');
  const r = S.profileRange(state);
  const t0 = performance.now();
  try {
    if (state.cmp) {
      const d = await getJSON<DiffNode>('api/v1/diff', S.diffParams(state), abort.signal);
      if (abort.signal.aborted) return;
      flat = flattenDiff(d);
    } else {
      const n = await getJSON<Node>('api/v1/profile', { from: r.from, to: r.to, selector: state.sel, type: S.typeParam(state) }, abort.signal);
      if (abort.signal.aborted) return;
      flat = flatten(n);
    }
    rows = top(flat);
    msg.hidden = true;
    flame.setData(flat);
    renderProfile();
    // Fetching, decoding, flattening and the first draw, for the browser tests.
    performance.measure('profile-load', { start: t0, end: performance.now(), detail: { frames: flat.n } });
  } catch (e) {
    if ((e as Error).name === 'AbortError') return;
    flat = null;
    rows = [];
    flame.setData(null);
    renderProfile();
    showError(msg, state.cmp ? 'Loading the comparison' : 'Loading the profile', e);
  } finally {
    if (profileAbort === abort) $('profile-panel').classList.remove('loading');
  }
}

function rangeWords(r: S.Range): string {
  const t = (s: string) => (/^\d/.test(s) ? fmt.dateTime(Number(s)) : s);
  return `${t(r.from)} to ${t(r.to)}`;
}

function renderProfile(): void {
  const f = flat;
  const tab = state.tab;
  $('flame-view').hidden = tab !== 'flame';
  $('top-view').hidden = tab !== 'top';
  $('sandwich-view').hidden = tab !== 'sandwich';
  const msg = $('profile-msg');
  const summary = $('profile-summary');
  const r = S.profileRange(state);
  const who = state.sel || 'all processes';
  const empty = !f || (f.total[0] === 0 && !(f.base && f.baseTotal! > 0));
  document.querySelector<HTMLElement>('#flame-view .toolbar')!.hidden = empty;
  $('legend-kinds').hidden = empty;
  if (!f) {
    summary.textContent = '';
    $('changes').hidden = true;
    $('crumbs').innerHTML = '';
    $('match').textContent = '';
    return;
  }
  const total = f.total[0];
  if (f.base) {
    summary.innerHTML =
      `<span class="diff-key"><span class="grew">■ grew</span> <span class="shrank">■ shrank</span></span> ` +
      `${fmt.escapeHTML(who)}, ${fmt.escapeHTML(rangeWords(r))}: ${fmt.amount(total, f.unit)}, compared with ${fmt.escapeHTML(S.compareText(state))}: ` +
      `${fmt.amount(f.baseTotal!, f.unit)} (scaled to the same total). Widths are the current profile; colours the change of each frame's share.`;
  } else {
    summary.textContent = `${who}, ${rangeWords(r)}: ${fmt.amount(total, f.unit)}${f.unit === 'ns' ? ' ' + typeWords[state.type] : ''}`;
  }
  if (total === 0 && !(f.base && f.baseTotal! > 0)) {
    showMessage(msg, `No ${typeWords[state.type]} for ${who} from ${rangeWords(r)}.`, noDataHelp());
  } else if (f.base && f.baseTotal === 0) {
    showMessage(msg, `The base (${S.compareText(state)}) has no ${typeWords[state.type]}: everything shows as grown.`, 'Pick another base range or selector.');
  } else {
    msg.hidden = true;
  }

  // Zoom, search, colours.
  const z = find(f, state.zoom);
  flame.setZoom(z.index);
  flame.setIcicle(state.icicle);
  renderCrumbs(f, z.index);
  let hit: Uint8Array | null = null;
  const match = $('match');
  if (state.q !== '') {
    const m = search(f, matcher(state.q));
    hit = m.hit;
    match.textContent = m.frames === 0 ? 'no match' : `matched ${fmt.pct(total > 0 ? m.samples / total : 0)} of ${typeWords[state.type]} (${fmt.value(m.samples, f.unit)}) in ${fmt.count(m.frames)} frames`;
  } else {
    match.textContent = '';
  }
  flame.setHighlight(hit);
  if (tab === 'flame') flame.draw();
  $('legend-kinds').innerHTML = f.base
    ? ''
    : `colours: one warm hue per package or module · <span class="swatch kernel"></span> kernel · lighter: inlined · <span class="swatch hl"></span> search match`;
  const ch = $('changes');
  ch.hidden = !f.base;
  if (f.base) renderChanges(ch, changes(rows, total, f.baseTotal!), pickFunction);

  if (tab === 'top') {
    renderTop($<HTMLTableElement>('top-table'), rows, {
      sort: state.sort, focus: state.fn, total, unit: f.unit, baseTotal: f.base ? f.baseTotal : undefined,
      onSort: (sort) => update({ sort }, true),
      onPick: pickFunction,
    });
  }
  if (tab === 'sandwich') renderSandwich(f);
}

/** pickFunction shows one function in the flame graph: highlighted, with its share. */
function pickFunction(name: string): void {
  update({ fn: name, q: '^' + name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') + '$', tab: 'flame', zoom: [] });
}

function renderCrumbs(f: Flat, z: number): void {
  const nav = $('crumbs');
  nav.innerHTML = '';
  const chain: number[] = [];
  for (let i = z; i >= 0; i = f.parent[i]) chain.unshift(i);
  chain.forEach((i, k) => {
    if (k > 0) nav.append(document.createTextNode(' › '));
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'crumb';
    b.textContent = f.strings[f.name[i]];
    b.title = `zoom to ${b.textContent}`;
    if (i === z) b.setAttribute('aria-current', 'true');
    b.addEventListener('click', () => update({ zoom: path(f, i) }));
    nav.append(b);
  });
  $<HTMLButtonElement>('reset-zoom').disabled = z === 0;
}

function renderSandwich(f: Flat): void {
  const head = $('sandwich-head');
  const fn = state.fn;
  if (!fn) {
    head.innerHTML = 'Pick a function: click a frame in the flame graph or a row of the top table, then come back here.';
    callers.setData(null);
    callees.setData(null);
    return;
  }
  const s = sandwich(f, fn);
  if (!s.found) {
    head.innerHTML = `<strong>${fmt.escapeHTML(fn)}</strong> does not appear in this profile.`;
    callers.setData(null);
    callees.setData(null);
    return;
  }
  const total = f.total[0];
  head.innerHTML =
    `<strong>${fmt.escapeHTML(fn)}</strong>: on ${fmt.pct(total > 0 ? s.callers.total / total : 0)} of ${typeWords[state.type]} ` +
    `(${fmt.value(s.callers.total, f.unit)}), ${fmt.pct(total > 0 ? s.callees.self / total : 0)} in itself. Click a caller or callee to centre on it.`;
  callers.setData(flatten(s.callers));
  callees.setData(flatten(s.callees));
  callers.draw();
  callees.draw();
}

// Controls.

document.querySelectorAll<HTMLButtonElement>('.presets button').forEach((b) =>
  b.addEventListener('click', () => update({ range: b.dataset.range!, from: 0, to: 0, sfrom: 0, sto: 0, zoom: [] })),
);
document.querySelectorAll<HTMLButtonElement>('.types button').forEach((b) => b.addEventListener('click', () => update({ type: b.dataset.type as S.ProfileType, zoom: [] })));
$<HTMLSelectElement>('by').addEventListener('change', (e) => update({ by: (e.target as HTMLSelectElement).value }));
$('by-node').addEventListener('click', () => update({ by: state.by === 'node' ? 'comm' : 'node' }));
$('nodes-find').addEventListener('input', renderNodes);
$('nodes-find').addEventListener('keydown', (e) => {
  // Enter ticks the first node that matches and starts a new search.
  if (e.key !== 'Enter') return;
  e.preventDefault();
  const first = document.querySelector<HTMLInputElement>('#nodes-list input:not(:checked):not(:disabled)');
  if (!first) return;
  $<HTMLInputElement>('nodes-find').value = '';
  pickNode(first.value, true);
});
$('nodes-all').addEventListener('click', () => setNodes([]));
$('nodes').addEventListener('toggle', () => {
  if ($<HTMLDetailsElement>('nodes').open) $('nodes-find').focus();
});
document.addEventListener('click', (e) => {
  const d = $<HTMLDetailsElement>('nodes');
  if (d.open && e.target instanceof Element && !d.contains(e.target)) d.open = false;
});
$('clear-selection').addEventListener('click', () => update({ sfrom: 0, sto: 0, zoom: [] }));
document.querySelectorAll<HTMLButtonElement>('.tabs button').forEach((b) => b.addEventListener('click', () => update({ tab: b.dataset.tab as S.Tab })));
$('reset-zoom').addEventListener('click', () => update({ zoom: [] }));
$<HTMLInputElement>('icicle').addEventListener('change', (e) => update({ icicle: (e.target as HTMLInputElement).checked }, true));

let searchTimer = 0;
$<HTMLInputElement>('search').addEventListener('input', (e) => {
  const q = (e.target as HTMLInputElement).value;
  window.clearTimeout(searchTimer);
  searchTimer = window.setTimeout(() => update({ q }, true), 150);
});

$<HTMLSelectElement>('cmp').addEventListener('change', (e) => {
  const cmp = (e.target as HTMLSelectElement).value as S.Compare;
  const patch: Partial<State> = { cmp, zoom: [] };
  if (cmp === 'range' && !state.bfrom) {
    // Start from the period before, in absolute times the user can edit.
    const [from, to] = state.sfrom ? [state.sfrom, state.sto] : timeline.range;
    patch.bfrom = String(round(2 * from - to));
    patch.bto = String(round(from));
  }
  update(patch);
});
for (const id of ['bfrom', 'bto', 'bsel']) {
  $<HTMLInputElement>(id).addEventListener('change', (e) => update({ [id]: (e.target as HTMLInputElement).value.trim() }));
}

const form = $<HTMLFormElement>('add-filter');
const labelSel = form.querySelector<HTMLSelectElement>('select[name=label]')!;
const loadValues = async () => {
  const r = S.timelineRange(state);
  const list = $('filter-values');
  try {
    const values = await getJSON<string[]>(`api/v1/labels/${encodeURIComponent(labelSel.value)}/values`, { from: r.from, to: r.to });
    list.innerHTML = values.slice(0, 1000).map((v) => `<option value="${fmt.escapeHTML(v)}"></option>`).join('');
  } catch {
    list.innerHTML = '';
  }
};
labelSel.addEventListener('change', loadValues);
form.querySelector('input[name=value]')!.addEventListener('focus', loadValues);
form.addEventListener('submit', (e) => {
  e.preventDefault();
  const data = new FormData(form);
  const value = String(data.get('value') ?? '');
  addFilter({ name: String(data.get('label')), op: String(data.get('op')) as S.Op, value });
  (form.querySelector('input[name=value]') as HTMLInputElement).value = '';
});

document.addEventListener('keydown', (e) => {
  const typing = e.target instanceof HTMLInputElement || e.target instanceof HTMLSelectElement;
  if (e.key === '/' && !typing) {
    e.preventDefault();
    $('search').focus();
  } else if (e.key === 'Escape' && !typing && state.zoom.length > 0) {
    update({ zoom: [] });
  }
});

// A relative range follows now: refresh the timeline while nothing is selected.
window.setInterval(() => {
  if (state.range !== '' && document.visibilityState === 'visible') void loadSeries();
}, 30_000);

health.start();

/** window.flint lets the browser tests (and curious users) find frames on the canvases. */
(window as unknown as { flint: object }).flint = {
  frameRect: (name: string, graph: 'flame' | 'callers' | 'callees' = 'flame') => {
    const g = { flame, callers, callees }[graph];
    const r = g.rectOf(name);
    if (!r) return null;
    const c = g.canvas.getBoundingClientRect();
    return { x: c.left + r.x, y: c.top + r.y, w: r.w, h: r.h };
  },
  timelineX: (t: number) => timeline.canvas.getBoundingClientRect().left + timeline.xOf(t),
  lastDrawMs: () => flame.lastDrawMs,
};

apply(3);
