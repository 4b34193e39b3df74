/**
 * `setHyperparameters` under load: updates sent at random moments of an RL run (rollouts, judge, advantages, training,
 * evaluation, continue-as-new) while a CPU-bound process runs beside it. Every reply names the step it applies from,
 * and the recorded step rows show that each step ran with exactly the hyperparameters of the updates whose reply
 * named that step or an earlier one: an accepted update is never late, never early.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { z } from 'zod';
import { startRl } from '../../src/cli/stages';
import { connectClient } from '../../src/infra/temporal';
import { runKey } from '../../src/run/layout';
import { mulberry32 } from '../../src/kernel/rng';
import { setHyperparametersUpdate, type RlHyperparametersReply } from '../../src/stages/rl/workflow';
import type { RlHyperparameters } from '../../src/run/config';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { startChildWorker, writeConfigFile } from '../helpers/processes';
import { tinyRl, writeRlFixture } from '../helpers/rlFixture';
import { track } from '../helpers/leftovers';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const Row = z.looseObject({ step: z.number(), kind: z.string(), lr: z.number().optional(), klCoef: z.number().optional(), granularity: z.string().optional() });

test('RL: updates sent at random moments under load apply from the step their reply names, to every step after it', async () => {
  const seed = Number(process.env['CM2_UPDATE_SEED'] ?? Math.floor(Math.random() * 2 ** 31));
  console.log(`update schedule seed ${seed} (CM2_UPDATE_SEED=${seed} repeats it)`);
  const rand = mulberry32(seed);
  const STEPS = 8;
  const initial: RlHyperparameters = { lr: 1e-3, klCoef: 1e-3, granularity: 'trajectory' };
  const cfg = testConfig(uniqueId('rlupd'), { rl: tinyRl({ steps: STEPS, hp: initial, continueAsNewEvery: 3, eval: { prompts: 2, every: 4 } }), temporal: { activity: { heartbeatTimeout: '20s', maxRetryInterval: '1s' } } });
  const store = testStore(cfg);
  await writeRlFixture(cfg, store);
  const worker = await startChildWorker(writeConfigFile(cfg));
  // The CPU-bound process beside the run (the load the race was seen under), niced as in the drills.
  const hog = spawn('nice', ['-n', '5', process.execPath, '-e', 'for (;;) {}'], { stdio: 'ignore' });
  track(hog.pid);
  try {
    const client = await connectClient(cfg);
    const handle = await startRl(client, cfg);
    const finished = handle.result().then(() => true);
    const replies: { patch: Partial<RlHyperparameters>; reply: RlHyperparametersReply }[] = [];
    const granularities = ['trajectory', 'turn', 'step'] as const;
    for (let i = 0; ; i++) {
      if (await Promise.race([finished, sleep(200 + rand() * 2500).then(() => false)])) break;
      const patch: Partial<RlHyperparameters> = rand() < 0.5 ? { lr: Number((1e-4 * (i + 2)).toPrecision(3)) } : { klCoef: Number((1e-3 * (i + 2)).toPrecision(3)), granularity: granularities[i % 3]! };
      try {
        // The handle follows continue-as-new (it is not pinned to a run id).
        const reply = await client.workflow.getHandle(handle.workflowId).executeUpdate(setHyperparametersUpdate, { args: [patch] });
        replies.push({ patch, reply });
      } catch (e) {
        // Only after the last step: the workflow completed while the update was on its way.
        if (!(await Promise.race([finished, sleep(5000).then(() => false)]))) throw e;
        break;
      }
    }
    const result = await handle.result();
    assert.equal(result.steps, STEPS);
    assert.ok(replies.length >= 3, `only ${replies.length} updates were accepted`);

    const rows = (await store.getText(runKey(cfg.run.id, 'rl', 'metrics.jsonl'))).split('\n').filter(Boolean).map((l) => Row.parse(JSON.parse(l))).filter((r) => r.kind === 'step');
    assert.deepEqual(rows.map((r) => r.step), Array.from({ length: STEPS }, (_, i) => i + 1));
    let previous = 0;
    for (const { reply } of replies) {
      assert.ok(reply.fromStep >= previous, `replies name non-decreasing steps: ${JSON.stringify(replies)}`);
      previous = reply.fromStep;
    }
    for (const row of rows) {
      // In force for this step: the initial values, then every update whose reply named this step or an earlier one.
      const expected = replies.filter((u) => u.reply.fromStep <= row.step).reduce<RlHyperparameters>((hp, u) => ({ ...hp, ...u.patch }), initial);
      const schedule = replies.map((u) => `${JSON.stringify(u.patch)} from ${u.reply.fromStep}`).join('; ');
      assert.deepEqual({ lr: row.lr, klCoef: row.klCoef, granularity: row.granularity }, expected, `step ${row.step} ran with the hyperparameters in force when it fixed them (updates: ${schedule})`);
    }
    // The reply carries the values in force after the update, whatever step they apply from.
    for (const [i, { reply }] of replies.entries()) {
      const after = replies.slice(0, i + 1).reduce<RlHyperparameters>((hp, u) => ({ ...hp, ...u.patch }), initial);
      assert.deepEqual({ lr: reply.lr, klCoef: reply.klCoef, granularity: reply.granularity }, after);
    }
    console.log(`${replies.length} updates, applying from steps ${replies.map((u) => u.reply.fromStep).join(', ')}`);
  } finally {
    hog.kill('SIGKILL');
    await worker.kill('SIGTERM');
  }
});
