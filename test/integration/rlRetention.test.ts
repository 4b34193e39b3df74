/**
 * Checkpoint retention (`rl.keepCheckpoints`) on Temporal + MinIO: the run keeps exactly the newest checkpoints, the
 * evaluated ones and the final one; a SIGKILL of the api worker in the middle of pruning (a folder half removed,
 * manifest first) leaves the checkpoint a resume needs intact, and the resumed run (the gpu worker killed too, so the
 * next update loads that checkpoint from S3) finishes with the weights of an undisturbed run that keeps everything.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startRl } from '../../src/cli/stages';
import { completeCheckpoint, latestCheckpoint, listCheckpointFolders, stepFolder } from '../../src/storage/checkpoints';
import { connectClient } from '../../src/infra/temporal';
import { rlKeys } from '../../src/run/layout';
import { stepWeights } from '../helpers/dedicatedServers';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { startChildWorker, writeConfigFile, type ChildWorker } from '../helpers/processes';
import { tinyRl, writeRlFixture } from '../helpers/rlFixture';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('RL retention: keepCheckpoints keeps exactly the expected steps; a kill during pruning loses nothing a resume needs', async () => {
  // Evaluations at 0, 3, 6 and 7 (the end); pruning from step 3 on, one folder at a time.
  const rl = tinyRl({ steps: 7, eval: { prompts: 2, every: 3 }, continueAsNewEvery: 3 });
  const timeouts = { temporal: { activity: { heartbeatTimeout: '5s', maxRetryInterval: '1s' } } };
  const a = testConfig(uniqueId('rlka'), { rl, ...timeouts });
  const b = testConfig(uniqueId('rlkb'), { rl: { ...rl, keepCheckpoints: 2 }, ...timeouts });
  const store = testStore(a);
  await writeRlFixture(a, store);
  await writeRlFixture(b, store);
  const client = await connectClient(a);
  const prefix = rlKeys.checkpoints(b.run.id);
  const fileB = writeConfigFile(b);

  // The undisturbed reference (keeps everything) runs alongside.
  const workerA = await startChildWorker(writeConfigFile(a));
  const reference = startRl(client, a).then((h) => h.result()).finally(() => workerA.kill('SIGTERM'));

  // Pruning pauses 1.5 s after each object it removes, so the kill lands inside it.
  let api: ChildWorker = await startChildWorker(fileB, 'api', { CM2_TEST_PRUNE_DELAY_MS: '1500' });
  let rest: ChildWorker = await startChildWorker(fileB, 'workflows,gpu');
  try {
    const handle = await startRl(client, b);
    // Step 3 recorded → step 1 is pruned: wait until its manifest is gone and its weights are still there.
    // (Step 1 looks the same while it is being written: step 3's manifest tells the two apart.)
    const [one, three] = [stepFolder(prefix, 1), stepFolder(prefix, 3)];
    for (;;) {
      if ((await store.exists(`${three}/manifest.json`)) && !(await store.exists(`${one}/manifest.json`)) && (await store.exists(`${one}/model.safetensors`))) break;
      await sleep(20);
    }
    await api.kill('SIGKILL');
    await rest.kill('SIGKILL');
    // Half-pruned: no manifest, so nothing takes step 1 for a checkpoint; the current policy (step 3) is complete.
    const half = await listCheckpointFolders(store, prefix);
    assert.ok((half.get(1) ?? []).length > 0, 'step 1 is half removed');
    assert.equal((await latestCheckpoint(store, prefix))?.manifest.step, 3, 'the checkpoint a resume needs is complete');

    api = await startChildWorker(fileB, 'api');
    rest = await startChildWorker(fileB, 'workflows,gpu');
    const result = await handle.result();
    assert.equal(result.steps, 7);
    assert.deepEqual(result.evals.map((e) => e.step), [0, 3, 6, 7]);
  } finally {
    await api.kill('SIGTERM');
    await rest.kill('SIGTERM');
  }
  const ra = await reference;
  assert.equal(ra.steps, 7);

  // Exactly the newest two (6, 7), the evaluated ones (3, 6, 7) and the final one (7); each complete.
  const folders = await listCheckpointFolders(store, prefix);
  assert.deepEqual([...folders.keys()].sort((x, y) => x - y), [3, 6, 7]);
  for (const s of [3, 6, 7]) assert.equal((await completeCheckpoint(store, `${stepFolder(prefix, s)}/manifest.json`))?.manifest.step, s, `checkpoint ${s} is complete`);
  assert.deepEqual([...(await listCheckpointFolders(store, rlKeys.checkpoints(a.run.id))).keys()].sort((x, y) => x - y), [1, 2, 3, 4, 5, 6, 7], 'keepCheckpoints 0 keeps all');
  assert.deepEqual(await stepWeights(store, b.run.id), await stepWeights(store, a.run.id), 'the same weights after every step as the undisturbed run');
});
