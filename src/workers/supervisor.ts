/**
 * Supervision of the workers `cm2 demo` starts: a worker process that dies (an out-of-memory kill is a SIGKILL) or an
 * in-process worker set that fails is started again after a bounded, growing delay, with a message; after too many
 * failures in a row the supervisor gives up and says why. Activities are idempotent and checkpointed, so a restarted
 * worker picks up the retried attempt where S3 left off.
 *
 * A child worker gets an IPC channel: when its parent dies without cleaning up (SIGKILL, a crash), the channel closes
 * and the child shuts itself down (`cm2 worker` watches it), so nothing the demo started outlives it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type { RunningWorkers } from './index';

/** Waits `ms`, or less when `signal` aborts. */
const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal.aborted) return resolve();
    const onAbort = () => {
      clearTimeout(t);
      resolve();
    };
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });

export interface BackoffOptions {
  /** Delay before the first restart. */
  initialMs: number;
  /** The delay doubles per failure in a row, up to this. */
  maxMs: number;
  /** A worker that ran this long before dying starts a new series of failures (delay back to `initialMs`). */
  resetAfterMs: number;
  /** Failures in a row after which the supervisor gives up. */
  maxFailures: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { initialMs: 1000, maxMs: 30_000, resetAfterMs: 120_000, maxFailures: 8 };

/** The delay before restart number `failures` of a series (1-based): initial, 2×, 4×, … capped at `maxMs` (pure). */
export function restartDelayMs(failures: number, o: Pick<BackoffOptions, 'initialMs' | 'maxMs'> = DEFAULT_BACKOFF): number {
  return Math.min(o.maxMs, o.initialMs * 2 ** Math.max(0, Math.min(30, failures - 1)));
}

/** How a process ended, in words (pure). */
export function exitText(code: number | null, signal: NodeJS.Signals | null): string {
  if (signal === 'SIGKILL') return 'was killed by SIGKILL (an out-of-memory kill looks like this)';
  if (signal) return `was killed by ${signal}`;
  return `exited with code ${code ?? '?'}`;
}


/** Counts failures in a row and decides the next delay, or that it is time to give up. */
class Series {
  failures = 0;
  constructor(private readonly o: BackoffOptions) {}
  /** After a failure of something that had run `upMs`: the delay before the next start, or undefined to give up. */
  next(upMs: number): number | undefined {
    if (upMs >= this.o.resetAfterMs) this.failures = 0;
    this.failures++;
    return this.failures > this.o.maxFailures ? undefined : restartDelayMs(this.failures, this.o);
  }
}

export interface ChildSpec {
  /** Shown in messages: `gpu worker`. */
  name: string;
  command: string;
  args: string[];
  env?: NodeJS.ProcessEnv;
  /** A stdout line containing this means the child is ready (e.g. `cm2 worker polling`). */
  readyText: string;
  /** Child output lines to pass on (the rest stays quiet, but the last lines are kept for error messages). */
  forward?: (line: string) => boolean;
  /** How long a start may take. */
  startTimeoutMs?: number;
}

export interface SuperviseOptions {
  log: (line: string) => void;
  /** Called once when the supervisor gives up (the child keeps failing); the caller decides what to do. */
  onGiveUp?: (error: Error) => void;
  backoff?: Partial<BackoffOptions>;
}

/**
 * What both supervisors share: restarts after a death with backoff until a start succeeds, giving up after too many
 * failures in a row, and a stop that prevents any further restart.
 */
abstract class Supervisor {
  protected stopping = false;
  protected readonly abort = new AbortController();
  protected readonly series: Series;
  /** Restarts so far. */
  restarts = 0;

  constructor(protected readonly opts: SuperviseOptions) {
    this.series = new Series({ ...DEFAULT_BACKOFF, ...opts.backoff });
  }

  /** How the log names what restarts: 'it' (a process) or 'them' (a set of workers). */
  protected abstract readonly what: 'it' | 'them';
  /** Reports giving up (after `series.failures - 1` failures in a row). */
  protected abstract giveUp(reason: string): void;
  /** Starts it again; throws when it cannot, and `reasonOf` names why. */
  protected abstract startAgain(): Promise<void>;
  protected abstract reasonOf(err: unknown): string;

  /** Restarts after a death (it had been up `upMs`), with backoff. */
  protected async restart(why: string, upMs: number): Promise<void> {
    let delay = this.series.next(upMs);
    let reason = why;
    while (!this.stopping) {
      if (delay === undefined) return this.giveUp(reason);
      this.opts.log(`${reason}; restarting ${this.what} in ${(delay / 1000).toFixed(0)}s (restart ${this.restarts + 1})`);
      await sleep(delay, this.abort.signal);
      if (this.stopping) return;
      this.restarts++;
      try {
        await this.startAgain();
        return;
      } catch (e) {
        reason = this.reasonOf(e);
        delay = this.series.next(0);
      }
    }
  }
}

/**
 * A child process kept running: started once (the returned promise rejects if that first start fails), restarted
 * after it dies unless `stop()` was called.
 */
export class SupervisedChild extends Supervisor {
  private proc: ChildProcess | undefined;
  private readonly tail: string[] = [];
  protected readonly what = 'it';

  constructor(private readonly spec: ChildSpec, opts: SuperviseOptions) {
    super(opts);
  }

  /** Starts a supervised child; resolves once it is ready, rejects if that first start fails. */
  static async start(spec: ChildSpec, opts: SuperviseOptions): Promise<SupervisedChild> {
    const s = new SupervisedChild(spec, opts);
    await s.begin();
    return s;
  }

  /** The first start (resolves once the child is ready). `stop()` may be called before it settles. */
  begin(): Promise<void> {
    if (this.stopping) return Promise.reject(new Error(`the ${this.spec.name} was stopped before it started`));
    return this.spawnOnce();
  }

  /** The running child's pid (undefined between a death and its restart). */
  get pid(): number | undefined {
    return this.proc && this.proc.exitCode === null && this.proc.signalCode === null ? this.proc.pid : undefined;
  }

  /** The last lines the child printed (for error messages). */
  lastLines(n = 8): string[] {
    return this.tail.slice(-n);
  }

  private keep(line: string): void {
    this.tail.push(line);
    if (this.tail.length > 40) this.tail.shift();
  }

  /** Spawns the child and resolves once it is ready; rejects if it exits or times out first. */
  private spawnOnce(): Promise<void> {
    const { spec } = this;
    // Its own process group: a terminal's Ctrl-C reaches the supervisor only, which stops the child in order (a child
    // that stopped on its own would look like a death to restart from).
    const proc = spawn(spec.command, spec.args, { env: spec.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe', 'ipc'], detached: true });
    this.proc = proc;
    // The IPC channel is there for the child to notice our death; it must not keep this process alive.
    proc.channel?.unref();
    proc.on('error', () => undefined); // spawn errors surface as 'exit' (or the start timeout)
    let buffered = '';
    const lines = (chunk: Buffer) => {
      buffered += chunk.toString();
      const parts = buffered.split('\n');
      buffered = parts.pop() ?? '';
      for (const line of parts) {
        this.keep(line);
        try {
          if (spec.forward?.(line)) this.opts.log(`  ${spec.name}: ${line}`);
        } catch {
          /* a display error must not touch the child */
        }
      }
    };
    proc.stdout!.on('data', lines);
    proc.stderr!.on('data', lines);
    // Output of a child we no longer read must not fill its pipe.
    proc.stdout!.on('error', () => undefined);
    proc.stderr!.on('error', () => undefined);
    const startedAt = Date.now();
    return new Promise<void>((resolve, reject) => {
      let ready = false;
      const timer = setTimeout(() => {
        if (ready) return;
        proc.kill('SIGKILL');
        reject(new Error(`the ${spec.name} did not start within ${(spec.startTimeoutMs ?? 180_000) / 1000}s; its last lines:\n${this.lastLines().join('\n')}`));
      }, spec.startTimeoutMs ?? 180_000);
      const onData = (chunk: Buffer) => {
        if (!ready && chunk.toString().includes(spec.readyText)) {
          ready = true;
          clearTimeout(timer);
          proc.stdout!.off('data', onData);
          resolve();
        }
      };
      proc.stdout!.on('data', onData);
      proc.once('exit', (code, signal) => {
        clearTimeout(timer);
        if (!ready) {
          reject(new Error(this.stopping ? `the ${spec.name} was stopped during its start` : `the ${spec.name} ${exitText(code, signal)} during start; its last lines:\n${this.lastLines().join('\n')}`));
          return;
        }
        if (!this.stopping) void this.restart(`the ${spec.name} (pid ${proc.pid}) ${exitText(code, signal)}`, Date.now() - startedAt);
      });
    });
  }

  protected giveUp(reason: string): void {
    const err = new Error(`${reason}; it failed ${this.series.failures - 1} times in a row, giving up. Its last lines:\n${this.lastLines().join('\n')}`);
    this.opts.log(`${this.spec.name}: ${err.message}`);
    this.opts.onGiveUp?.(err);
  }

  protected async startAgain(): Promise<void> {
    await this.spawnOnce();
    this.opts.log(`${this.spec.name} restarted (pid ${this.proc?.pid}); the interrupted activity is retried from its last checkpoint`);
  }

  protected reasonOf(err: unknown): string {
    return (err as Error).message.split('\n')[0]!;
  }

  /** Stops the child for good: SIGTERM (graceful), SIGKILL after `graceMs`. Never restarts it. */
  async stop(graceMs = 15_000): Promise<void> {
    this.stopping = true;
    this.abort.abort();
    const proc = this.proc;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => proc.kill('SIGKILL'), graceMs);
      proc.once('exit', () => {
        clearTimeout(timer);
        resolve();
      });
      proc.kill('SIGTERM');
    });
  }

  /** Kills the child at once (a forced exit), without restarting it. */
  kill(): void {
    this.stopping = true;
    this.abort.abort();
    if (this.proc && this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill('SIGKILL');
  }
}

/**
 * In-process workers kept running: when the set fails (a worker's run() rejects; `startWorkers` then stops the rest),
 * it is started again with backoff.
 */
export class SupervisedWorkers extends Supervisor {
  private current: RunningWorkers | undefined;
  protected readonly what = 'them';

  constructor(private readonly name: string, private readonly startSet: () => Promise<RunningWorkers>, opts: SuperviseOptions) {
    super(opts);
  }

  static async start(name: string, startSet: () => Promise<RunningWorkers>, opts: SuperviseOptions): Promise<SupervisedWorkers> {
    const s = new SupervisedWorkers(name, startSet, opts);
    await s.begin();
    return s;
  }

  /** The first start. A set that comes up after `stop()` was called is shut down at once. */
  async begin(): Promise<void> {
    const set = await this.startSet();
    if (this.stopping) {
      await set.shutdown().catch(() => undefined);
      return;
    }
    this.watch(set);
  }

  private watch(set: RunningWorkers): void {
    this.current = set;
    const startedAt = Date.now();
    set.done.then(
      () => {
        if (!this.stopping) void this.restart(`the ${this.name} stopped`, Date.now() - startedAt);
      },
      (e: unknown) => {
        if (!this.stopping) void this.restart(`the ${this.name} failed: ${e instanceof Error ? e.message : String(e)}`, Date.now() - startedAt);
      },
    );
  }

  protected giveUp(reason: string): void {
    const err = new Error(`${reason}; it failed ${this.series.failures - 1} times in a row, giving up`);
    this.opts.log(err.message);
    this.opts.onGiveUp?.(err);
  }

  protected async startAgain(): Promise<void> {
    const set = await this.startSet();
    if (this.stopping) {
      await set.shutdown().catch(() => undefined);
      return;
    }
    this.watch(set);
    this.opts.log(`${this.name} restarted`);
  }

  protected reasonOf(err: unknown): string {
    return `the ${this.name} could not start: ${err instanceof Error ? err.message : String(err)}`;
  }

  /** Shuts the workers down (graceful; bounded by `timeoutMs`, after which it returns anyway). */
  async stop(timeoutMs = 30_000): Promise<void> {
    this.stopping = true;
    this.abort.abort();
    const set = this.current;
    if (!set) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      set.shutdown().catch(() => undefined),
      new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs))),
    ]);
    clearTimeout(timer);
  }
}
