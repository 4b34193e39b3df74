/** Workers as child processes, so tests can kill them the hard way (SIGKILL) and start new ones. */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Cm2Config } from '../../src/run/config';
import { track, untrack } from './leftovers';

const root = path.resolve(__dirname, '..', '..');

/** Writes a config as a file the CLI can load (JSON is valid YAML). */
export function writeConfigFile(cfg: Cm2Config): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'cm2-cfg-'));
  const file = path.join(dir, 'config.yaml');
  writeFileSync(file, JSON.stringify(cfg, null, 2));
  return file;
}

export interface ChildWorker {
  proc: ChildProcess;
  output: () => string;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/**
 * Starts `cm2 worker` in a child process and resolves once it polls its task queues; `args` are added to its command
 * line. With `logFile`, its stdout and stderr are also appended to that file as they come (and how it ended);
 * `startTimeoutMs` (default 60 s) bounds the start (a workflows worker bundles the workflow code first: slow on a busy machine).
 */
export async function startChildWorker(configFile: string, queues = 'workflows,api,gpu', env: NodeJS.ProcessEnv = {}, args: string[] = [], opts: { logFile?: string; startTimeoutMs?: number } = {}): Promise<ChildWorker> {
  return spawnWorker(process.execPath, [path.join(root, 'bin', 'cm2.js'), 'worker', '--config', configFile, '--queues', queues, ...args], env, 'cm2 worker polling', `cm2 worker --queues ${queues}`, opts);
}

/**
 * The PyTorch worker of the train queue (python/cm2_torch: `python -m cm2_torch.worker -c FILE`) in the environment of
 * scripts/ensure-torch.mjs (`python`: its interpreter), on the CPU, float32; `ranks` > 1 launches it with torchrun.
 */
export async function startTorchWorker(python: string, configFile: string, env: NodeJS.ProcessEnv = {}, opts: { logFile?: string; startTimeoutMs?: number; ranks?: number } = {}): Promise<ChildWorker> {
  const pkg = path.join(root, 'python', 'cm2_torch');
  const ranks = opts.ranks ?? 1;
  // several ranks: torchrun (torch.distributed.run) on this machine, gloo on the CPU
  const launcher = ranks > 1 ? ['-m', 'torch.distributed.run', '--standalone', '--nproc_per_node', String(ranks)] : [];
  return spawnWorker(python, [...launcher, '-m', 'cm2_torch.worker', '-c', configFile, '--device', 'cpu'], {
    PYTHONPATH: pkg, PYTHONUNBUFFERED: '1', OMP_NUM_THREADS: process.env['OMP_NUM_THREADS'] ?? '2', ...env,
  }, 'cm2_torch worker polling', 'cm2_torch worker', { startTimeoutMs: 120_000, ...opts });
}

async function spawnWorker(cmd: string, argv: string[], env: NodeJS.ProcessEnv, ready: string, label: string, opts: { logFile?: string; startTimeoutMs?: number }): Promise<ChildWorker> {
  const { logFile, startTimeoutMs = 60_000 } = opts;
  const proc = spawn(cmd, argv, {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  track(proc.pid);
  proc.once('exit', () => untrack(proc.pid));
  let out = '';
  const file = logFile ? createWriteStream(logFile, { flags: 'a' }) : undefined;
  file?.on('error', () => undefined);
  file?.write(`--- ${new Date().toISOString()} ${label} started, pid ${proc.pid}\n`);
  proc.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
    file?.write(d);
  });
  proc.stderr!.on('data', (d: Buffer) => {
    out += d.toString();
    file?.write(d);
  });
  proc.once('close', (code, signal) => file?.end(`--- ${new Date().toISOString()} exited (${signal ?? `code ${code}`})\n`));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`worker did not start within ${startTimeoutMs / 1000}s:\n${out}`)), startTimeoutMs);
    const check = () => {
      if (out.includes(ready)) {
        clearTimeout(timer);
        resolve();
      }
    };
    proc.stdout!.on('data', check);
    proc.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`worker exited with ${code} during start:\n${out}`));
    });
  });
  return {
    proc,
    output: () => out,
    kill: (signal: NodeJS.Signals = 'SIGKILL') =>
      new Promise<void>((resolve) => {
        if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
        proc.once('exit', () => resolve());
        proc.kill(signal);
      }),
  };
}
