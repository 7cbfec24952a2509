// Large call trees for measuring the flame graph.

import type { Node } from '../../src/tree';

function fix(n: Node): number {
  if (!n.children || n.children.length === 0) {
    n.total = n.self;
    return n.total;
  }
  n.total = n.self;
  for (const c of n.children) n.total += fix(c);
  return n.total;
}

/** wideTree has n frames that are all wide enough to draw at 1400 px: 50
 * processes of 50 functions each, every one the top of a chain 40 calls
 * deep, equal samples at every leaf. The worst case for a draw. */
export function wideTree(chain = 40): Node {
  const root: Node = { name: 'all', kind: 'root', self: 0, total: 0, children: [] };
  for (let p = 0; p < 50; p++) {
    const proc: Node = { name: `proc-${p}`, kind: 'process', self: 0, total: 0, children: [] };
    root.children!.push(proc);
    for (let f = 0; f < 50; f++) {
      let at: Node = { name: `pkg${p % 7}.top_${f}`, kind: 'user', module: `/usr/bin/proc-${p}`, file: `src/p${p}.c`, line: f, self: 0, total: 0 };
      proc.children!.push(at);
      for (let d = 1; d < chain; d++) {
        const kind = d > chain - 6 ? 'kernel' : d % 5 === 0 ? 'inline' : 'user';
        const next: Node = { name: `pkg${(p + d) % 9}.fn_${d}_${f}`, kind, module: kind === 'kernel' ? '[kernel.kallsyms]' : `/usr/bin/proc-${p}`, self: 0, total: 0 };
        at.children = [next];
        at = next;
      }
      at.self = 100;
    }
  }
  fix(root);
  return root;
}

/** randomTree has about n frames in a shape like a real profile: a few
 * hot paths, a long tail of small ones. Seeded, so every run is the same. */
export function randomTree(n: number): Node {
  let seed = 42;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const root: Node = { name: 'all', kind: 'root', self: 0, total: 0, children: [] };
  let count = 1;
  let limit = 0;
  const grow = (parent: Node, depth: number) => {
    const k = Math.floor(rand() * rand() * 8);
    for (let i = 0; i < k && count < limit; i++) {
      count++;
      const kind = depth > 25 && rand() < 0.5 ? 'kernel' : 'user';
      const c: Node = { name: `lib${Math.floor(rand() * 30)}.func_${Math.floor(rand() * 5000)}`, kind, self: Math.floor(rand() * rand() * 1000), total: 0 };
      (parent.children ??= []).push(c);
      if (depth < 60) grow(c, depth + 1);
    }
  };
  // 20 processes, each a twentieth of the frames.
  for (let p = 0; p < 20; p++) {
    const proc: Node = { name: `proc-${p}`, kind: 'process', self: 0, total: 0, children: [] };
    root.children!.push(proc);
    count++;
    limit = Math.round(((p + 1) * n) / 20);
    while (count < limit) grow(proc, 1);
  }
  fix(root);
  return root;
}

/** countNodes counts a tree's frames. */
export function countNodes(n: Node): number {
  let c = 1;
  for (const ch of n.children ?? []) c += countNodes(ch);
  return c;
}
