/**
 * Issue 32 item 1: the training activities (`rlTrain`, `sftTrain`) on a `train` task queue of their own
 * (`temporal.taskQueues.train`), served by a worker started with `--queues train` and nothing else, so that which engine
 * trains a run is which workers poll that queue. On Temporal + MinIO at test scale.
 *
 * - RL: the same run with the updates on the gpu queue (the default) and on a train queue gives the same weights after
 *   every step; with the train queue every `rlTrain` was scheduled there and ran on the train worker, no rollout did.
 * - SFT: `sftTrain` goes to the train queue and runs on the train worker; the format check stays on the gpu queue.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod';
import { startRl, startSft } from '../../src/cli/stages';
import { connectClient } from '../../src/infra/temporal';
import { runKey, sftKeys, stageWorkflowId } from '../../src/run/layout';
import type { Cm2Config } from '../../src/run/config';
import { generateDemoDataset } from '../../src/demo/generator';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { startChildWorker, writeConfigFile, type ChildWorker } from '../helpers/processes';
import { tinyRl, writeRlFixture } from '../helpers/rlFixture';
import { activityStarts } from '../helpers/activityHistory';

const Row = z.looseObject({ step: z.number(), kind: z.string(), weightsSha256: z.string().optional() });

/** Runs `start` with a worker for workflows, api and gpu, and (when the config has a train queue) one for `train` alone. */
async function withWorkers<T>(cfg: Cm2Config, start: () => Promise<T>): Promise<{ result: T; trainPid?: number }> {
  const file = writeConfigFile(cfg);
  const workers: ChildWorker[] = [await startChildWorker(file, 'workflows,api,gpu')];
  if (cfg.temporal.taskQueues.train) workers.push(await startChildWorker(file, 'train'));
  try {
    return { result: await start(), ...(workers[1] ? { trainPid: workers[1].proc.pid } : {}) };
  } finally {
    await Promise.all(workers.map((w) => w.kill('SIGTERM')));
  }
}

test('RL updates on a train queue of their own: served by a `--queues train` worker alone, the same weights as on the gpu queue', async () => {
  const over = { rl: tinyRl({ steps: 2, promptsPerStep: 2, groupSize: 2, eval: { prompts: 0 }, rollout: { maxNewTokens: 12, maxModelLen: 1400, promptMargin: 0 } }) };
  const onGpu = testConfig(uniqueId('tq-gpu'), over);
  const onTrain = testConfig(uniqueId('tq-train'), over);
  onTrain.temporal.taskQueues.train = `train-${onTrain.run.id.replace(/[^a-z0-9]/gi, '').slice(-12)}`;
  const store = testStore(onGpu);
  await writeRlFixture(onGpu, store);
  await writeRlFixture(onTrain, store);
  const a = await withWorkers(onGpu, async () => (await startRl(await connectClient(onGpu), onGpu)).result());
  const b = await withWorkers(onTrain, async () => (await startRl(await connectClient(onTrain), onTrain)).result());
  assert.equal(a.result.steps, 2);
  assert.equal(b.result.steps, 2);

  const steps = async (cfg: Cm2Config) => (await store.getText(runKey(cfg.run.id, 'rl', 'metrics.jsonl'))).split('\n').filter(Boolean)
    .map((l) => Row.parse(JSON.parse(l))).filter((r) => r.kind === 'step').map((r) => [r.step, r.weightsSha256]);
  assert.deepEqual(await steps(onTrain), await steps(onGpu), 'same weights after every step');

  const acts = await activityStarts(onTrain, stageWorkflowId(onTrain.run.id, 'rl'));
  const trains = acts.filter((x) => x.type === 'rlTrain');
  assert.equal(trains.length, 2);
  for (const t of trains) {
    assert.equal(t.taskQueue, onTrain.temporal.taskQueues.train);
    assert.ok(t.identity.startsWith(`${b.trainPid}@`), `rlTrain ran on ${t.identity}, not the train worker ${b.trainPid}`);
  }
  const rollouts = acts.filter((x) => x.type === 'rlRollout');
  assert.ok(rollouts.length > 0 && rollouts.every((x) => x.taskQueue === onTrain.temporal.taskQueues.gpu && !x.identity.startsWith(`${b.trainPid}@`)));
  const gpuActs = await activityStarts(onGpu, stageWorkflowId(onGpu.run.id, 'rl'));
  assert.ok(gpuActs.filter((x) => x.type === 'rlTrain').every((x) => x.taskQueue === onGpu.temporal.taskQueues.gpu), 'default: updates on the gpu queue');
});

test('SFT training on a train queue of its own; the format check stays on the gpu queue', async () => {
  const cfg = testConfig(uniqueId('tq-sft'), {
    sft: {
      backend: 'auto',
      base: { kind: 'init', seed: 5, config: { model_type: 'qwen3', hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8, tie_word_embeddings: true, rope_theta: 10000, max_position_embeddings: 1024 } },
      epochs: 1, microBatch: 2, gradAccum: 2, maxSeqLen: 640, checkpointEvery: 3, peakLr: 5e-3,
      eval: { prompts: 2, maxNewTokens: 8 },
    },
  });
  cfg.temporal.taskQueues.train = `train-${cfg.run.id.replace(/[^a-z0-9]/gi, '').slice(-12)}`;
  const store = testStore(cfg);
  const examples = generateDemoDataset({ seed: 31, count: 8, brokenRate: 0 });
  await store.putJsonl(runKey(cfg.run.id, 'data', 'cold_start.jsonl'), examples);
  await store.putJsonl(runKey(cfg.run.id, 'data', 'rl.jsonl'), examples.slice(0, 4));
  const { result, trainPid } = await withWorkers(cfg, async () => (await startSft(await connectClient(cfg), cfg)).result());
  assert.ok(result.train.steps > 0);
  const acts = await activityStarts(cfg, stageWorkflowId(cfg.run.id, 'sft'));
  const train = acts.filter((x) => x.type === 'sftTrain');
  assert.equal(train.length, 1);
  assert.equal(train[0]!.taskQueue, cfg.temporal.taskQueues.train);
  assert.ok(train[0]!.identity.startsWith(`${trainPid}@`), `sftTrain ran on ${train[0]!.identity}`);
  // the training inputs a trainer in another language needs, written on the gpu queue first (src/stages/sft/prepareActivity.ts)
  const prepare = acts.filter((x) => x.type === 'sftPrepare');
  assert.equal(prepare.length, 1);
  assert.equal(prepare[0]!.taskQueue, cfg.temporal.taskQueues.gpu);
  assert.equal(train[0]!.input['prepared'], sftKeys.prepared(cfg.run.id));
  const checks = acts.filter((x) => x.type.startsWith('sftEvaluate') && x.type !== 'sftEvaluateMerge');
  assert.ok(checks.length > 0 && checks.every((x) => x.taskQueue === cfg.temporal.taskQueues.gpu), 'the format check on the gpu queue');
});
