/**
 * RL across a Temporal server restart: a dedicated dev server (its own SQLite file) is killed while a training step
 * is in flight and started again on the same file. The run finishes with exactly the weights, after every step, of
 * an uninterrupted run on the shared test server: no update applied twice, none skipped.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { startRl } from '../../src/cli/stages';
import { stepFolder } from '../../src/storage/checkpoints';
import { freePort, killPid, startTemporal } from '../../src/infra/localInfra';
import { connectClient } from '../../src/infra/temporal';
import { type ObjectStore } from '../../src/storage/store';
import { rlKeys, runKey } from '../../src/run/layout';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { startChildWorker, writeConfigFile } from '../helpers/processes';
import { tinyRl, writeRlFixture } from '../helpers/rlFixture';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const Row = z.looseObject({ step: z.number(), kind: z.string(), weightsSha256: z.string().optional() });
const shas = async (store: ObjectStore, runId: string) =>
  (await store.getText(runKey(runId, 'rl', 'metrics.jsonl'))).split('\n').filter(Boolean).map((l) => Row.parse(JSON.parse(l))).filter((r) => r.kind === 'step').map((r) => [r.step, r.weightsSha256]);

test('RL: a Temporal server restart mid-step neither repeats nor skips an update (weights equal an uninterrupted run)', async () => {
  const over = { rl: tinyRl({ steps: 3, eval: { prompts: 0 } }), temporal: { activity: { heartbeatTimeout: '10s', maxRetryInterval: '1s' } } };
  // Reference: uninterrupted, on the shared test server.
  const a = testConfig(uniqueId('rlra'), over);
  const store = testStore(a);
  await writeRlFixture(a, store);
  let worker = await startChildWorker(writeConfigFile(a));
  try {
    await (await startRl(await connectClient(a), a)).result();
  } finally {
    await worker.kill('SIGTERM');
  }

  // The same run on a dedicated server that is restarted while step 2 trains.
  const dir = mkdtempSync(path.join(tmpdir(), 'cm2-restart-'));
  const port = await freePort();
  const uiPort = await freePort();
  let server = await startTemporal(dir, { port, uiPort });
  const b = testConfig(uniqueId('rlrb'), over);
  // TEMPORAL_ADDRESS (set for the shared server) wins over the config file: point both sides at the dedicated one.
  b.temporal.address = server.address;
  await writeRlFixture(b, store);
  worker = await startChildWorker(writeConfigFile(b), 'workflows,api,gpu', { TEMPORAL_ADDRESS: server.address });
  try {
    const client = await connectClient(b);
    const handle = await startRl(client, b);
    for (;;) {
      const pending = (await handle.describe()).raw.pendingActivities ?? [];
      if (pending.some((p) => p.activityType?.name === 'rlTrain') && (await store.exists(`${stepFolder(rlKeys.checkpoints(b.run.id), 1)}/manifest.json`))) break;
      await sleep(5);
    }
    killPid(server.pid, 'SIGKILL');
    await sleep(2000);
    server = await startTemporal(dir, { port, uiPort });
    let result;
    for (let i = 0; ; i++) {
      try {
        result = await (await connectClient(b)).workflow.getHandle(handle.workflowId).result();
        break;
      } catch (e) {
        if (i > 60) throw e;
        await sleep(1000);
      }
    }
    assert.equal(result.steps, 3);
  } finally {
    await worker.kill('SIGTERM');
    killPid(server.pid, 'SIGTERM');
    await sleep(500);
    rmSync(dir, { recursive: true, force: true });
  }
  assert.deepEqual(await shas(store, b.run.id), await shas(store, a.run.id), 'same weights after every step');
});
