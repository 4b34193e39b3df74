/**
 * Experiment tracking (issue 35) against the trackers' own programs: a real MLflow tracking server (its REST API
 * reads back what cm2 logged) and TensorBoard's own event-file reader, with real Temporal and MinIO.
 *
 * 1. The sync: a run's S3 rows in two installments, a crash between delivering a batch and recording the cursor, and
 *    the run's end: every step once in MLflow and in TensorBoard, parameters and links, the run FINISHED.
 * 2. The pipeline: `cm2 run` with MLflow (down at first: an outage), TensorBoard and W&B, its only worker SIGKILLed
 *    mid-RL; the run finishes regardless; once MLflow is up, the run's tracking workflow sends every SFT and RL step,
 *    the evaluation's results, the settings and the report's link, exactly once, and completes.
 * 3. A pipeline terminated mid-run (`temporal workflow terminate`: no `trackDone`): its tracking workflow does not
 *    sync forever; it sends what the run wrote and completes, the run KILLED.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pipelineKeys, rlKeys, sftKeys, trackWorkflowId, evalKeys } from '../../src/run/layout';
import { MlflowClient } from '../../src/tracking/mlflow';
import { sinkFor } from '../../src/tracking/sinks';
import { syncTracker, type TrackerSink } from '../../src/tracking/sync';
import type { TrackerConfig } from '../../src/run/trackingConfig';
import { connectClient } from '../../src/infra/temporal';
import { freePort } from '../../src/infra/localInfra';
import { pipelineWorkflowId } from '../../src/cli/stages';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { cm2, tinyPipeline } from '../helpers/pipelineFixture';
import { startChildWorker, writeConfigFile } from '../helpers/processes';
import { readTensorBoard, readWandb, startMlflowServer, trackersUnavailable, type MlflowServer } from '../helpers/trackers';

let skip: string | undefined;
let mlflow: MlflowServer | undefined;

before(async () => {
  skip = trackersUnavailable();
  if (!skip) mlflow = await startMlflowServer();
});

after(async () => {
  await mlflow?.close();
});

/** The MLflow run of a cm2 run (found by its tag, as cm2 finds it). */
async function mlflowRun(client: MlflowClient, experiment: string, runId: string): Promise<{ id: string; status: string; params: Record<string, string>; tags: Record<string, string> }> {
  const exp = await client.experimentId(experiment);
  const found = await client.call<{ runs?: { info: { run_id: string; status: string }; data: { params?: { key: string; value: string }[]; tags?: { key: string; value: string }[] } }[] }>('POST', 'runs/search', {
    experiment_ids: [exp], filter: `tags.\`cm2.run_id\` = '${runId}'`,
  });
  assert.equal(found.runs?.length, 1, `one MLflow run for ${runId}`);
  const r = found.runs![0]!;
  return {
    id: r.info.run_id,
    status: r.info.status,
    params: Object.fromEntries((r.data.params ?? []).map((p) => [p.key, p.value])),
    tags: Object.fromEntries((r.data.tags ?? []).map((p) => [p.key, p.value])),
  };
}

/** Steps of a series, in order; asserts none is there twice. */
async function stepsOnce(client: MlflowClient, run: string, key: string): Promise<number[]> {
  const h = await client.history(run, key);
  const steps = h.map((m) => m.step).sort((a, b) => a - b);
  assert.deepEqual(steps, [...new Set(steps)], `${key}: a step twice in MLflow (${steps.join(',')})`);
  return steps;
}

test('the sync: two installments, a crash between delivery and cursor, the run\'s end — every step once in MLflow, TensorBoard and W&B', async (t) => {
  if (skip) return t.skip(skip);
  const cfg = testConfig(uniqueId('trk'));
  const runId = cfg.run.id;
  const store = testStore(cfg);
  const tbDir = mkdtempSync(path.join(tmpdir(), 'cm2-tb-'));
  const wbDir = mkdtempSync(path.join(tmpdir(), 'cm2-wandb-'));
  const trackers: TrackerConfig[] = [
    { kind: 'mlflow', uri: mlflow!.uri, experiment: 'cm2-sync-test' },
    { kind: 'tensorboard', dir: tbDir },
    { kind: 'wandb', project: 'cm2-sync-test', mode: 'offline', dir: wbDir },
  ];
  await store.putJson(pipelineKeys.input(runId), { runId, stages: { rl: { rl: { hp: { lr: 1e-4, granularity: 'trajectory' } } }, sft: { sft: { epochs: 1 } } } });
  const sftRow = (step: number) => store.putJson(sftKeys.stepRow(runId, step), { step, loss: 2 - step / 10, lr: 1e-3, gradNorm: 0.5, tokens: 1000, ms: 500 });
  const rlRow = (step: number) => store.putJson(rlKeys.metricsRow(runId, step, 'step'), { step, kind: 'step', granularity: 'trajectory', reward: { mean: step / 10, std: 0.1 }, kl: 1e-4 * step, failedSamples: 0, rollouts: 8, seconds: { rollout: 3, train: 4 } });
  const evalRow = (step: number) => store.putJson(rlKeys.metricsRow(runId, step, 'eval'), { step, kind: 'eval', rewardMean: 0.2 + step / 100, rewardSe: 0.03, prompts: 4 });
  for (let s = 1; s <= 4; s++) await sftRow(s);
  await evalRow(0);
  for (const s of [1, 2]) await rlRow(s);
  await evalRow(2);
  for (const tr of trackers) await syncTracker(store, runId, tr, sinkFor(tr, runId));

  // The second installment; the MLflow and TensorBoard batches are delivered, then the attempt dies before its cursor.
  for (const s of [5, 6]) await sftRow(s);
  for (const s of [3, 4]) await rlRow(s);
  await evalRow(4);
  await store.putText(`${evalKeys.bfcl(runId, 'sft').replace(/\.json$/, '')}.summary.json`, JSON.stringify({ label: 'sft', overall: { accuracy: 0.5, correct: 2, total: 4 }, categories: { simple_python: { accuracy: 0.5, correct: 2, total: 4 } } }));
  for (const tr of trackers) {
    const real = sinkFor(tr, runId);
    const dying: TrackerSink = { deliver: async (b, c) => { await real.deliver(b, c); throw new Error('worker killed after delivering'); } };
    await assert.rejects(syncTracker(store, runId, tr, dying), /worker killed/);
  }
  // The next attempt delivers that batch again (same timestamps, same file), then the run's end.
  for (const tr of trackers) {
    const r = await syncTracker(store, runId, tr, sinkFor(tr, runId), { end: 'FINISHED' });
    assert.equal(r.redelivered, true);
  }

  const client = new MlflowClient(mlflow!.uri);
  const run = await mlflowRun(client, 'cm2-sync-test', runId);
  assert.equal(run.status, 'FINISHED');
  assert.deepEqual(await stepsOnce(client, run.id, 'sft/loss'), [1, 2, 3, 4, 5, 6]);
  assert.deepEqual(await stepsOnce(client, run.id, 'rl/reward/mean'), [1, 2, 3, 4]);
  assert.deepEqual(await stepsOnce(client, run.id, 'rl/seconds/train'), [1, 2, 3, 4]);
  assert.deepEqual(await stepsOnce(client, run.id, 'heldout/rewardMean'), [0, 2, 4]);
  assert.deepEqual(await stepsOnce(client, run.id, 'bfcl/sft/overall'), [0]);
  assert.equal((await client.history(run.id, 'sft/tokens_per_s'))[0]!.value, 2000);
  assert.equal(run.params['rl.rl.hp.lr'], '0.0001');
  assert.equal(run.params['rl.rl.hp.granularity'], 'trajectory');

  const tb = readTensorBoard(path.join(tbDir, runId, 'sft'));
  assert.deepEqual(tb['loss']!.map(([s]) => s), [1, 2, 3, 4, 5, 6], 'TensorBoard: each SFT step once');
  assert.ok(Math.abs(tb['loss']![5]![1] - 1.4) < 1e-6);
  const tbRl = readTensorBoard(path.join(tbDir, runId, 'rl'));
  assert.deepEqual(tbRl['reward/mean']!.map(([s]) => s), [1, 2, 3, 4]);
  assert.deepEqual(readTensorBoard(path.join(tbDir, runId, 'heldout'))['rewardMean']!.map(([s]) => s), [0, 2, 4]);

  // W&B: its own reader of the offline run files, batch by batch; each section's own x-axis, the run-wide step growing
  const wb = readWandb(path.join(wbDir, runId));
  const axis = (section: string, key: string) => wb.history.filter((h) => h[key] !== undefined).map((h) => h[`${section}/step`]);
  assert.deepEqual(axis('sft', 'sft/loss'), [1, 2, 3, 4, 5, 6], 'W&B: each SFT step once');
  assert.deepEqual(axis('rl', 'rl/reward/mean'), [1, 2, 3, 4]);
  assert.deepEqual(axis('heldout', 'heldout/rewardMean'), [0, 2, 4]);
  const steps = wb.history.map((h) => h['_step']!);
  assert.deepEqual(steps, [...steps].sort((a, b) => a - b), 'W&B\'s run-wide step only grows');
  assert.equal(new Set(steps).size, steps.length);
  assert.equal(wb.config['rl.rl.hp.lr'], '0.0001');
});

test('the pipeline: `cm2 run` with MLflow down (an outage), TensorBoard and W&B, its worker killed mid-RL; the run finishes; MLflow, once up, gets every SFT and RL step exactly once', { timeout: 900_000 }, async (t) => {
  if (skip) return t.skip(skip);
  const port = await freePort();
  const tbDir = mkdtempSync(path.join(tmpdir(), 'cm2-tb-'));
  const wbDir = mkdtempSync(path.join(tmpdir(), 'cm2-wandb-'));
  const uri = `http://127.0.0.1:${port}`;
  const cfg = testConfig(uniqueId('trkp'), {
    ...tinyPipeline({ rlSteps: 4 }),
    tracking: [{ kind: 'mlflow', uri, experiment: 'cm2-pipeline-test' }, { kind: 'tensorboard', dir: tbDir }, { kind: 'wandb', project: 'cm2-pipeline-test', dir: wbDir }],
  });
  const runId = cfg.run.id;
  const file = writeConfigFile(cfg);
  const client = await connectClient(cfg);
  const store = testStore(cfg);
  const workers = [await startChildWorker(file)];
  let late: MlflowServer | undefined;
  try {
    const r = await cm2(['run', '--config', file, '--no-wait']);
    assert.equal(r.code, 0, r.out.slice(-3000));
    // The only worker is SIGKILLed once RL has recorded a step (the tracking workflow has synced before), then replaced.
    for (let i = 0; !(await store.exists(rlKeys.metricsRow(runId, 1, 'step'))); i++) {
      assert.ok(i < 1200, 'RL records its first step');
      await new Promise((res) => setTimeout(res, 250));
    }
    workers[0]!.proc.kill('SIGKILL');
    workers.push(await startChildWorker(file));
    const done = await client.workflow.getHandle(pipelineWorkflowId(runId)).result();
    assert.equal(done.state, 'completed', 'the run finished although its MLflow tracker was down');
    // The tracking workflow is still retrying MLflow; `cm2 logs` says why.
    const trackHandle = client.workflow.getHandle(trackWorkflowId(runId));
    assert.equal((await trackHandle.describe()).status.name, 'RUNNING');
    let logs = '';
    for (let i = 0; i < 30 && !/trackSync attempt \d+/.test(logs); i++) {
      logs = (await cm2(['logs', runId, '--config', file])).out;
      await new Promise((res) => setTimeout(res, 1000));
    }
    assert.match(logs, /track\s+now: trackSync attempt \d+, last failure: .*tracker\(s\) not synced: mlflow-/);
    late = await startMlflowServer({ port });
    const tracked = await trackHandle.result();
    assert.equal(tracked.end, 'FINISHED');

    const sftSteps = (await store.list(`${sftKeys.stepRows(runId)}/`)).length;
    assert.ok(sftSteps > 0, 'the SFT trainer wrote its step rows');
    const allSft = Array.from({ length: sftSteps }, (_, i) => i + 1);
    const ml = new MlflowClient(uri);
    const run = await mlflowRun(ml, 'cm2-pipeline-test', runId);
    assert.equal(run.status, 'FINISHED');
    assert.deepEqual(await stepsOnce(ml, run.id, 'sft/loss'), allSft);
    assert.deepEqual(await stepsOnce(ml, run.id, 'rl/reward/mean'), [1, 2, 3, 4]);
    assert.deepEqual(await stepsOnce(ml, run.id, 'heldout/rewardMean'), [0, 2, 4]);
    assert.deepEqual(await stepsOnce(ml, run.id, 'bfcl/sft/overall'), [0], 'the evaluation\'s results');
    assert.deepEqual(await stepsOnce(ml, run.id, 'bfcl/rl/overall'), [0]);
    assert.ok(run.params['rl.rl.hp.lr'], `the run's settings as parameters: ${Object.keys(run.params).slice(0, 20).join(', ')}`);
    assert.match(run.tags['cm2.report'] ?? '', new RegExp(`^s3://.*/runs/${runId}/report/report.html$`));
    const tb = readTensorBoard(path.join(tbDir, runId, 'rl'));
    assert.deepEqual(tb['reward/mean']!.map(([s]) => s), [1, 2, 3, 4]);
    assert.deepEqual(readTensorBoard(path.join(tbDir, runId, 'sft'))['loss']!.map(([s]) => s), allSft);
    const wb = readWandb(path.join(wbDir, runId));
    assert.deepEqual(wb.history.filter((h) => h['sft/loss'] !== undefined).map((h) => h['sft/step']), allSft);
    assert.deepEqual(wb.history.filter((h) => h['rl/reward/mean'] !== undefined).map((h) => h['rl/step']), [1, 2, 3, 4]);
  } finally {
    await late?.close();
    for (const w of workers) await w.kill('SIGTERM');
    await client.connection.close();
  }
});

test('a pipeline terminated mid-run: its tracking workflow sends what the run wrote, marks it KILLED and completes', { timeout: 600_000 }, async (t) => {
  if (skip) return t.skip(skip);
  const tbDir = mkdtempSync(path.join(tmpdir(), 'cm2-tb-'));
  const cfg = testConfig(uniqueId('trkt'), { ...tinyPipeline({ rlSteps: 4 }), tracking: [{ kind: 'tensorboard', dir: tbDir }] });
  const runId = cfg.run.id;
  const file = writeConfigFile(cfg);
  const client = await connectClient(cfg);
  const store = testStore(cfg);
  const worker = await startChildWorker(file);
  try {
    const r = await cm2(['run', '--config', file, '--no-wait']);
    assert.equal(r.code, 0, r.out.slice(-3000));
    const trackHandle = client.workflow.getHandle(trackWorkflowId(runId));
    // Terminated once SFT has recorded steps (the tracking workflow synced at the start and now waits for its next tick).
    for (let i = 0; (await store.list(`${sftKeys.stepRows(runId)}/`)).length === 0; i++) {
      assert.ok(i < 1200, 'SFT records its first step');
      await new Promise((res) => setTimeout(res, 250));
    }
    const sftRowsAtEnd = (await store.list(`${sftKeys.stepRows(runId)}/`)).length;
    await client.workflow.getHandle(pipelineWorkflowId(runId)).terminate('test: terminated mid-run');
    // It ends on the pipeline's close (its parent-close policy), not at a later tick, and not never.
    const tracked = await Promise.race([
      trackHandle.result(),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error('the tracking workflow still runs 60 s after its pipeline was terminated')), 60_000).unref()),
    ]);
    assert.equal(tracked.end, 'KILLED');
    assert.equal((await trackHandle.describe()).status.name, 'COMPLETED');
    const tbSteps = readTensorBoard(path.join(tbDir, runId, 'sft'))['loss']!.map(([s]) => s);
    assert.ok(tbSteps.length >= sftRowsAtEnd, `TensorBoard has the ${sftRowsAtEnd} SFT steps written before the end: ${tbSteps.join(',')}`);
    assert.deepEqual(tbSteps, Array.from({ length: tbSteps.length }, (_, i) => i + 1), 'each SFT step once, in order');
  } finally {
    await worker.kill('SIGTERM');
    await client.connection.close();
  }
});
