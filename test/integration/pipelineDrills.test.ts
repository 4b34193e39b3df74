/**
 * Restart drills: a whole pipeline on a dedicated Temporal dev server and a dedicated MinIO; the Temporal server is
 * killed while SFT trains and started again on the same SQLite file, then MinIO is killed while RL trains and started
 * again on the same data folder. The run finishes with nothing lost or done twice: the same counts as an
 * uninterrupted run on the shared servers, and the same policy weights after every RL step.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Client } from '@temporalio/client';
import { pipelineWorkflowId, startPipeline, pipelineInput } from '../../src/cli/stages';
import { connectClient } from '../../src/infra/temporal';
import { runKey } from '../../src/run/layout';
import type { PipelineResult } from '../../src/stages/pipeline/workflow';
import { comparableStages, startDedicatedServers, stepWeights } from '../helpers/dedicatedServers';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { tinyPipeline } from '../helpers/pipelineFixture';
import { startChildWorker, writeConfigFile } from '../helpers/processes';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function waitForPending(client: Client, workflowId: string, activity: string, timeoutMs = 600_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const pending = (await client.workflow.getHandle(workflowId).describe()).raw.pendingActivities ?? [];
      if (pending.some((p) => p.activityType?.name === activity)) return;
    } catch {
      /* not started yet */
    }
    if (Date.now() > deadline) throw new Error(`${activity} never ran in ${workflowId}`);
    await sleep(200);
  }
}

test('restart drills: Temporal restarted during SFT, MinIO restarted during RL — the run finishes, nothing lost or repeated', async () => {
  const over = tinyPipeline({ rlSteps: 3 });
  // Reference: uninterrupted, on the shared servers.
  const a = testConfig(uniqueId('drla'), over);
  const storeA = testStore(a);
  let worker = await startChildWorker(writeConfigFile(a));
  let reference: PipelineResult;
  try {
    reference = await (await startPipeline(await connectClient(a), a)).result();
  } finally {
    await worker.kill('SIGTERM');
  }
  assert.equal(reference.state, 'completed');

  // The same run on dedicated servers, both restarted mid-run.
  const servers = await startDedicatedServers('drill');
  const b = servers.configure(testConfig(uniqueId('drlb'), over));
  const storeB = servers.store(b);
  worker = await startChildWorker(writeConfigFile(b), 'workflows,api,gpu', servers.env);
  try {
    let client = await connectClient(b);
    await startPipeline(client, b, pipelineInput(b));

    await waitForPending(client, `cm2-${b.run.id}-sft`, 'sftTrain');
    await servers.restartTemporal();
    client = await connectClient(b);

    await waitForPending(client, `cm2-${b.run.id}-rl`, 'rlTrain');
    await servers.restartMinio();

    let result: PipelineResult | undefined;
    for (let i = 0; !result; i++) {
      try {
        result = await (await connectClient(b)).workflow.getHandle(pipelineWorkflowId(b.run.id)).result();
      } catch (e) {
        if (i > 60) throw e;
        await sleep(1000);
      }
    }
    assert.equal(result.state, 'completed');
    assert.deepEqual(comparableStages(result), comparableStages(reference), 'same stage results as the uninterrupted run');
    assert.deepEqual(await stepWeights(storeB, b.run.id), await stepWeights(storeA, a.run.id), 'same weights after every RL step');
    assert.deepEqual(
      (await storeB.getJsonl(runKey(b.run.id, 'checklists', 'annotated.jsonl'))).length,
      (await storeA.getJsonl(runKey(a.run.id, 'checklists', 'annotated.jsonl'))).length,
    );
  } finally {
    await worker.kill('SIGTERM');
    await servers.stop();
  }
});
