import { expect, test } from 'vitest';
import { amount, nanos, perSecond, value } from '../../src/format';

test('nanoseconds read in the largest unit that keeps them above 1', () => {
  const cases: Array<[number, string]> = [
    [0, '0 ns'],
    [850, '850 ns'],
    [12_345, '12.3 µs'],
    [1_500_000, '1.5 ms'],
    [999_400_000, '999 ms'],
    [4_560_000_000, '4.56 s'],
    [90e9, '1m30s'],
    [-2e6, '-2 ms'],
  ];
  for (const [ns, want] of cases) expect(nanos(ns)).toBe(want);
});

test('counts read as samples or as time', () => {
  expect(amount(1234, '')).toBe('1,234 samples');
  expect(amount(1234e6, 'ns')).toBe('1.23 s');
  expect(value(1234, '')).toBe('1,234');
  expect(value(5e6, 'ns')).toBe('5 ms');
});

test('rates: samples a second as CPUs, or as they are; time a second as threads', () => {
  expect(perSecond(12.345, '')).toBe('12.3/s');
  expect(perSecond(99, '', 1 / 99)).toBe('1.00 CPUs');
  expect(perSecond(19 * 12, '', 1 / 19)).toBe('12.0 CPUs');
  expect(perSecond(2.5e9, 'ns')).toBe('2.50 threads');
  expect(perSecond(2.5e9, 'ns', 1e-9)).toBe('2.50 threads');
});
