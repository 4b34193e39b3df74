/**
 * `cm2 demo` as a child process for the robustness tests: its output as it comes, waits on conditions (never fixed
 * sleeps), the pids it reports, and checks that what it started is gone.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { isAlive } from '../../src/infra/localInfra';

const root = path.resolve(__dirname, '..', '..');

export interface DemoProcess {
  proc: ChildProcess;
  output: () => string;
  /** Resolves with the first match of `re` in the output; rejects on timeout or when the demo exits first. */
  waitFor(re: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
  /** Resolves with the exit code (or the signal) and how long after `since` it came. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>;
  /** The pids of the gpu workers the demo reported (start and restarts). */
  gpuPids(): number[];
}

/**
 * Starts `cm2 demo --config FILE --run ID [...args]` (or `npm run demo -- …` with `viaNpm`, as a user would: then
 * signals go to npm, which forwards them); `env` is merged into this process's environment (undefined removes).
 */
export function startDemo(configFile: string, runId: string, env: Record<string, string | undefined> = {}, args: string[] = [], opts: { viaNpm?: boolean } = {}): DemoProcess {
  const merged: NodeJS.ProcessEnv = { ...process.env };
  for (const [k, v] of Object.entries(env)) {
    if (v === undefined) delete merged[k];
    else merged[k] = v;
  }
  const demoArgs = ['--config', configFile, '--run', runId, ...args];
  const proc = opts.viaNpm
    ? spawn('npm', ['run', '--silent', 'demo', '--', ...demoArgs], { env: merged, cwd: root, stdio: ['ignore', 'pipe', 'pipe'] })
    : spawn(process.execPath, [path.join(root, 'bin', 'cm2.js'), 'demo', ...demoArgs], { env: merged, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const listeners = new Set<() => void>();
  const onData = (d: Buffer) => {
    out += d.toString();
    for (const l of [...listeners]) l();
  };
  proc.stdout!.on('data', onData);
  proc.stderr!.on('data', onData);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((resolve) => {
    proc.once('exit', (code, signal) => {
      resolve({ code, signal, at: Date.now() });
      for (const l of [...listeners]) l();
    });
  });
  return {
    proc,
    output: () => out,
    exited,
    gpuPids: () => [...out.matchAll(/gpu worker (?:started|restarted) \(pid (\d+)\)/g)].map((m) => Number(m[1])),
    waitFor: (re, timeoutMs = 600_000) =>
      new Promise<RegExpMatchArray>((resolve, reject) => {
        const check = () => {
          const m = out.match(re);
          if (m) {
            done();
            resolve(m);
          } else if (proc.exitCode !== null || proc.signalCode !== null) {
            done();
            reject(new Error(`cm2 demo exited (${proc.exitCode ?? proc.signalCode}) before printing ${re}:\n${out.slice(-4000)}`));
          }
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`cm2 demo did not print ${re} within ${timeoutMs / 1000}s:\n${out.slice(-4000)}`));
        }, timeoutMs);
        const done = () => {
          clearTimeout(timer);
          listeners.delete(check);
        };
        listeners.add(check);
        check();
      }),
  };
}

/** Waits until none of `pids` is alive (throws after `timeoutMs` naming the survivors). */
export async function allGone(pids: readonly number[], timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const alive = pids.filter(isAlive);
    if (alive.length === 0) return;
    if (Date.now() > deadline) throw new Error(`still running after ${timeoutMs / 1000}s: pids ${alive.join(', ')}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Polls `check` until it returns a value (not undefined); throws with `what` after `timeoutMs`. */
export async function eventually<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 600_000, everyMs = 250): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined) return v;
    } catch {
      /* not yet */
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs / 1000}s waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
