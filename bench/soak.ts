/**
 * Soak (issue 16): a long RL run of a tiny policy with fast settings on servers of its own (a Temporal dev server and
 * a MinIO in a temp folder), the workers in three child processes (workflows, api, gpu), continue-as-new as
 * configured. It measures what a run of days would show early:
 *
 * - Temporal history per workflow execution (events, bytes of the encoded history): bounded when continue-as-new
 *   does its job, so the max over executions is the figure;
 * - the RSS of each worker process, sampled every `--sample-every` steps, with the least-squares slope per 100 steps
 *   (over all samples, and after the warm-up: the first 10% of the steps);
 * - S3 bytes per step: the least-squares slope of the run's stored bytes (`runs/<id>/`) over steps, with
 *   `rl.keepCheckpoints: --keep`, and in a second, shorter run (`--compare-steps`) with every checkpoint kept;
 * - time: total, and per step from the metrics rows.
 *
 *   npx tsx bench/soak.ts [--steps 1000] [--keep 2] [--continue-as-new 25] [--eval-every 100] [--sample-every 10]
 *                         [--bytes-every 50] [--compare-steps 50] [--max-minutes 0] [--out soak.json]
 *
 * The comparison run goes first. `--max-minutes M` stops the soak (the workflow's `stop` signal: it ends after the
 * step in flight) once it has run M minutes and reports the steps it made. `--steps 20 --compare-steps 0` is a quick
 * try (about two minutes). Needs the `temporal` and `minio` binaries
 * (`CM2_TEMPORAL_BIN`, `CM2_MINIO_BIN`, or those `npm test` installs).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { temporal } from '@temporalio/proto';
import { startRl } from '../src/cli/stages';
import { connectClient } from '../src/infra/temporal';
import { parseConfig, type Cm2Config } from '../src/run/config';
import { rlKeys, runKey, stageWorkflowId } from '../src/run/layout';
import { stopSignal } from '../src/run/control';
import type { ObjectStore } from '../src/storage/store';
import { startDedicatedServers } from '../test/helpers/dedicatedServers';
import { startChildWorker, writeConfigFile, type ChildWorker } from '../test/helpers/processes';
import { tinyRl, writeRlFixture } from '../test/helpers/rlFixture';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const QUEUES = ['workflows', 'api', 'gpu'] as const;

const { values } = parseArgs({
  options: {
    steps: { type: 'string', default: '1000' },
    keep: { type: 'string', default: '2' },
    'continue-as-new': { type: 'string', default: '25' },
    'eval-every': { type: 'string', default: '100' },
    'sample-every': { type: 'string', default: '10' },
    'bytes-every': { type: 'string', default: '50' },
    'compare-steps': { type: 'string', default: '50' },
    'max-minutes': { type: 'string', default: '0' },
    out: { type: 'string' },
  },
});
const opt = {
  steps: Number(values.steps),
  keep: Number(values.keep),
  can: Number(values['continue-as-new']),
  evalEvery: Number(values['eval-every']),
  sampleEvery: Number(values['sample-every']),
  bytesEvery: Number(values['bytes-every']),
  compareSteps: Number(values['compare-steps']),
  maxMinutes: Number(values['max-minutes']),
};

/** Least-squares slope of y over x. */
function slope(points: readonly [number, number][]): number {
  const n = points.length;
  if (n < 2) return NaN;
  const mx = points.reduce((s, [x]) => s + x, 0) / n;
  const my = points.reduce((s, [, y]) => s + y, 0) / n;
  const sxx = points.reduce((s, [x]) => s + (x - mx) ** 2, 0);
  return sxx === 0 ? NaN : points.reduce((s, [x, y]) => s + (x - mx) * (y - my), 0) / sxx;
}

const describeStatus = async (h: { describe(): Promise<{ status: { name: string } }> }) => (await h.describe()).status.name;

const rssMiB = (pid: number): number => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN) / 1024;

/** Objects and bytes stored under a prefix, with the checkpoints' share. */
async function storedBytes(store: ObjectStore, prefix: string): Promise<{ objects: number; bytes: number; checkpointBytes: number }> {
  let objects = 0, bytes = 0, checkpointBytes = 0;
  const stream = store.client.listObjectsV2(store.bucket, prefix, true);
  for await (const item of stream as AsyncIterable<{ name?: string; size?: number }>) {
    objects++;
    bytes += item.size ?? 0;
    if (item.name?.includes('/rl/checkpoints/')) checkpointBytes += item.size ?? 0;
  }
  return { objects, bytes, checkpointBytes };
}

interface RunFigures {
  runId: string;
  steps: number;
  keepCheckpoints: number;
  seconds: number;
  stepSeconds: { mean: number; p50: number; p95: number; max: number };
  /** Mean seconds per phase of a step (metrics rows). */
  phaseSeconds: Record<string, number>;
  executions: { runId: string; events: number; bytes: number }[];
  rss: Record<string, [number, number][]>;
  bytes: { step: number; objects: number; bytes: number; checkpointBytes: number }[];
  checkpointsLeft: number;
}

async function soakRun(cfg: Cm2Config, store: ObjectStore, workers: Map<string, ChildWorker>, steps: number): Promise<RunFigures> {
  const runId = cfg.run.id;
  await writeRlFixture(cfg, store, 64);
  const client = await connectClient(cfg);
  const rss: Record<string, [number, number][]> = Object.fromEntries(QUEUES.map((q) => [q, []]));
  const bytes: RunFigures['bytes'] = [];
  const sampleRss = (step: number) => {
    for (const q of QUEUES) rss[q]!.push([step, rssMiB(workers.get(q)!.proc.pid!)]);
  };
  const sampleBytes = async (step: number) => bytes.push({ step, ...(await storedBytes(store, `${runKey(runId)}/`)) });
  const t0 = Date.now();
  const handle = await startRl(client, cfg);
  sampleRss(0);
  await sampleBytes(0);
  let step = 0;
  let lastLine = Date.now();
  let stopped = false;
  while (step < steps) {
    if (!stopped && opt.maxMinutes > 0 && Date.now() - t0 > opt.maxMinutes * 60_000) {
      // Out of time: stop after the step in flight (the workflow's stop signal) and report what ran.
      stopped = true;
      console.log(`  ${runId}: --max-minutes ${opt.maxMinutes} reached at step ${step}: stopping`);
      await handle.signal(stopSignal);
    }
    if (stopped && (await describeStatus(handle)) !== 'RUNNING') break;
    for (const [q, w] of workers) if (w.proc.exitCode !== null || w.proc.signalCode !== null) throw new Error(`the ${q} worker exited:\n${w.output().slice(-4000)}`);
    if (!(await store.exists(rlKeys.metricsRow(runId, step + 1, 'step')))) {
      await sleep(100);
      continue;
    }
    step++;
    if (step % opt.sampleEvery === 0) sampleRss(step);
    if (step % opt.bytesEvery === 0 || step === steps) await sampleBytes(step);
    if (Date.now() - lastLine > 30_000) {
      lastLine = Date.now();
      console.log(`  ${runId}: step ${step}/${steps}, ${((Date.now() - t0) / 1000).toFixed(0)} s, RSS ${QUEUES.map((q) => `${q} ${rssMiB(workers.get(q)!.proc.pid!).toFixed(0)}`).join(', ')} MiB, load ${loadavg()[0]!.toFixed(2)}`);
    }
  }
  if (bytes[bytes.length - 1]?.step !== step) await sampleBytes(step);
  const result = await handle.result();
  const seconds = (Date.now() - t0) / 1000;
  if (result.steps !== steps && !stopped) throw new Error(`${runId}: ${result.steps} steps, expected ${steps}`);
  steps = result.steps;

  const executions: RunFigures['executions'] = [];
  const listed: { runId: string; start: number }[] = [];
  for await (const w of client.workflow.list({ query: `WorkflowId = "${stageWorkflowId(runId, 'rl')}"` })) listed.push({ runId: w.runId, start: w.startTime.getTime() });
  for (const e of listed.sort((x, y) => x.start - y.start)) {
    const history = await client.workflow.getHandle(handle.workflowId, e.runId).fetchHistory();
    executions.push({ runId: e.runId, events: history.events?.length ?? 0, bytes: temporal.api.history.v1.History.encode(history).finish().length });
  }
  const rows = (await store.getText(rlKeys.metrics(runId))).split('\n').filter(Boolean).map((l) => JSON.parse(l) as { kind: string; seconds?: Record<string, number> });
  const stepRows = rows.filter((r) => r.kind === 'step');
  const totals = stepRows.map((r) => r.seconds?.total ?? 0).sort((x, y) => x - y);
  const phaseSeconds: Record<string, number> = {};
  for (const r of stepRows) for (const [k, v] of Object.entries(r.seconds ?? {})) phaseSeconds[k] = (phaseSeconds[k] ?? 0) + v / stepRows.length;
  const q = (p: number) => totals[Math.min(totals.length - 1, Math.floor(p * totals.length))] ?? NaN;
  const checkpointsLeft = new Set((await store.list(`${rlKeys.checkpoints(runId)}/`)).filter((k) => k.endsWith('/manifest.json'))).size;
  return {
    runId,
    steps,
    keepCheckpoints: cfg.rl.keepCheckpoints,
    seconds,
    phaseSeconds,
    stepSeconds: { mean: totals.reduce((s, x) => s + x, 0) / Math.max(1, totals.length), p50: q(0.5), p95: q(0.95), max: totals[totals.length - 1] ?? NaN },
    executions,
    rss,
    bytes,
    checkpointsLeft,
  };
}

function report(f: RunFigures): void {
  const mib = (b: number) => (b / 2 ** 20).toFixed(2);
  const ev = f.executions.map((e) => e.events);
  const by = f.executions.map((e) => e.bytes);
  console.log(`\n### ${f.runId}: ${f.steps} steps, keepCheckpoints ${f.keepCheckpoints}, continue-as-new every ${opt.can}`);
  console.log(`time: ${f.seconds.toFixed(0)} s total; per step (metrics rows) mean ${f.stepSeconds.mean.toFixed(2)} s, p50 ${f.stepSeconds.p50.toFixed(2)}, p95 ${f.stepSeconds.p95.toFixed(2)}, max ${f.stepSeconds.max.toFixed(2)}; by phase ${Object.entries(f.phaseSeconds).map(([k, v]) => `${k} ${v.toFixed(2)}`).join(', ')}`);
  console.log(`history: ${f.executions.length} executions; events per execution max ${Math.max(...ev)}, first ${ev[0]}, last ${ev[ev.length - 1]}; bytes per execution max ${Math.max(...by)}, first ${by[0]}, last ${by[ev.length - 1]}`);
  const full = f.executions.slice(0, -1);
  if (full.length >= 2) console.log(`  full executions (${opt.can} steps each): events ${Math.min(...full.map((e) => e.events))}–${Math.max(...full.map((e) => e.events))}, bytes ${Math.min(...full.map((e) => e.bytes))}–${Math.max(...full.map((e) => e.bytes))}`);
  console.log('| worker | RSS at step 0 (MiB) | at the end | max | slope per 100 steps, all samples (MiB) | after warm-up (MiB) |');
  console.log('|---|---|---|---|---|---|');
  const warm = Math.floor(f.steps / 10);
  for (const [q, pts] of Object.entries(f.rss)) {
    const ys = pts.map(([, y]) => y);
    console.log(`| ${q} | ${ys[0]?.toFixed(0)} | ${ys[ys.length - 1]?.toFixed(0)} | ${Math.max(...ys).toFixed(0)} | ${(slope(pts) * 100).toFixed(2)} | ${(slope(pts.filter(([x]) => x >= warm)) * 100).toFixed(2)} |`);
  }
  const bpts = f.bytes.map((b) => [b.step, b.bytes] as [number, number]);
  const cpts = f.bytes.map((b) => [b.step, b.checkpointBytes] as [number, number]);
  const last = f.bytes[f.bytes.length - 1]!;
  console.log(`S3 (runs/${f.runId}/): ${last.objects} objects, ${mib(last.bytes)} MiB at the end (checkpoints ${mib(last.checkpointBytes)} MiB, ${f.checkpointsLeft} left); per step ${(slope(bpts) / 1024).toFixed(1)} KiB (checkpoints ${(slope(cpts) / 1024).toFixed(1)} KiB)`);
}

async function main() {
  console.log(`soak: ${JSON.stringify(opt)}; ${cpus().length} cores, load ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  const servers = await startDedicatedServers('soak');
  const base = (runId: string, steps: number, keep: number) => servers.configure(parseConfig({
    run: { id: runId },
    temporal: { taskQueues: { workflows: 'soak-wf', api: 'soak-api', gpu: 'soak-gpu' }, activity: { heartbeatTimeout: '30s', maxRetryInterval: '1s' } },
    s3: { bucket: 'cm2-soak' },
    // Fast settings: short prompts only (the 16 of 64 demo dialogues whose prompt fits 480 tokens), no KL reference.
    rl: tinyRl({ steps, continueAsNewEvery: opt.can, keepCheckpoints: keep, eval: { prompts: 2, every: opt.evalEvery }, hp: { lr: 1e-3, klCoef: 0, granularity: 'trajectory' }, rollout: { maxNewTokens: 12, maxModelLen: 480, promptMargin: 0 } }),
  }));
  const stamp = Date.now().toString(36);
  const primary = base(`soak-${stamp}`, opt.steps, opt.keep);
  const store = servers.store(primary);
  const file = writeConfigFile(primary);
  const workers = new Map<string, ChildWorker>();
  const figures: RunFigures[] = [];
  try {
    for (const q of QUEUES) workers.set(q, await startChildWorker(file, q, servers.env));
    // The comparison first (short: S3 bytes per step with the other retention), then the soak itself.
    if (opt.compareSteps > 0) {
      const other = opt.keep > 0 ? 0 : 2;
      figures.push(await soakRun(base(`soak-${stamp}-k${other}`, opt.compareSteps, other), store, workers, opt.compareSteps));
    }
    figures.push(await soakRun(primary, store, workers, opt.steps));
    console.log(`gpu worker: ${/tfjs backend: .*/.exec(workers.get('gpu')!.output())?.[0] ?? '(no backend line)'}`);
    for (const f of figures) report(f);
    console.log(`\nload at the end: ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
    if (values.out) writeFileSync(values.out, JSON.stringify({ opt, figures }, null, 1));
  } finally {
    for (const w of workers.values()) await w.kill('SIGTERM');
    await servers.stop();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
