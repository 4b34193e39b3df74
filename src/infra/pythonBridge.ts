/**
 * A long-lived Python helper process spoken to in JSON lines (`{"id": n, "op": ..., ...}` in, `{"id": n, "ok": true,
 * ...}` or `{"id": n, "ok": false, "error": ...}` out), as the benchmark bridges use it (src/infra/bfclBridge.ts for
 * bfcl-eval, src/infra/tau2Bridge.ts for τ²-Bench): started on the first request, started again on the next request
 * after it dies (the requests it had in flight fail with the reason and the tail of its stderr).
 *
 * The process gets a minimal environment (PATH, HOME, locale, TMPDIR, the project cache), never the worker's: the
 * benchmarks run model-written text through Python (BFCL `eval`s call strings), so nothing a model writes can read a
 * secret from the environment. It holds the Node process alive only while requests wait for answers, so an idle
 * bridge never keeps a worker or a CLI from exiting (the bridge then sees the end of its input and exits too).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import os from 'node:os';
import { createInterface } from 'node:readline';

export class BridgeError extends Error {
  override readonly name: string = 'BridgeError';
}

interface Pending {
  resolve: (v: Record<string, unknown>) => void;
  reject: (e: Error) => void;
  op: string;
}

const PASSED_ENV = ['PATH', 'HOME', 'LANG', 'LC_ALL', 'TMPDIR', 'CM2_CACHE_DIR'];

export interface PythonBridgeSpec {
  /** what the errors call it ("the BFCL bridge") */
  name: string;
  script: string;
  /** the interpreter (resolved on the first start: it may make an environment) */
  python: () => string;
  /** the error class the bridge's failures are reported with */
  error: new (message: string) => Error;
  /** requests sent first to every process after the first one (state to restore: loaded data) */
  replay?: () => Record<string, unknown>[];
  /** stderr lines left out of an error's tail (progress noise) */
  noise?: RegExp;
}

export class PythonBridge {
  private child: ChildProcess | undefined;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private stderrTail: string[] = [];
  /** Bumped each time a process starts: sessions opened under an older one are gone. */
  generation = 0;

  constructor(private readonly spec: PythonBridgeSpec) {}

  private start(): ChildProcess {
    const python = this.spec.python();
    const env: Record<string, string> = { PYTHONUNBUFFERED: '1', PYTHONDONTWRITEBYTECODE: '1' };
    for (const k of PASSED_ENV) if (process.env[k]) env[k] = process.env[k]!;
    const child = spawn(python, [this.spec.script], { stdio: ['pipe', 'pipe', 'pipe'], env, cwd: os.tmpdir() });
    this.generation++;
    this.stderrTail = [];
    createInterface({ input: child.stdout! }).on('line', (line) => this.onLine(line));
    createInterface({ input: child.stderr! }).on('line', (line) => {
      this.stderrTail.push(line);
      if (this.stderrTail.length > 40) this.stderrTail.shift();
    });
    child.on('error', (e) => this.onExit(child, `could not run ${python}: ${e.message}`));
    child.on('exit', (code, signal) => this.onExit(child, `${this.spec.name} exited (${signal ?? code})`));
    child.stdin!.on('error', () => {
      /* the exit handler reports it */
    });
    this.child = child;
    this.hold(child, false);
    for (const body of this.generation > 1 ? (this.spec.replay?.() ?? []) : []) {
      const id = this.nextId++;
      this.pending.set(id, { resolve: () => undefined, reject: () => undefined, op: String(body['op']) });
      child.stdin!.write(`${JSON.stringify({ ...body, id })}\n`);
    }
    if (this.pending.size > 0) this.hold(child, true);
    return child;
  }

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
    else p.reject(new this.spec.error(`${this.spec.name} ${p.op}: ${String(msg['error'] ?? 'failed')}`));
  }

  private onExit(child: ChildProcess, why: string): void {
    if (this.child !== child) return;
    this.child = undefined;
    const noise = this.spec.noise;
    const tail = this.stderrTail.filter((l) => !noise || !noise.test(l)).slice(-8).join('\n');
    for (const [id, p] of this.pending) {
      this.pending.delete(id);
      p.reject(new this.spec.error(`${why} during ${p.op}${tail ? `:\n${tail}` : ''}`));
    }
  }

  /** One request; resolves with the answer's fields, rejects with the bridge's error. */
  request<T extends Record<string, unknown> = Record<string, unknown>>(op: string, body: Record<string, unknown> = {}): Promise<T> {
    const child = this.child ?? this.start();
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
