// Call trees as the API sends them, flattened into typed arrays in
// preorder: the flame graph draws and hit-tests 100,000 frames from these
// without an object per frame, and a subtree is the index range [i, end[i]).

import type { Unit } from './format';

export type Kind = 'root' | 'process' | 'user' | 'inline' | 'kernel';

/** Node is a node of /api/v1/profile?format=json (internal/profile.Node). */
export interface Node {
  name: string;
  kind: Kind;
  module?: string;
  file?: string;
  line?: number;
  self: number;
  total: number;
  children?: Node[];
  /** On the root: how counts read ('ns' for time, absent for samples). */
  unit?: Unit;
}

/** DiffNode is a node of /api/v1/diff?format=json (internal/profile.DiffNode). */
export interface DiffNode {
  name: string;
  kind: Kind;
  module?: string;
  file?: string;
  line?: number;
  base: number;
  current: number;
  base_self: number;
  current_self: number;
  children?: DiffNode[];
  unit?: Unit;
}

const kinds: Kind[] = ['root', 'process', 'user', 'inline', 'kernel']; // by index, as Flat.kind stores them
export const KIND_ROOT = 0;
export const KIND_PROCESS = 1;
export const KIND_INLINE = 3;
export const KIND_KERNEL = 4;

/** Flat is a call tree in preorder. Frame i spans [x[i], x[i]+total[i]) in
 * samples; its descendants are i+1 .. end[i]-1. Strings are interned. */
export interface Flat {
  n: number;
  strings: string[];
  name: Int32Array;
  module: Int32Array; // -1: none
  file: Int32Array; // -1: none
  line: Int32Array;
  kind: Uint8Array;
  depth: Int32Array;
  parent: Int32Array; // -1 for the root
  end: Int32Array;
  x: Float64Array;
  total: Float64Array;
  self: Float64Array;
  maxDepth: number;
  /** How the counts read: samples or nanoseconds. */
  unit: Unit;
  /** For a diff: the base's totals and selves, and both roots' totals. */
  base?: Float64Array;
  baseSelf?: Float64Array;
  baseTotal?: number;
}

export function kindName(k: number): Kind {
  return kinds[k];
}

type Any = Node & DiffNode;

const kindIndex: Record<string, number> = { root: 0, process: 1, user: 2, inline: 3, kernel: 4 };

function flattenWith(root: Any, diff: boolean): Flat {
  // Count first, to size the arrays.
  let n = 0;
  const pending: Any[] = [root];
  while (pending.length > 0) {
    const node = pending.pop()!;
    n++;
    const ch = node.children;
    if (ch) for (let c = 0; c < ch.length; c++) pending.push(ch[c] as Any);
  }
  const f: Flat = {
    n, strings: [], name: new Int32Array(n), module: new Int32Array(n), file: new Int32Array(n),
    line: new Int32Array(n), kind: new Uint8Array(n), depth: new Int32Array(n), parent: new Int32Array(n),
    end: new Int32Array(n), x: new Float64Array(n), total: new Float64Array(n), self: new Float64Array(n), maxDepth: 0,
    unit: root.unit ?? '',
  };
  const base = diff ? new Float64Array(n) : undefined;
  const baseSelf = diff ? new Float64Array(n) : undefined;
  const index = new Map<string, number>();
  const intern = (s: string | undefined): number => {
    if (s === undefined || s === '') return -1;
    let i = index.get(s);
    if (i === undefined) {
      i = f.strings.length;
      f.strings.push(s);
      index.set(s, i);
    }
    return i;
  };
  let next = 0;
  // enter assigns the next index to node, a child of parent starting at x.
  const enter = (node: Any, parent: number, x: number): number => {
    const i = next++;
    const name = intern(node.name);
    f.name[i] = name >= 0 ? name : intern('[unnamed]');
    f.module[i] = intern(node.module);
    f.file[i] = intern(node.file);
    f.line[i] = node.line ?? 0;
    f.kind[i] = kindIndex[node.kind] ?? 2;
    f.parent[i] = parent;
    const d = parent < 0 ? 0 : f.depth[parent] + 1;
    f.depth[i] = d;
    if (d > f.maxDepth) f.maxDepth = d;
    f.x[i] = x;
    if (diff) {
      f.total[i] = node.current;
      f.self[i] = node.current_self;
      base![i] = node.base;
      baseSelf![i] = node.base_self;
    } else {
      f.total[i] = node.total;
      f.self[i] = node.self;
    }
    return i;
  };
  // Preorder with an explicit stack (call trees can be deeper than JS's):
  // per level, the node, its index, its next child and that child's x.
  const nodes: Any[] = [root];
  const idx: number[] = [enter(root, -1, 0)];
  const nextChild: number[] = [0];
  const cx: number[] = [0];
  while (nodes.length > 0) {
    const top = nodes.length - 1;
    const ch = nodes[top].children as Any[] | undefined;
    if (ch && nextChild[top] < ch.length) {
      const child = ch[nextChild[top]++];
      const i = enter(child, idx[top], cx[top]);
      cx[top] += f.total[i];
      nodes.push(child);
      idx.push(i);
      nextChild.push(0);
      cx.push(f.x[i]);
    } else {
      f.end[idx[top]] = next;
      nodes.pop();
      idx.pop();
      nextChild.pop();
      cx.pop();
    }
  }
  if (diff) {
    f.base = base;
    f.baseSelf = baseSelf;
    f.baseTotal = base![0];
  }
  return f;
}

/** flatten flattens a profile tree. */
export function flatten(root: Node): Flat {
  return flattenWith(root as Any, false);
}

/** flattenDiff flattens a diff tree: widths are the current profile's,
 * base counts ride along for the colours and tooltips. */
export function flattenDiff(root: DiffNode): Flat {
  return flattenWith(root as Any, true);
}

/** delta is the change of frame i's share of all samples, current minus base, -1..1. */
export function delta(f: Flat, i: number): number {
  const cur = f.total[0] > 0 ? f.total[i] / f.total[0] : 0;
  const base = f.baseTotal! > 0 ? f.base![i] / f.baseTotal! : 0;
  return cur - base;
}

/** path lists the names from the root's child down to frame i. */
export function path(f: Flat, i: number): string[] {
  const out: string[] = [];
  for (; i > 0; i = f.parent[i]) out.push(f.strings[f.name[i]]);
  return out.reverse();
}

/** find walks names down from the root and returns the deepest frame it
 * reaches, and whether it reached all of them. */
export function find(f: Flat, names: string[]): { index: number; exact: boolean } {
  let at = 0;
  for (const name of names) {
    let next = -1;
    for (let c = at + 1; c < f.end[at]; c = f.end[c]) {
      if (f.strings[f.name[c]] === name) {
        next = c;
        break;
      }
    }
    if (next < 0) return { index: at, exact: false };
    at = next;
  }
  return { index: at, exact: true };
}

/** isFunction reports whether frame i is code (not the root or a process). */
export function isFunction(f: Flat, i: number): boolean {
  return f.kind[i] !== KIND_ROOT && f.kind[i] !== KIND_PROCESS;
}

/** Match is the result of a search. */
export interface Match {
  /** 1 for each frame whose name matches. */
  hit: Uint8Array;
  /** Samples under matching frames, each counted once (nested matches are not added twice). */
  samples: number;
  frames: number;
}

/** search marks frames whose name test accepts and sums their samples. */
export function search(f: Flat, test: (name: string) => boolean, from = 0): Match {
  const byName = new Int8Array(f.strings.length).fill(-1);
  const hit = new Uint8Array(f.n);
  let samples = 0;
  let frames = 0;
  const stop = f.end[from];
  for (let i = from; i < stop; ) {
    const id = f.name[i];
    if (byName[id] < 0) byName[id] = isFunction(f, i) && test(f.strings[id]) ? 1 : 0;
    if (byName[id] === 1) {
      // Count the outermost match, mark every match in its subtree.
      samples += f.total[i];
      for (let j = i; j < f.end[i]; j++) {
        const jd = f.name[j];
        if (byName[jd] < 0) byName[jd] = isFunction(f, j) && test(f.strings[jd]) ? 1 : 0;
        if (byName[jd] === 1) {
          hit[j] = 1;
          frames++;
        }
      }
      i = f.end[i];
    } else {
      i++;
    }
  }
  return { hit, samples, frames };
}

/** matcher turns search text into a test: a case-insensitive regular
 * expression, or a plain substring when the text is not a valid one. */
export function matcher(q: string): (name: string) => boolean {
  try {
    const re = new RegExp(q, 'i');
    return (s) => re.test(s);
  } catch {
    const lower = q.toLowerCase();
    return (s) => s.toLowerCase().includes(lower);
  }
}

/** Row is one function of the top table. */
export interface Row {
  name: string;
  kind: Kind;
  module: string;
  file: string;
  self: number;
  /** Samples with the function anywhere on the stack, recursion counted once. */
  total: number;
  /** For a diff: the base's, with baseTotal the base root's total. */
  baseSelf: number;
  baseTotalOf: number;
}

/** top aggregates frames by function name. */
export function top(f: Flat): Row[] {
  const rows = new Map<number, Row>();
  // onStack[name] counts the frames of that name on the current path, so a
  // recursive function's total is counted at its outermost frame only.
  const onStack = new Int32Array(f.strings.length);
  const path: number[] = [];
  for (let i = 0; i < f.n; i++) {
    while (path.length > 0 && f.end[path[path.length - 1]] <= i) onStack[f.name[path.pop()!]]--;
    if (isFunction(f, i)) {
      const id = f.name[i];
      let r = rows.get(id);
      if (!r) {
        r = {
          name: f.strings[id], kind: kindName(f.kind[i]), module: f.module[i] >= 0 ? f.strings[f.module[i]] : '',
          file: f.file[i] >= 0 ? f.strings[f.file[i]] : '', self: 0, total: 0, baseSelf: 0, baseTotalOf: 0,
        };
        rows.set(id, r);
      }
      r.self += f.self[i];
      if (f.base) r.baseSelf += f.baseSelf![i];
      if (onStack[id] === 0) {
        r.total += f.total[i];
        if (f.base) r.baseTotalOf += f.base[i];
      }
    }
    onStack[f.name[i]]++;
    path.push(i);
  }
  return [...rows.values()];
}

/** sandwich builds the callers and the callees of the function name: the
 * callers tree is inverted (name at its root, its callers as children),
 * the callees tree merges every call of name. Nested calls of a
 * recursive function are counted at the outermost one. */
export function sandwich(f: Flat, name: string): { callers: Node; callees: Node; found: boolean } {
  const callers: Node = { name, kind: 'user', self: 0, total: 0, unit: f.unit };
  const callees: Node = { name, kind: 'user', self: 0, total: 0, unit: f.unit };
  const child = (parent: Node, i: number): Node => {
    const nm = f.strings[f.name[i]];
    const kind = kindName(f.kind[i]);
    parent.children ??= [];
    let c = parent.children.find((x) => x.name === nm && x.kind === kind);
    if (!c) {
      c = {
        name: nm, kind, self: 0, total: 0, module: f.module[i] >= 0 ? f.strings[f.module[i]] : undefined,
        file: f.file[i] >= 0 ? f.strings[f.file[i]] : undefined, line: f.line[i] || undefined,
      };
      parent.children.push(c);
    }
    return c;
  };
  const mergeCallees = (into: Node, i: number) => {
    into.self += f.self[i];
    for (let c = i + 1; c < f.end[i]; c = f.end[c]) {
      const n = child(into, c);
      n.total += f.total[c];
      mergeCallees(n, c);
    }
  };
  let found = false;
  const id = f.strings.indexOf(name);
  for (let i = 0; i < f.n && id >= 0; ) {
    if (f.name[i] !== id || !isFunction(f, i)) {
      i++;
      continue;
    }
    found = true;
    callers.kind = callees.kind = kindName(f.kind[i]);
    callers.total += f.total[i];
    callers.self += f.total[i];
    callees.total += f.total[i];
    let at = callers;
    for (let p = f.parent[i]; p > 0; p = f.parent[p]) {
      at.self -= f.total[i];
      at = child(at, p);
      at.total += f.total[i];
      at.self += f.total[i];
    }
    mergeCallees(callees, i);
    i = f.end[i];
  }
  const sort = (n: Node) => {
    n.children?.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    n.children?.forEach(sort);
  };
  sort(callers);
  sort(callees);
  return { callers, callees, found };
}
