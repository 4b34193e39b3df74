/**
 * The experiment trackers' own programs for the tracking tests (issue 35): a real MLflow tracking server
 * (`mlflow server`, SQLite backend, a port of its own) and TensorBoard's own event-file reader (its EventAccumulator,
 * run by python/trackers/read_tensorboard.py). Both from scripts/ensure-trackers.mjs's environment; `.ci/run` makes it
 * and sets CM2_REQUIRE_TRACKERS=1, so in CI a missing one fails the tests instead of skipping them.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { freePort } from '../../src/infra/localInfra';
import { trackersPython } from '../../scripts/ensure-trackers.mjs';
import { track, untrack } from './leftovers';

const root = path.resolve(__dirname, '..', '..');

/** Why the tracker tests cannot run here, or undefined when they can. Throws instead when CI requires them. */
export function trackersUnavailable(): string | undefined {
  if (trackersPython()) return undefined;
  const reason = 'the trackers environment is missing (node scripts/ensure-trackers.mjs makes it)';
  if (process.env['CM2_REQUIRE_TRACKERS'] === '1') throw new Error(`CM2_REQUIRE_TRACKERS=1 but ${reason}`);
  return reason;
}

export interface MlflowServer {
  uri: string;
  port: number;
  logFile: string;
  close(): Promise<void>;
}

/** Starts `mlflow server` (on `port`, or a free one) and waits until its REST API answers. */
export async function startMlflowServer(opts: { port?: number; dir?: string } = {}): Promise<MlflowServer> {
  const py = trackersPython();
  if (!py) throw new Error('trackers environment missing');
  const port = opts.port ?? (await freePort());
  const dir = opts.dir ?? mkdtempSync(path.join(tmpdir(), 'cm2-mlflow-'));
  const logFile = path.join(dir, 'mlflow.log');
  const fd = openSync(logFile, 'a');
  let child: ChildProcess;
  try {
    // `python -m mlflow`: the venv's console scripts name the folder it was made in (setup-util.mjs stages it)
    child = spawn(py, ['-m', 'mlflow', 'server', '--backend-store-uri', `sqlite:///${path.join(dir, 'mlflow.db')}`, '--default-artifact-root', path.join(dir, 'artifacts'),
      '--host', '127.0.0.1', '--port', String(port), '--workers', '1'], { stdio: ['ignore', fd, fd], detached: true });
  } finally {
    closeSync(fd);
  }
  track(child.pid);
  const uri = `http://127.0.0.1:${port}`;
  const close = async () => {
    if (child.exitCode === null) {
      try {
        process.kill(-child.pid!, 'SIGTERM');
      } catch {
        /* gone */
      }
      await new Promise((r) => child.once('exit', r));
    }
    untrack(child.pid);
  };
  for (let i = 0; i < 240; i++) {
    if (child.exitCode !== null) throw new Error(`mlflow server exited ${child.exitCode}: ${readFileSync(logFile, 'utf8').slice(-2000)}`);
    try {
      const r = await fetch(`${uri}/api/2.0/mlflow/experiments/search?max_results=1`, { signal: AbortSignal.timeout(2000) });
      if (r.ok) return { uri, port, logFile, close };
    } catch {
      // not up yet
    }
    await new Promise((r) => setTimeout(r, 500));
  }
  await close();
  throw new Error(`mlflow server did not answer on ${uri} within 2 minutes: ${readFileSync(logFile, 'utf8').slice(-2000)}`);
}

/** Every scalar series of a TensorBoard run folder as TensorBoard's EventAccumulator reads it: tag → [[step, value], …]. */
export function readTensorBoard(dir: string): Record<string, [number, number][]> {
  const py = trackersPython();
  if (!py) throw new Error('trackers environment missing');
  const r = spawnSync(py, [path.join(root, 'python', 'trackers', 'read_tensorboard.py'), dir], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`read_tensorboard.py ${dir}: ${r.stderr.slice(-2000)}`);
  return JSON.parse(r.stdout) as Record<string, [number, number][]>;
}

/**
 * The history rows and config of a cm2 W&B run folder (`<dir>/<run>`: one offline run per batch), in batch order, as
 * W&B's own reader of its run files prints them (`wandb leet inspect --json`).
 */
export function readWandb(runDir: string): { history: Record<string, number>[]; config: Record<string, unknown> } {
  const py = trackersPython();
  if (!py) throw new Error('trackers environment missing');
  const history: Record<string, number>[] = [];
  const config: Record<string, unknown> = {};
  for (const batch of readdirSync(runDir).filter((d) => d.startsWith('batch-')).sort()) {
    const wandbDir = path.join(runDir, batch, 'wandb');
    const runs = readdirSync(wandbDir).filter((d) => d.startsWith('offline-run-') || d.startsWith('run-'));
    if (runs.length !== 1) throw new Error(`${wandbDir}: expected one run folder, found ${runs.join(', ')}`);
    const r = spawnSync(py, ['-m', 'wandb', 'leet', 'inspect', path.join(wandbDir, runs[0]!), '--json'], { encoding: 'utf8', input: '' });
    if (r.status !== 0) throw new Error(`wandb leet inspect ${runs[0]}: ${r.stderr.slice(-2000)}`);
    for (const line of r.stdout.split('\n')) {
      if (!line.trim()) continue;
      const rec = JSON.parse(line) as { type?: string; history?: { item?: Record<string, number> }; run?: { config?: { update?: Record<string, unknown> } }; config?: { update?: Record<string, unknown> } };
      if (rec.type === 'history' && rec.history?.item) history.push(rec.history.item);
      Object.assign(config, rec.run?.config?.update ?? {}, rec.config?.update ?? {});
    }
  }
  return { history, config };
}
