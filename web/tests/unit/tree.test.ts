import { describe, expect, test } from 'vitest';
import { type DiffNode, type Node, delta, find, flatten, flattenDiff, matcher, path, sandwich, search, top } from '../../src/tree';

// all 10: api 6 (main 6: a 4 [b 1], c 2), db 4 (main 4: a 4 (recursive a 2))
const tree: Node = {
  name: 'all', kind: 'root', self: 0, total: 10, children: [
    { name: 'api', kind: 'process', self: 0, total: 6, children: [
      { name: 'main', kind: 'user', module: '/bin/api', self: 0, total: 6, children: [
        { name: 'a', kind: 'user', file: 'a.go', line: 3, self: 3, total: 4, children: [{ name: 'b', kind: 'kernel', self: 1, total: 1 }] },
        { name: 'c', kind: 'inline', self: 2, total: 2 },
      ] },
    ] },
    { name: 'db', kind: 'process', self: 0, total: 4, children: [
      { name: 'main', kind: 'user', self: 0, total: 4, children: [
        { name: 'a', kind: 'user', self: 2, total: 4, children: [{ name: 'a', kind: 'user', self: 2, total: 2 }] },
      ] },
    ] },
  ],
};

describe('flatten', () => {
  const f = flatten(tree);
  test('preorder with spans and subtree ends', () => {
    expect(f.n).toBe(10);
    const names = Array.from(f.name, (id) => f.strings[id]);
    expect(names).toEqual(['all', 'api', 'main', 'a', 'b', 'c', 'db', 'main', 'a', 'a']);
    expect(Array.from(f.depth)).toEqual([0, 1, 2, 3, 4, 3, 1, 2, 3, 4]);
    expect(Array.from(f.x)).toEqual([0, 0, 0, 0, 0, 4, 6, 6, 6, 6]);
    expect(Array.from(f.end)).toEqual([10, 6, 6, 5, 5, 6, 10, 10, 10, 10]);
    expect(f.maxDepth).toBe(4);
    expect(f.strings[f.file[3]]).toBe('a.go');
    expect(f.line[3]).toBe(3);
  });
  test('paths find their frames', () => {
    expect(path(f, 4)).toEqual(['api', 'main', 'a', 'b']);
    expect(find(f, ['api', 'main', 'a', 'b'])).toEqual({ index: 4, exact: true });
    expect(find(f, ['db', 'main', 'x'])).toEqual({ index: 7, exact: false });
    expect(find(f, [])).toEqual({ index: 0, exact: true });
  });
  test('deep trees do not overflow the stack', () => {
    let leaf: Node = { name: 'leaf', kind: 'user', self: 1, total: 1 };
    for (let i = 0; i < 20000; i++) leaf = { name: 'f' + i, kind: 'user', self: 0, total: 1, children: [leaf] };
    const deep = flatten({ name: 'all', kind: 'root', self: 0, total: 1, children: [leaf] });
    expect(deep.maxDepth).toBe(20001);
  });
});

describe('search', () => {
  const f = flatten(tree);
  test('counts nested matches once', () => {
    const m = search(f, matcher('^a$'));
    expect(m.samples).toBe(8); // api's a 4 + db's a 4 (its recursive a is inside)
    expect(m.frames).toBe(3);
  });
  test('never matches the root or processes', () => {
    expect(search(f, matcher('api')).frames).toBe(0);
  });
  test('an invalid regular expression is a substring', () => {
    expect(matcher('a(')('xa(y')).toBe(true);
    expect(matcher('A')('xa')).toBe(true);
  });
});

describe('top', () => {
  test('self summed, total counted once per stack', () => {
    const rows = Object.fromEntries(top(flatten(tree)).map((r) => [r.name, r]));
    expect(rows.a).toMatchObject({ self: 7, total: 8 });
    expect(rows.main).toMatchObject({ self: 0, total: 10, module: '/bin/api' });
    expect(rows.b).toMatchObject({ self: 1, total: 1, kind: 'kernel' });
    expect(rows.api).toBeUndefined();
  });
});

describe('sandwich', () => {
  test('callers inverted, callees merged', () => {
    const s = sandwich(flatten(tree), 'a');
    expect(s.found).toBe(true);
    expect(s.callers.total).toBe(8);
    expect(s.callers.children!.map((c) => [c.name, c.total])).toEqual([['main', 8]]);
    expect(s.callers.children![0].children!.map((c) => [c.name, c.total, c.self])).toEqual([['api', 4, 4], ['db', 4, 4]]);
    expect(s.callees.total).toBe(8);
    expect(s.callees.self).toBe(5); // api's a 3, db's outer a 2
    expect(s.callees.children!.map((c) => [c.name, c.total])).toEqual([['a', 2], ['b', 1]]);
    expect(sandwich(flatten(tree), 'nothing').found).toBe(false);
  });
});

describe('diff', () => {
  const d: DiffNode = {
    name: 'all', kind: 'root', base: 100, current: 200, base_self: 0, current_self: 0, children: [
      { name: 'x', kind: 'process', base: 50, current: 150, base_self: 50, current_self: 150 },
      { name: 'y', kind: 'process', base: 50, current: 50, base_self: 50, current_self: 50 },
    ],
  };
  test('widths are current, deltas are changes of share', () => {
    const f = flattenDiff(d);
    expect(Array.from(f.total)).toEqual([200, 150, 50]);
    expect(f.baseTotal).toBe(100);
    expect(delta(f, 1)).toBeCloseTo(0.25);
    expect(delta(f, 2)).toBeCloseTo(-0.25);
    expect(delta(f, 0)).toBe(0);
  });
});
