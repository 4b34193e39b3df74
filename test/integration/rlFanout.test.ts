/**
 * Issue 16: RL rollouts fanned out over gpu workers (`rl.rollout.chunkPrompts`) and one-step-off asynchronous RL
 * (`rl.async`), on Temporal + MinIO at test scale (tiny random policy, demo-world examples, offline checklists).
 *
 * - Fan-out: the same run with one gpu worker and with two gives the same rollouts (token for token), the same
 *   held-out rewards and the same weights after every step; with two, both workers served chunks.
 * - One-step-off: step n+1's rollouts are scheduled before step n's update ends and use the pre-update policy
 *   (staleness 1 from step 2 on); a gpu worker SIGKILLed in the middle of a training step (and started again) changes
 *   nothing: the same weights after every step as an undisturbed run.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod';
import { startRl } from '../../src/cli/stages';
import { connectClient } from '../../src/infra/temporal';
import { activityStarts } from '../helpers/activityHistory';
import { type ObjectStore } from '../../src/storage/store';
import { rlKeys, runKey, stageWorkflowId } from '../../src/run/layout';
import type { Cm2Config } from '../../src/run/config';
import { stepFolder } from '../../src/storage/checkpoints';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { startChildWorker, writeConfigFile, type ChildWorker } from '../helpers/processes';
import { tinyRl, writeRlFixture } from '../helpers/rlFixture';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const Row = z.looseObject({
  step: z.number(),
  kind: z.string(),
  weightsSha256: z.string().optional(),
  rewardMean: z.number().optional(),
  staleness: z.number().optional(),
  chunks: z.number().optional(),
});
const rows = async (store: ObjectStore, runId: string) =>
  (await store.getText(runKey(runId, 'rl', 'metrics.jsonl'))).split('\n').filter(Boolean).map((l) => Row.parse(JSON.parse(l)));
const RolloutsFile = z.object({ rollouts: z.array(z.looseObject({ id: z.string(), group: z.number(), tokens: z.array(z.number()) })) });

async function runRl(cfg: Cm2Config, gpuWorkers: number, during?: (handle: Awaited<ReturnType<typeof startRl>>, workers: ChildWorker[]) => Promise<void>) {
  const file = writeConfigFile(cfg);
  const workers = [await startChildWorker(file, gpuWorkers > 0 ? 'workflows,api,gpu' : 'workflows,api')];
  for (let i = 1; i < gpuWorkers; i++) workers.push(await startChildWorker(file, 'gpu'));
  try {
    const handle = await startRl(await connectClient(cfg), cfg);
    if (during) await during(handle, workers);
    return await handle.result();
  } finally {
    await Promise.all(workers.map((w) => w.kill('SIGTERM')));
  }
}

test('RL fan-out: chunked rollouts are the same with one gpu worker and with two (tokens, rewards, weights); both workers serve chunks', async () => {
  const over = { rl: tinyRl({ steps: 2, promptsPerStep: 4, groupSize: 2, rollout: { maxNewTokens: 12, maxModelLen: 1400, promptMargin: 0, chunkPrompts: 1, temperature: 1 }, eval: { prompts: 3, every: 2 } }) };
  const one = testConfig(uniqueId('fan1'), over);
  const two = testConfig(uniqueId('fan2'), over);
  const store = testStore(one);
  await writeRlFixture(one, store);
  await writeRlFixture(two, store);
  const r1 = await runRl(one, 1);
  const r2 = await runRl(two, 2);
  assert.equal(r1.steps, 2);
  assert.equal(r2.steps, 2);

  const [rows1, rows2] = [await rows(store, one.run.id), await rows(store, two.run.id)];
  const steps = (rs: z.infer<typeof Row>[]) => rs.filter((r) => r.kind === 'step').map((r) => [r.step, r.weightsSha256, r.chunks]);
  const evals = (rs: z.infer<typeof Row>[]) => rs.filter((r) => r.kind === 'eval').map((r) => [r.step, r.rewardMean]);
  assert.deepEqual(steps(rows1), [[1, steps(rows1)[0]![1], 4], [2, steps(rows1)[1]![1], 4]]);
  assert.deepEqual(steps(rows2), steps(rows1), 'same weights after every step');
  assert.deepEqual(evals(rows2), evals(rows1), 'same held-out rewards');
  for (const folder of [rlKeys.step, rlKeys.eval].flatMap((f) => [1, 2].map((s) => [f, s] as const))) {
    const [f, s] = folder;
    if (f === rlKeys.eval && s === 1) continue; // evaluations at steps 0 and 2
    const step = f === rlKeys.eval && s === 2 ? 2 : s;
    const a = await store.getJson(rlKeys.merged(f(one.run.id, step)), RolloutsFile);
    const b = await store.getJson(rlKeys.merged(f(two.run.id, step)), RolloutsFile);
    assert.ok(a.rollouts.length > 0);
    assert.deepEqual(b.rollouts.map((r) => [r.id, r.group, r.tokens]), a.rollouts.map((r) => [r.id, r.group, r.tokens]), `same rollouts in ${f(two.run.id, step)}`);
  }
  // Groups are numbered per step across chunks: 4 prompts → groups 0..3.
  const merged = await store.getJson(rlKeys.merged(rlKeys.step(one.run.id, 1)), RolloutsFile);
  assert.deepEqual([...new Set(merged.rollouts.map((r) => r.group))], [0, 1, 2, 3]);

  const acts = await activityStarts(two, stageWorkflowId(two.run.id, 'rl'));
  const rolloutWorkers = new Set(acts.filter((a) => a.type === 'rlRollout').map((a) => a.identity));
  assert.equal(rolloutWorkers.size, 2, `rollout chunks ran on ${[...rolloutWorkers].join(', ')}`);
});

test('one-step-off async RL: step n+1 rolls out with the pre-update policy while step n trains; a gpu worker killed mid-update changes no weight', async () => {
  const over = {
    rl: tinyRl({ steps: 4, promptsPerStep: 2, groupSize: 2, async: 'one-step-off', continueAsNewEvery: 2, eval: { prompts: 0 }, rollout: { maxNewTokens: 12, maxModelLen: 1400, promptMargin: 0, chunkPrompts: 1 } }),
    temporal: { activity: { heartbeatTimeout: '10s', maxRetryInterval: '1s' } },
  };
  const calm = testConfig(uniqueId('async-a'), over);
  const store = testStore(calm);
  await writeRlFixture(calm, store);
  const a = await runRl(calm, 2);
  assert.equal(a.steps, 4);
  const rowsA = (await rows(store, calm.run.id)).filter((r) => r.kind === 'step');
  assert.deepEqual(rowsA.map((r) => r.staleness), [0, 1, 1, 1], 'staleness is one step from step 2 on');

  const acts = await activityStarts(calm, stageWorkflowId(calm.run.id, 'rl'));
  for (let n = 1; n < 4; n++) {
    const train = acts.find((x) => x.type === 'rlTrain' && x.input['step'] === n)!;
    const nextFirst = acts.find((x) => x.type === 'rlRollout' && String(x.input['folder']).startsWith(rlKeys.step(calm.run.id, n + 1)) && x.input['phase'] === 0)!;
    assert.ok(train && nextFirst, `activities of step ${n} and ${n + 1}`);
    assert.ok(nextFirst.scheduledAt < train.closedAt, `step ${n + 1}'s rollouts were scheduled before step ${n}'s update ended`);
    // The behaviour policy of step n+1 is the policy step n started from.
    assert.deepEqual(nextFirst.input['policy'], train.input['policy']);
    const nextTrain = acts.find((x) => x.type === 'rlTrain' && x.input['step'] === n + 1)!;
    assert.deepEqual(nextTrain.input['behaviour'], train.input['policy']);
  }

  // The same run, with the gpu worker that trains SIGKILLed while step 3's update is in flight, then started again.
  const killed = testConfig(uniqueId('async-b'), over);
  await writeRlFixture(killed, store);
  const b = await runRl(killed, 2, async (handle, workers) => {
    for (;;) {
      const described = await handle.describe();
      if (described.status.name !== 'RUNNING') throw new Error('the run ended before a training step of step 3 or 4 could be interrupted');
      const pending = described.raw.pendingActivities ?? [];
      const training = pending.find((p) => p.activityType?.name === 'rlTrain' && p.state === 2 /* STARTED */);
      if (training && (await store.exists(`${stepFolder(rlKeys.checkpoints(killed.run.id), 2)}/manifest.json`))) {
        const who = training.lastWorkerIdentity ?? '';
        const victim = workers.findIndex((w) => who.startsWith(`${w.proc.pid}@`));
        if (victim >= 0) {
          await workers[victim]!.kill('SIGKILL');
          workers[victim] = await startChildWorker(writeConfigFile(killed), victim === 0 ? 'workflows,api,gpu' : 'gpu');
          return;
        }
      }
      await sleep(20);
    }
  });
  assert.equal(b.steps, 4);
  const rowsB = (await rows(store, killed.run.id)).filter((r) => r.kind === 'step');
  assert.deepEqual(rowsB.map((r) => [r.step, r.weightsSha256]), rowsA.map((r) => [r.step, r.weightsSha256]), 'same weights after every step');
});
