import { describe, expect, test } from 'vitest';
import { defaults, diffParams, escapeRegex, format, formatSelector, nodesOf, parse, parseSelector, seconds, seriesStep, shares, typeParam, unitOf, withNodes } from '../../src/state';

describe('URL state', () => {
  test('defaults make an empty query', () => {
    expect(format(defaults())).toBe('');
    expect(parse('')).toEqual(defaults());
  });
  test('round trip', () => {
    const s = {
      ...defaults(), type: 'off-cpu' as const, range: '', from: 1795341600, to: 1795345200, sfrom: 1795342000.5, sto: 1795343000, by: 'container',
      sel: '{comm="api",container=~"3f.*"}', icicle: true, tab: 'sandwich' as const, zoom: ['api', 'a;b', '100%'],
      q: 'json', fn: 'main.main', sort: 'total' as const, cmp: 'range' as const, bfrom: 'now-2h', bto: 'now-1h',
    };
    expect(parse(format(s))).toEqual(s);
  });
  test('invalid values fall back to defaults', () => {
    const s = parse('?range=forever&tab=x&sort=y&cmp=z&sfrom=5&sto=1&type=offcpu');
    expect(s.type).toBe('cpu');
    expect(s.range).toBe('1h');
    expect(s.tab).toBe('flame');
    expect(s.sort).toBe('self');
    expect(s.cmp).toBe('');
    expect(s.sfrom).toBe(0);
  });
});

test('seconds', () => {
  expect(seconds('5m')).toBe(300);
  expect(seconds('1h30m')).toBe(5400);
  expect(seconds('7d')).toBe(604800);
  expect(seconds('7')).toBeNaN();
  expect(seconds('')).toBeNaN();
  expect(seconds('1hx')).toBeNaN();
});

test('series steps divide into 10 s windows and give at most 300 points', () => {
  for (const [range, step] of [[300, 10], [3600, 20], [86400, 300], [604800, 3600]]) expect(seriesStep(range)).toBe(step);
  for (const r of [60, 3000, 3601, 1e5, 1e6, 1e7]) {
    expect(r / seriesStep(r)).toBeLessThanOrEqual(300);
    expect(seriesStep(r) % 10).toBe(0);
  }
  for (const r of [60, 3600, 86400, 1e6]) expect(r / seriesStep(r, 60)).toBeLessThanOrEqual(60);
  expect(seriesStep(3600, 60)).toBe(60);
});

describe('selectors', () => {
  test('round trip', () => {
    const ms = [
      { name: 'comm', op: '=' as const, value: 'a "quoted" \\ name' },
      { name: 'container', op: '=~' as const, value: '3f.*' },
      { name: 'pod', op: '!=' as const, value: '' },
    ];
    expect(parseSelector(formatSelector(ms))).toEqual(ms);
    expect(formatSelector([])).toBe('');
    expect(parseSelector('{}')).toEqual([]);
    expect(parseSelector(' { comm = "x" , pid!~"1.*" } ')).toEqual([{ name: 'comm', op: '=', value: 'x' }, { name: 'pid', op: '!~', value: '1.*' }]);
  });
  test('what it cannot read is null', () => {
    for (const s of ['comm="x"', '{comm=x}', '{comm="x"', '{"x"="y"}', '{comm="x" pid="1"}']) expect(parseSelector(s)).toBeNull();
  });
});

describe('profile types', () => {
  test('in the URL, CPU left out', () => {
    expect(format({ ...defaults(), type: 'wall' })).toBe('?type=wall');
    expect(parse('?type=off-cpu').type).toBe('off-cpu');
    expect(typeParam(defaults())).toBe('');
    expect(typeParam({ ...defaults(), type: 'off-cpu' })).toBe('off-cpu');
  });
  test('time types count nanoseconds', () => {
    expect([unitOf('cpu'), unitOf('off-cpu'), unitOf('wall')]).toEqual(['', 'ns', 'ns']);
  });
  test('a comparison is of one type', () => {
    expect(diffParams({ ...defaults(), cmp: 'prev', type: 'off-cpu' })).toMatchObject({ type: 'off-cpu' });
    expect(diffParams({ ...defaults(), cmp: 'prev' })).not.toHaveProperty('type');
  });
});

describe('comparisons', () => {
  const s = { ...defaults(), sel: '{comm="api"}' };
  test('the period before is the API default', () => {
    expect(diffParams({ ...s, cmp: 'prev' })).toEqual({ from: 'now-1h', to: 'now', selector: '{comm="api"}', normalize: 'true' });
  });
  test('a day earlier shifts relative and absolute ranges', () => {
    expect(diffParams({ ...s, cmp: '1d' })).toMatchObject({ base_from: 'now-90000s', base_to: 'now-86400s' });
    expect(diffParams({ ...s, cmp: '1d', sfrom: 200000, sto: 203600 })).toMatchObject({ from: '200000', base_from: '113600', base_to: '117200' });
  });
  test('another selector over the same range', () => {
    expect(diffParams({ ...s, cmp: 'sel', bsel: '{comm="db"}' })).toMatchObject({ base_from: 'now-1h', base_to: 'now', base_selector: '{comm="db"}' });
  });
});

describe('nodes', () => {
  test('the picker reads what it writes', () => {
    const cases: Array<[string, string[]]> = [
      ['', []],
      ['{comm="api"}', []],
      ['{node="n1"}', ['n1']],
      ['{node=~"n1|n2"}', ['n1', 'n2']],
      ['{comm="api",node=~"ip-10-0-1-2\\\\.ec2\\\\.internal|n\\\\(2\\\\)"}', ['ip-10-0-1-2.ec2.internal', 'n(2)']],
    ];
    for (const [sel, nodes] of cases) {
      expect(nodesOf(sel)).toEqual(nodes);
      expect(nodesOf(withNodes(sel, nodes)!)).toEqual(nodes);
    }
    for (const nodes of [['a.b', 'c|d', 'e\\f', '[g]^$'], ['x'], []]) expect(nodesOf(withNodes('{pid="1"}', nodes)!)).toEqual([...nodes].sort());
    expect(withNodes('', ['n2', 'n1', 'n2'])).toBe('{node=~"n1|n2"}');
  });
  test('what a list cannot say is null', () => {
    for (const sel of ['{node=~"n.*"}', '{node!="n1"}', '{node!~"n1|n2"}', '{node="n1",node="n2"}', '{node=~"n1|"}', '{node=""}', '{node=~"a\\\\d"}', '{node="n1"']) {
      expect(nodesOf(sel)).toBeNull();
    }
  });
  test('editing keeps the other matchers and the node matcher\'s place', () => {
    expect(withNodes('{comm="api"}', ['n1'])).toBe('{comm="api",node="n1"}');
    expect(withNodes('{node="n1",comm="api"}', ['n1', 'n2'])).toBe('{node=~"n1|n2",comm="api"}');
    expect(withNodes('{comm="api",node=~"n.*",pid="1"}', ['n3'])).toBe('{comm="api",node="n3",pid="1"}');
    expect(withNodes('{node="n1",comm="api"}', [])).toBe('{comm="api"}');
    expect(withNodes('{node="n1"}', [])).toBe('');
    expect(withNodes('', ['n1', 'n1'])).toBe('{node="n1"}');
    expect(withNodes('{bad', ['n1'])).toBeNull();
  });
  test('escapeRegex quotes every RE2 metacharacter', () => {
    expect(escapeRegex('a.b*c+d?e(f)g|h[i]j{k}l^m$n\\o')).toBe('a\\.b\\*c\\+d\\?e\\(f\\)g\\|h\\[i\\]j\\{k\\}l\\^m\\$n\\\\o');
  });
  test('shares: largest first, other last, empty values dropped', () => {
    const got = shares([
      { value: 'b', samples: 30, points: [] },
      { value: '', other: true, samples: 10, points: [] },
      { value: 'a', samples: 60, points: [] },
      { value: 'c', samples: 0, points: [] },
    ] as never);
    expect(got.map((s) => [s.value, s.other, s.share])).toEqual([['a', false, 0.6], ['b', false, 0.3], ['', true, 0.1]]);
    expect(shares([])).toEqual([]);
  });
});
