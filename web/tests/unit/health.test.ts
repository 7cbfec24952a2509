import { expect, test } from 'vitest';
import { parseMetrics } from '../../src/health';
import { packageOf, deltaColor } from '../../src/colors';
import * as fmt from '../../src/format';

test('metrics are summed over labels', () => {
  const m = parseMetrics(`# HELP flint_agent_cpu_seconds_total CPU
# TYPE flint_agent_cpu_seconds_total counter
flint_agent_cpu_seconds_total 1.5
flint_samples_lost_total{reason="counts_map_full"} 2
flint_samples_lost_total{reason="stack_map_full"} 3
flint_agent_resident_memory_bytes 4.5e+07
bad line
`);
  expect(m.get('flint_agent_cpu_seconds_total')).toBe(1.5);
  expect(m.get('flint_samples_lost_total')).toBe(5);
  expect(m.get('flint_agent_resident_memory_bytes')).toBe(45e6);
  expect(m.size).toBe(3);
});

test('frames are coloured by package', () => {
  expect(packageOf('github.com/a/b.(*T).M', '/bin/x')).toBe('github.com/a/b');
  expect(packageOf('runtime.mallocgc', '/bin/x')).toBe('runtime');
  expect(packageOf('std::vector<int>::push_back', '/bin/x')).toBe('std');
  expect(packageOf('func_a', '/usr/bin/spin')).toBe('spin');
  expect(packageOf('memcpy.cold', '/lib/libc.so.6')).toBe('libc.so.6');
  expect(packageOf('[unknown]', '')).toBe('[unknown]');
});

test('diff colours', () => {
  expect(deltaColor(0, 0.5)).toBe('rgb(255, 255, 255)');
  expect(deltaColor(0.5, 0.5)).toBe('rgb(255, 45, 45)');
  expect(deltaColor(-0.5, 0.5)).toBe('rgb(45, 45, 255)');
});

test('formats', () => {
  expect(fmt.count(1234567)).toBe('1,234,567');
  expect(fmt.pct(0.1234)).toBe('12.3%');
  expect(fmt.pct(0.001234)).toBe('0.12%');
  expect(fmt.signedPct(0.05)).toBe('+5.00%');
  expect(fmt.duration(3615)).toBe('1h');
  expect(fmt.duration(5400)).toBe('1h30m');
  expect(fmt.duration(480)).toBe('8m');
  expect(fmt.bytes(45 * 1024 * 1024)).toBe('45.0 MiB');
  expect(fmt.escapeHTML('<a href="x">&')).toBe('&#60;a href=&#34;x&#34;&#62;&#38;');
});
