// Starts what the browser tests need: flint built from this checkout, a
// store with two hours of fixture profiles (tests/fixture), the agent
// serving it and sampling this machine, and the spin fixture burning CPU
// so there is live data with known functions.

import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export const repo = resolve(import.meta.dirname, '../../..');
export const chromiumPath = process.env.CHROMIUM ?? '/usr/bin/chromium';

/** skipReason says why the browser tests cannot run here, or ''. */
export function skipReason(): string {
  if (process.getuid?.() !== 0) return 'the agent needs root to load its BPF program (run as root; CI does)';
  if (!existsSync(chromiumPath)) return `no browser at ${chromiumPath} (apt-get install chromium, or set CHROMIUM)`;
  for (const tool of ['go', 'gcc']) {
    try {
      execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' });
    } catch {
      return `${tool} is not installed`;
    }
  }
  return '';
}

function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => res(port));
    });
    s.on('error', rej);
  });
}

async function waitFor<T>(what: string, secs: number, f: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + secs * 1000;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await f();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`timed out after ${secs}s waiting for ${what}${last ? `: ${last}` : ''}`);
}

export interface Agent {
  url: string;
  dir: string;
  log: () => string;
  stop: () => Promise<void>;
}

/** startAgent builds flint and the fixtures, starts the agent and waits
 * until it has stored samples of the spin fixture. */
export async function startAgent(): Promise<Agent> {
  const dir = mkdtempSync(join(tmpdir(), 'flint-web-'));
  const run = (cmd: string, args: string[]) => execFileSync(cmd, args, { cwd: repo, stdio: ['ignore', 'pipe', 'inherit'] });
  run('go', ['build', '-o', join(dir, 'flint'), './cmd/flint']);
  run('gcc', ['-O1', '-fno-omit-frame-pointer', '-o', join(dir, 'spin'), 'testdata/fixtures/spin.c']);
  run('go', ['run', './web/tests/fixture', '-dir', join(dir, 'data')]);

  const port = await freePort();
  const url = `http://127.0.0.1:${port}/`;
  let output = '';
  const agent = spawn(join(dir, 'flint'), ['agent', '--data-dir', join(dir, 'data'), '--listen', `127.0.0.1:${port}`, '--window', '2s', '--off-cpu'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  agent.stdout!.on('data', (b) => (output += b));
  agent.stderr!.on('data', (b) => (output += b));
  const children: ChildProcess[] = [agent];
  const stop = async () => {
    for (const c of children.reverse()) {
      if (c.exitCode === null) {
        c.kill('SIGTERM');
        await new Promise((r) => c.once('exit', r));
      }
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitFor('the agent to serve /healthz', 30, async () => {
      if (agent.exitCode !== null) throw new Error(`agent exited: ${output}`);
      return (await fetch(url + 'healthz')).ok || undefined;
    });
    // spin burns 50/30/20% in func_a/func_b/func_c; its windows reach the
    // store every 2 s.
    children.push(spawn(join(dir, 'spin'), ['20'], { stdio: 'ignore' }));
    const sel = encodeURIComponent('{comm="spin"}');
    await waitFor('samples of spin in the store', 60, async () => {
      const r = await fetch(`${url}api/v1/series?from=now-1m&selector=${sel}`);
      const body = (await r.json()) as { series: Array<{ samples: number }> };
      const n = body.series.reduce((a, s) => a + s.samples, 0);
      return n >= 300 ? n : undefined;
    });
  } catch (e) {
    await stop();
    throw e;
  }
  return { url, dir, log: () => output, stop };
}
