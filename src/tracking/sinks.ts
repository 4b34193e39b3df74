/**
 * The trackers' sides of ./sync.ts: each delivers a batch so that a batch delivered again adds nothing.
 *
 * - MLflow (./mlflow.ts): the run found by its `cm2.run_id` tag or created; metrics with the batch's timestamp
 *   (MLflow drops an exact copy), parameters, links as tags; the run marked FINISHED / FAILED / KILLED at its end.
 * - TensorBoard: TensorFlow's own event-file writer (tfjs-node's binding of TensorFlow's `CreateSummaryFileWriter` /
 *   `WriteScalarSummary` kernels), one file per batch and section (`<dir>/<run>/<section>`, sections `sft`, `rl`,
 *   `heldout`, `sft_check`, `bfcl`, `tau2`, so each has its own step axis), written in a folder of its own and then
 *   renamed to `events.out.tfevents.<batch, 10 digits>.cm2`: a batch delivered again replaces its file. Parameters
 *   and links go to `<dir>/<run>/cm2-params.json` (TensorBoard's scalars have no place for them).
 * - W&B: W&B's own client (python/trackers/wandb_batch.py, in scripts/ensure-trackers.mjs's environment), one
 *   offline run folder per batch at `<dir>/<run>/batch-<batch, 10 digits>/wandb/offline-run-…` (written elsewhere,
 *   then moved into place: a batch written again replaces its folder), all with the same W&B run id; `wandb sync`
 *   uploads them in order. Each section gets its own x-axis; W&B's run-wide step continues from batch to batch (the
 *   cursor keeps where it is), so a batch written again uses the same steps.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { activeBackend, selectBackend } from '../model/net/backend';
import { projectRoot } from '../infra/binaries';
import { trackersPython } from '../../scripts/ensure-trackers.mjs';
import type { TrackerConfig } from '../run/trackingConfig';
import { MlflowClient } from './mlflow';
import type { TrackCursor } from './records';
import type { TrackBatch, TrackerSink } from './sync';

export class MlflowSink implements TrackerSink {
  private readonly client: MlflowClient;

  constructor(private readonly cfg: Extract<TrackerConfig, { kind: 'mlflow' }>, private readonly runId: string, env: NodeJS.ProcessEnv = process.env) {
    this.client = new MlflowClient(cfg.uri, env);
  }

  async deliver(batch: TrackBatch, cursor: TrackCursor): Promise<Record<string, string>> {
    const experimentId = cursor.remote?.['experimentId'] ?? (await this.client.experimentId(this.cfg.experiment));
    const run = cursor.remote?.['runId'] ?? (await this.client.runFor(experimentId, this.runId, this.cfg.runName ?? this.runId));
    await this.client.logBatch(run, {
      metrics: batch.points.map((p) => ({ key: p.key, value: p.value, step: p.step, timestamp: batch.time })),
      params: batch.params,
      tags: batch.tags,
    });
    if (batch.end) await this.client.setStatus(run, batch.end, batch.time);
    else if (batch.reopen) await this.client.setStatus(run, 'RUNNING');
    return { experimentId, runId: run };
  }
}

/** The tfjs-node kernels the writer needs (TensorFlow is activated on first use: only a worker that writes TensorBoard files pays for it). */
interface SummaryBackend {
  summaryWriter(logdir: string): unknown;
  createSummaryFileWriter(handle: unknown, logdir: string, maxQueue?: number, flushMillis?: number, suffix?: string): void;
  writeScalarSummary(handle: unknown, step: number, name: string, value: number): void;
  flushSummaryWriter(handle: unknown): void;
  executeMultipleOutputs(name: string, attrs: unknown[], inputs: unknown[], outputs: number): unknown;
}

async function summaryBackend(): Promise<SummaryBackend> {
  if (!activeBackend()) await selectBackend('auto');
  if (tf.getBackend() !== 'tensorflow') throw new Error(`tracking: TensorBoard files are written by native TensorFlow (tfjs-node), but this worker runs the '${tf.getBackend()}' backend (node scripts/ensure-native.mjs)`);
  return tf.backend() as unknown as SummaryBackend;
}

export class TensorBoardSink implements TrackerSink {
  private readonly dir: string;

  constructor(cfg: Extract<TrackerConfig, { kind: 'tensorboard' }>, runId: string) {
    this.dir = path.resolve(cfg.dir, runId);
  }

  async deliver(batch: TrackBatch): Promise<void> {
    const bySection = new Map<string, TrackBatch['points']>();
    for (const p of batch.points) {
      const section = p.key.split('/')[0]!;
      bySection.set(section, [...(bySection.get(section) ?? []), p]);
    }
    if (bySection.size) {
      const backend = await summaryBackend();
      for (const [section, points] of bySection) this.writeFile(backend, section, batch.seq, points);
    }
    if (Object.keys(batch.params).length || Object.keys(batch.tags).length || batch.end) {
      mkdirSync(this.dir, { recursive: true });
      const file = path.join(this.dir, 'cm2-params.json');
      let prior: Record<string, unknown> = {};
      try {
        prior = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
      } catch {
        // first batch
      }
      const next = { params: { ...(prior['params'] as object), ...batch.params }, links: { ...(prior['links'] as object), ...batch.tags }, ...(batch.end ? { end: batch.end } : prior['end'] ? { end: prior['end'] } : {}) };
      writeFileSync(`${file}.tmp`, `${JSON.stringify(next, null, 2)}\n`);
      renameSync(`${file}.tmp`, file);
    }
  }

  /** One event file: written by TensorFlow's writer in a folder of its own, closed, then renamed into the section. */
  private writeFile(backend: SummaryBackend, section: string, seq: number, points: TrackBatch['points']): void {
    const target = path.join(this.dir, section);
    mkdirSync(target, { recursive: true });
    const tmp = mkdtempSync(path.join(this.dir, `.batch-${section}-`));
    try {
      const handle = backend.summaryWriter(tmp);
      backend.createSummaryFileWriter(handle, tmp, 1000, 60_000, '.cm2');
      for (const p of points) backend.writeScalarSummary(handle, p.step, p.key.slice(section.length + 1) || p.key, p.value);
      backend.flushSummaryWriter(handle);
      backend.executeMultipleOutputs('CloseSummaryWriter', [], [handle], 0);
      (handle as { dispose?: () => void }).dispose?.();
      const written = readdirSync(tmp).filter((f) => f.includes('tfevents'));
      if (written.length !== 1) throw new Error(`TensorBoard: expected one event file in ${tmp}, found ${written.length}`);
      renameSync(path.join(tmp, written[0]!), path.join(target, `events.out.tfevents.${String(seq).padStart(10, '0')}.cm2`));
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  }
}

export class WandbSink implements TrackerSink {
  private readonly root: string;

  constructor(private readonly cfg: Extract<TrackerConfig, { kind: 'wandb' }>, private readonly runId: string, private readonly env: NodeJS.ProcessEnv = process.env) {
    this.root = path.resolve(cfg.dir, runId);
  }

  async deliver(batch: TrackBatch, cursor: TrackCursor): Promise<Record<string, string>> {
    const py = trackersPython(this.env);
    if (!py) throw new Error('tracking: W&B runs are written by W&B\'s own client, and the trackers environment is missing on this worker (node scripts/ensure-trackers.mjs)');
    const offset = Number(cursor.remote?.['wandbStep'] ?? 0);
    if (batch.points.length === 0 && Object.keys(batch.params).length === 0 && Object.keys(batch.tags).length === 0 && !batch.end && !batch.reopen) return { wandbStep: String(offset) };
    mkdirSync(this.root, { recursive: true });
    const tmp = mkdtempSync(path.join(this.root, '.batch-'));
    try {
      const input = JSON.stringify({
        runId: this.runId, project: this.cfg.project, ...(this.cfg.entity ? { entity: this.cfg.entity } : {}), mode: this.cfg.mode, outDir: tmp,
        stepOffset: offset, points: batch.points, params: batch.params, tags: batch.tags, ...(batch.end ? { end: batch.end } : {}),
      });
      const out = await runPython(py, [path.join(projectRoot, 'python', 'trackers', 'wandb_batch.py')], input, { ...this.env, WANDB_SILENT: 'true' });
      const steps = Number((JSON.parse(out) as { steps?: unknown }).steps);
      if (!Number.isInteger(steps)) throw new Error(`W&B: wandb_batch.py printed ${out.slice(0, 200)}`);
      const final = path.join(this.root, `batch-${String(batch.seq).padStart(10, '0')}`);
      rmSync(final, { recursive: true, force: true });
      renameSync(tmp, final);
      return { wandbStep: String(offset + steps) };
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  }
}

/** Runs a Python program with `input` on stdin; its stdout, or an error with its stderr's tail. */
function runPython(py: string, args: string[], input: string, env: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(py, args, { env, stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`${path.basename(args[0]!)} exited ${code}: ${err.trim().split('\n').slice(-6).join('\n')}`))));
    child.stdin.end(input);
  });
}

export function sinkFor(t: TrackerConfig, runId: string, env: NodeJS.ProcessEnv = process.env): TrackerSink {
  switch (t.kind) {
    case 'mlflow':
      return new MlflowSink(t, runId, env);
    case 'tensorboard':
      return new TensorBoardSink(t, runId);
    case 'wandb':
      return new WandbSink(t, runId, env);
  }
}
