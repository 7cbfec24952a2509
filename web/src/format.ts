// Number, size and time formatting shared by the views.

const intFormat = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

/** count formats a whole number with thousands separators: 1,234,567. */
export function count(n: number): string {
  return intFormat.format(n);
}

/** pct formats a share (0..1) as a percentage with sensible precision. */
export function pct(share: number): string {
  if (!isFinite(share)) return '–';
  const p = share * 100;
  const a = Math.abs(p);
  if (a === 0) return '0%';
  if (a < 0.01) return (p < 0 ? '-' : '') + '<0.01%';
  if (a < 10) return p.toFixed(2) + '%';
  return p.toFixed(1) + '%';
}

/** signedPct formats a change of share with its sign: +1.20 pp. */
export function signedPct(delta: number): string {
  const s = pct(delta);
  return delta > 0 ? '+' + s : s;
}

/** rate formats samples per second: 12.3/s. */
export function rate(n: number): string {
  if (n >= 100) return count(n);
  if (n >= 10) return n.toFixed(1);
  return n.toFixed(2);
}

/** Unit is how a profile's counts read, as the API's trees say: '' for
 * samples, 'ns' for time (off-CPU and wall profiles). */
export type Unit = '' | 'ns';

/** nanos formats a time in nanoseconds with three significant digits and
 * its unit: 850 ns, 12.3 ms, 4.56 s; beyond a minute as duration does. */
export function nanos(ns: number): string {
  const a = Math.abs(ns);
  if (a < 1e3) return count(ns) + ' ns';
  if (a >= 60e9) return (ns < 0 ? '-' : '') + duration(a / 1e9);
  const [div, unit] = a < 1e6 ? [1e3, 'µs'] : a < 1e9 ? [1e6, 'ms'] : [1e9, 's'];
  return Number((ns / div).toPrecision(3)) + ' ' + unit;
}

/** value formats a count in its unit: 1,234 or 12.3 ms. */
export function value(n: number, unit: Unit): string {
  return unit === 'ns' ? nanos(n) : count(n);
}

/** amount formats a count in its unit, saying what it is: 1,234 samples or 12.3 ms. */
export function amount(n: number, unit: Unit): string {
  return unit === 'ns' ? nanos(n) : count(n) + ' samples';
}

/** rateScale turns a rate of counts a second into what it stands for:
 * nanoseconds into the threads they kept running or waiting, on average;
 * samples into the CPUs they kept busy, given the seconds one sample
 * stands for (period; 0 when unknown: samples a second as they are). */
export function rateScale(unit: Unit, period: number): number {
  if (unit === 'ns') return 1e-9;
  return period > 0 ? period : 1;
}

/** perSecond formats a rate of counts a second as rateScale reads it:
 * 2.35 threads, 1.20 CPUs, or 12.3/s. */
export function perSecond(v: number, unit: Unit, period = 0): string {
  const noun = unit === 'ns' ? ' threads' : period > 0 ? ' CPUs' : '/s';
  return rate(v * rateScale(unit, period)) + noun;
}

/** bytes formats a size in binary units: 12.3 MiB. */
export function bytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + ' ' + units[i];
}

function pad(n: number): string {
  return n < 10 ? '0' + n : String(n);
}

/** clock formats Unix seconds as local HH:MM, or HH:MM:SS when seconds matter. */
export function clock(t: number, withSeconds = false): string {
  const d = new Date(t * 1000);
  const s = pad(d.getHours()) + ':' + pad(d.getMinutes());
  return withSeconds ? s + ':' + pad(d.getSeconds()) : s;
}

/** date formats Unix seconds as local YYYY-MM-DD. */
export function date(t: number): string {
  const d = new Date(t * 1000);
  return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate());
}

/** dateTime formats Unix seconds as local YYYY-MM-DD HH:MM:SS. */
export function dateTime(t: number): string {
  return date(t) + ' ' + clock(t, true);
}

/** duration formats seconds compactly: 90 -> 1m30s, 7200 -> 2h. */
export function duration(secs: number): string {
  secs = Math.round(secs);
  if (secs < 60) return secs + 's';
  // Beyond an hour seconds are noise, beyond a day minutes.
  if (secs >= 86400) secs = Math.round(secs / 3600) * 3600;
  else if (secs >= 3600) secs = Math.round(secs / 60) * 60;
  const parts: string[] = [];
  for (const [unit, len] of [['d', 86400], ['h', 3600], ['m', 60], ['s', 1]] as const) {
    if (secs >= len) {
      parts.push(Math.floor(secs / len) + unit);
      secs %= len;
    }
  }
  // Two units say enough: 1h5m, not 1h5m15s.
  return parts.slice(0, 2).join('');
}

/** escapeHTML makes text safe to put in innerHTML. */
export function escapeHTML(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
