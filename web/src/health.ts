// The agent's own cost and health from /metrics, polled and shown in a
// corner: CPU and BPF time as shares of one CPU, memory, windows written
// and dropped, samples lost.

import { get, ApiError } from './api';
import * as fmt from './format';

/** parseMetrics sums each metric's samples over their labels, from the Prometheus text format. */
export function parseMetrics(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const v = Number(m[3]);
    if (!isFinite(v)) continue;
    out.set(m[1], (out.get(m[1]) ?? 0) + v);
  }
  return out;
}

interface Scrape {
  at: number; // ms
  m: Map<string, number>;
}

/** Health is the status corner. */
export class Health {
  private prev: Scrape | null = null;
  /** last is the latest scrape's metrics, or null while the agent does not answer. */
  last: Map<string, number> | null = null;
  private timer = 0;

  constructor(
    private el: HTMLElement,
    private intervalMs = 5000,
  ) {}

  start(): void {
    // A second scrape soon after the first gives the rates at once.
    void this.poll().then(() => window.setTimeout(() => void this.poll(), 1000));
    this.timer = window.setInterval(() => void this.poll(), this.intervalMs);
  }

  stop(): void {
    window.clearInterval(this.timer);
  }

  private async poll(): Promise<void> {
    let text: string;
    try {
      text = await (await get('metrics')).text();
    } catch (e) {
      const err = e as ApiError;
      this.el.className = 'health bad';
      this.el.innerHTML =
        err.status === 404
          ? '<b>agent</b> exports no metrics'
          : `<b>agent</b> ${fmt.escapeHTML(err.status === 0 ? 'not reachable: is flint agent running?' : err.message)}`;
      this.prev = null;
      this.last = null;
      return;
    }
    const now: Scrape = { at: performance.now(), m: parseMetrics(text) };
    this.render(now, this.prev);
    this.prev = now;
    this.last = now.m;
  }

  /** render shows a scrape; rates need the previous one. */
  render(now: Scrape, prev: Scrape | null): void {
    const m = now.m;
    const v = (name: string) => m.get(name) ?? 0;
    const rateOf = (name: string): string => {
      if (!prev || !m.has(name)) return '…';
      const dt = (now.at - prev.at) / 1000;
      const d = v(name) - (prev.m.get(name) ?? 0);
      return dt > 0 ? fmt.pct(Math.max(0, d) / dt) : '…';
    };
    const dropped = v('flint_windows_dropped_total');
    const lost = v('flint_samples_lost_total');
    const bad = dropped > 0 || lost > 0;
    this.el.className = 'health' + (bad ? ' warn' : '');
    const item = (label: string, value: string, title: string, cls = '') =>
      `<span class="h-item ${cls}" title="${title}"><span class="h-label">${label}</span> <span class="h-value">${value}</span></span>`;
    this.el.innerHTML = [
      '<b title="the flint agent itself">agent</b>',
      item('cpu', rateOf('flint_agent_cpu_seconds_total'), 'CPU time of the agent process, as a share of one CPU'),
      item('bpf', rateOf('flint_bpf_run_seconds_total'), 'run time of the BPF sampling program, as a share of one CPU'),
      item('rss', m.has('flint_agent_resident_memory_bytes') ? fmt.bytes(v('flint_agent_resident_memory_bytes')) : '–', 'resident memory of the agent'),
      item('windows', `${fmt.count(v('flint_windows_written_total'))} written · ${fmt.count(dropped)} dropped`, 'profiles written to the store, and dropped because the store failed', dropped > 0 ? 'h-bad' : ''),
      item('lost', fmt.count(lost), 'samples or stacks lost in the kernel (full maps or buffers, stack errors)', lost > 0 ? 'h-bad' : ''),
    ].join('');
  }
}
