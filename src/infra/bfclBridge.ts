/**
 * The BFCL bridge process (issue 34; python/bfcl_bridge/bridge.py): PyPI's `bfcl-eval` in a long-lived Python process,
 * one per worker, spoken to in JSON lines. It executes a model's calls against BFCL's own multi-turn backends and
 * scores entries with BFCL's own checker; src/stages/eval/bfcl/multiTurn.ts drives the episodes.
 *
 * The Python comes from scripts/ensure-bfcl.mjs (a cached venv; `CM2_BFCL_PYTHON` names another interpreter with
 * `bfcl-eval` installed). The process gets a minimal environment (PATH, HOME, locale, TMPDIR), never the worker's:
 * BFCL evaluates the model's call strings with Python's `eval`, so nothing the model writes can read a secret from
 * its environment. A process that dies is started again on the next request, with the categories loaded before; the
 * requests it had in flight fail with the reason (sessions it held are gone: an episode that loses its session fails,
 * and its chunk is retried without the entries that finished).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { ensureBfcl } from '../../scripts/ensure-bfcl.mjs';
import { projectRoot } from './binaries';

export class BfclBridgeError extends Error {
  override readonly name = 'BfclBridgeError';
}

interface Pending {
  resolve: (v: Record<string, unknown>) => void;
  reject: (e: Error) => void;
  op: string;
}

const SCRIPT = path.join(projectRoot, 'python', 'bfcl_bridge', 'bridge.py');
const PASSED_ENV = ['PATH', 'HOME', 'LANG', 'LC_ALL', 'TMPDIR', 'CM2_CACHE_DIR'];

/** The interpreter to run the bridge with: CM2_BFCL_PYTHON, else the project's cached venv (made when missing). */
export function bfclPythonPath(env: NodeJS.ProcessEnv = process.env, log: (line: string) => void = (l) => console.error(l)): string {
  if (env['CM2_BFCL_PYTHON']) return env['CM2_BFCL_PYTHON'];
  const py = ensureBfcl(env, log);
  if (!py) throw new BfclBridgeError('the BFCL environment could not be made (node scripts/ensure-bfcl.mjs says why)');
  return py;
}

export interface BfclBridgeOptions {
  python?: string;
  log?: (line: string) => void;
}

/** A client of one bridge process (started on the first request, restarted after it dies). */
export class BfclBridge {
  private child: ChildProcess | undefined;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private stderrTail: string[] = [];
  /** Categories loaded so far: a restarted process loads them again before anything else. */
  private readonly loaded = new Set<string>();
  /** Bumped each time a process starts: sessions opened under an older one are gone. */
  generation = 0;

  constructor(private readonly opts: BfclBridgeOptions = {}) {}

  private start(): ChildProcess {
    const python = this.opts.python ?? bfclPythonPath(process.env, this.opts.log);
    const env: Record<string, string> = { PYTHONUNBUFFERED: '1', PYTHONDONTWRITEBYTECODE: '1' };
    for (const k of PASSED_ENV) if (process.env[k]) env[k] = process.env[k]!;
    const child = spawn(python, [SCRIPT], { stdio: ['pipe', 'pipe', 'pipe'], env, cwd: os.tmpdir() });
    this.generation++;
    this.stderrTail = [];
    createInterface({ input: child.stdout! }).on('line', (line) => this.onLine(line));
    createInterface({ input: child.stderr! }).on('line', (line) => {
      this.stderrTail.push(line);
      if (this.stderrTail.length > 40) this.stderrTail.shift();
    });
    child.on('error', (e) => this.onExit(child, `could not run ${python}: ${e.message}`));
    child.on('exit', (code, signal) => this.onExit(child, `the BFCL bridge exited (${signal ?? code})`));
    child.stdin!.on('error', () => {
      /* the exit handler reports it */
    });
    this.child = child;
    this.hold(child, false);
    for (const category of this.loaded) {
      const id = this.nextId++;
      this.pending.set(id, { resolve: () => undefined, reject: () => undefined, op: 'load' });
      child.stdin!.write(`${JSON.stringify({ id, op: 'load', category })}\n`);
    }
    if (this.pending.size > 0) this.hold(child, true);
    return child;
  }

  /**
   * Keeps the Node process alive only while requests wait for answers: an idle bridge must not keep a worker (or a
   * CLI) from exiting when it is done; the bridge then sees the end of its input and exits too.
   */
  private hold(child: ChildProcess, on: boolean): void {
    const streams = [child.stdin, child.stdout, child.stderr] as unknown as Array<{ ref?: () => void; unref?: () => void } | null>;
    if (on) {
      child.ref();
      for (const s of streams) s?.ref?.();
    } else {
      child.unref();
      for (const s of streams) s?.unref?.();
    }
  }

  private onLine(line: string): void {
    let msg: Record<string, unknown>;
    try {
      msg = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return; // not an answer (the bridge keeps stdout for answers; ignore anything else)
    }
    const p = this.pending.get(msg['id'] as number);
    if (!p) return;
    this.pending.delete(msg['id'] as number);
    if (this.pending.size === 0 && this.child) this.hold(this.child, false);
    if (msg['ok'] === true) p.resolve(msg);
    else p.reject(new BfclBridgeError(`BFCL bridge ${p.op}: ${String(msg['error'] ?? 'failed')}`));
  }

  private onExit(child: ChildProcess, why: string): void {
    if (this.child !== child) return;
    this.child = undefined;
    const tail = this.stderrTail.filter((l) => !/^-+$|^ID: /.test(l)).slice(-8).join('\n');
    for (const [id, p] of this.pending) {
      this.pending.delete(id);
      p.reject(new BfclBridgeError(`${why} during ${p.op}${tail ? `:\n${tail}` : ''}`));
    }
  }

  /** One request; resolves with the answer's fields, rejects with the bridge's error. */
  request<T extends Record<string, unknown> = Record<string, unknown>>(op: string, body: Record<string, unknown> = {}): Promise<T> {
    const child = this.child ?? this.start();
    if (op === 'load' && typeof body['category'] === 'string') this.loaded.add(body['category']);
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      if (this.pending.size === 0) this.hold(child, true);
      this.pending.set(id, { resolve: resolve as (v: Record<string, unknown>) => void, reject, op });
      child.stdin!.write(`${JSON.stringify({ ...body, id, op })}\n`);
    });
  }

  /** Ends the process (pending requests fail). */
  async close(): Promise<void> {
    const child = this.child;
    if (!child) return;
    const gone = new Promise<void>((r) => child.once('exit', () => r()));
    child.stdin!.end();
    const t = setTimeout(() => child.kill('SIGKILL'), 5000);
    await gone;
    clearTimeout(t);
  }
}

let shared: BfclBridge | undefined;

/** The worker's bridge (one process per worker process). */
export function sharedBfclBridge(opts: BfclBridgeOptions = {}): BfclBridge {
  shared ??= new BfclBridge(opts);
  return shared;
}
