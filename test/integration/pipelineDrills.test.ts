/**
 * Restart drills: a whole pipeline on a dedicated Temporal dev server and a dedicated MinIO; the Temporal server is
 * killed while SFT trains and started again on the same SQLite file, then MinIO is killed while RL trains and started
 * again on the same data folder. The run finishes with nothing lost or done twice: the same counts as an
 * uninterrupted run on the shared servers, and the same policy weights after every RL step.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import type { Client } from '@temporalio/client';
import { pipelineWorkflowId, startPipeline, pipelineInput } from '../../src/cli/stages';
import { freePort, killPid, localCredentials, startMinio, startTemporal } from '../../src/infra/localInfra';
import { connectClient } from '../../src/infra/temporal';
import { ObjectStore } from '../../src/storage/store';
import { runKey } from '../../src/run/layout';
import type { PipelineResult } from '../../src/stages/pipeline/workflow';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { tinyPipeline } from '../helpers/pipelineFixture';
import { startChildWorker, writeConfigFile } from '../helpers/processes';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const Row = z.looseObject({ step: z.number(), kind: z.string(), weightsSha256: z.string().optional() });
const shas = async (store: ObjectStore, runId: string) =>
  (await store.getText(runKey(runId, 'rl', 'metrics.jsonl'))).split('\n').filter(Boolean).map((l) => Row.parse(JSON.parse(l))).filter((r) => r.kind === 'step').map((r) => [r.step, r.weightsSha256]);
/** The stage results without what differs between two runs by design (run id, keys, times). */
const comparable = (r: PipelineResult) => r.stages.map((s) => ({ name: s.name, state: s.state, summary: Object.fromEntries(Object.entries(s.summary).filter(([k]) => !/Key$|policy/.test(k))) }));

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
  const dir = mkdtempSync(path.join(tmpdir(), 'cm2-drill-'));
  const [port, uiPort, s3Port, consolePort] = [await freePort(), await freePort(), await freePort(), await freePort()];
  let temporal = await startTemporal(dir, { port, uiPort });
  let minio = await startMinio(dir, { port: s3Port, consolePort });
  const creds = localCredentials(dir);
  const env = { TEMPORAL_ADDRESS: temporal.address, CM2_S3_ENDPOINT: minio.endpoint, CM2_S3_ACCESS_KEY: creds.accessKey, CM2_S3_SECRET_KEY: creds.secretKey };
  const b = testConfig(uniqueId('drlb'), over);
  b.temporal.address = temporal.address;
  b.s3.endpoint = minio.endpoint;
  const storeB = ObjectStore.fromConfig(b.s3, { ...process.env, ...env });
  worker = await startChildWorker(writeConfigFile(b), 'workflows,api,gpu', env);
  try {
    let client = await connectClient(b);
    await startPipeline(client, b, pipelineInput(b));

    await waitForPending(client, `cm2-${b.run.id}-sft`, 'sftTrain');
    killPid(temporal.pid, 'SIGKILL');
    await sleep(2000);
    temporal = await startTemporal(dir, { port, uiPort });
    client = await connectClient(b);

    await waitForPending(client, `cm2-${b.run.id}-rl`, 'rlTrain');
    killPid(minio.pid, 'SIGKILL');
    await sleep(3000);
    minio = await startMinio(dir, { port: s3Port, consolePort });

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
    assert.deepEqual(comparable(result), comparable(reference), 'same stage results as the uninterrupted run');
    assert.deepEqual(await shas(storeB, b.run.id), await shas(storeA, a.run.id), 'same weights after every RL step');
    assert.deepEqual(
      (await storeB.getJsonl(runKey(b.run.id, 'checklists', 'annotated.jsonl'))).length,
      (await storeA.getJsonl(runKey(a.run.id, 'checklists', 'annotated.jsonl'))).length,
    );
  } finally {
    await worker.kill('SIGTERM');
    killPid(temporal.pid, 'SIGTERM');
    killPid(minio.pid, 'SIGTERM');
    await sleep(500);
    rmSync(dir, { recursive: true, force: true });
  }
});
