/** Training checkpoints on MinIO: manifest written last, torn and altered checkpoints are never loaded. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CheckpointUnavailableError, completeCheckpoint, latestCheckpoint, listCheckpointFolders, readCheckpoint, removeCheckpoint, stepFolder, writeCheckpoint } from '../../src/storage/checkpoints';
import { runKey } from '../../src/run/layout';
import { ObjectStore } from '../../src/storage/store';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { closedPort, startS3FaultProxy } from '../helpers/s3FaultProxy';

test('the newest complete checkpoint is found; torn and altered ones are skipped', async () => {
  const cfg = testConfig(uniqueId('ckpt'));
  const store = testStore(cfg);
  const prefix = runKey(cfg.run.id, 'sft', 'checkpoints');
  assert.equal(await latestCheckpoint(store, prefix), undefined);

  await writeCheckpoint(store, prefix, 10, { 'model.safetensors': new Uint8Array([1, 2, 3]) }, { cursor: { epoch: 0, index: 8 } });
  const second = await writeCheckpoint(store, prefix, 20, { 'model.safetensors': new Uint8Array([4, 5, 6]), 'optimizer.safetensors': new Uint8Array([7]) }, { cursor: { epoch: 0, index: 16 } });
  // Step 30: the worker died after the weights, before the manifest.
  await store.putBytes(`${stepFolder(prefix, 30)}/model.safetensors`, new Uint8Array([9, 9]));

  const latest = await latestCheckpoint(store, prefix);
  assert.equal(latest?.manifest.step, 20);
  const { files, manifest } = await readCheckpoint(store, latest!.manifestKey);
  assert.deepEqual([...files['optimizer.safetensors']!], [7]);
  assert.deepEqual(manifest.state, { cursor: { epoch: 0, index: 16 } });
  assert.equal(second.manifest.files['model.safetensors']?.bytes, 3);

  // A file altered behind the manifest's back makes that checkpoint unusable: fall back to step 10.
  await store.putBytes(`${stepFolder(prefix, 20)}/optimizer.safetensors`, new Uint8Array([8]));
  const notes: string[] = [];
  assert.equal((await latestCheckpoint(store, prefix, (m) => notes.push(m)))?.manifest.step, 10);
  assert.match(notes.join('\n'), /differs from the manifest/);
});

test('removal takes the manifest first: a half-removed folder is no checkpoint, and removing again finishes it', async () => {
  const cfg = testConfig(uniqueId('ckpt-rm'));
  const store = testStore(cfg);
  const prefix = runKey(cfg.run.id, 'rl', 'checkpoints');
  for (const step of [1, 2, 3]) await writeCheckpoint(store, prefix, step, { 'model.safetensors': new Uint8Array([step]), 'optimizer.safetensors': new Uint8Array([step, step]) }, {});
  const folders = await listCheckpointFolders(store, prefix);
  assert.deepEqual([...folders.keys()], [1, 2, 3]);

  // A pruner killed right after its first removal: step 3 keeps its files but not its manifest.
  const removed: string[] = [];
  await assert.rejects(removeCheckpoint(store, prefix, 3, folders.get(3)!, (key) => {
    removed.push(key);
    throw new Error('killed');
  }), /killed/);
  assert.deepEqual(removed, [`${stepFolder(prefix, 3)}/manifest.json`]);
  assert.equal((await latestCheckpoint(store, prefix))?.manifest.step, 2, 'the half-removed folder is skipped');
  assert.equal((await listCheckpointFolders(store, prefix)).get(3)?.length, 2, 'its files are still there');

  // The retry lists again and finishes; removing what is gone is no error.
  assert.equal(await removeCheckpoint(store, prefix, 3, (await listCheckpointFolders(store, prefix)).get(3)!), 3);
  assert.equal(await removeCheckpoint(store, prefix, 1, folders.get(1)!), 3);
  assert.equal(await removeCheckpoint(store, prefix, 1, folders.get(1)!), 3);
  assert.deepEqual([...(await listCheckpointFolders(store, prefix)).keys()], [2]);
  assert.equal((await latestCheckpoint(store, prefix))?.manifest.step, 2);
});

// Issue 28: only an answer of the store ("no such object") may make a lookup fall back to an older checkpoint.
const fast = { retry: { attempts: 3, delayMs: 20 } };

test('a store that answers 503 for the newest manifest: the lookup retries, then throws; it never resumes from the older checkpoint', async () => {
  const cfg = testConfig(uniqueId('ckpt-503'));
  const store = testStore(cfg);
  const prefix = runKey(cfg.run.id, 'sft', 'checkpoints');
  for (const step of [10, 20]) await writeCheckpoint(store, prefix, step, { 'model.safetensors': new Uint8Array([step]) }, {});
  const newest = `${stepFolder(prefix, 20)}/manifest.json`;

  let failures = Infinity;
  const proxy = await startS3FaultProxy(cfg.s3.endpoint, (method, path) => method === 'GET' && path.endsWith(`/${newest}`) && failures-- > 0);
  try {
    const viaProxy = ObjectStore.fromConfig({ ...cfg.s3, endpoint: proxy.url });
    await assert.rejects(latestCheckpoint(viaProxy, prefix, () => undefined, fast), (e: unknown) => {
      assert.ok(e instanceof CheckpointUnavailableError, String(e));
      assert.match(e.message, new RegExp(`${newest}.*not falling back`));
      return true;
    });
    // Three tries of ours (minio-js may send each request again on a 5xx itself), then it gave up.
    assert.ok(proxy.faults.length >= 3 && proxy.faults.length % 3 === 0, `asked ${proxy.faults.length} times`);

    // A store that recovers within the retries: the newest checkpoint, as if nothing happened.
    proxy.faults.length = 0;
    failures = 2;
    assert.equal((await latestCheckpoint(viaProxy, prefix, () => undefined, fast))?.manifest.step, 20);
    assert.equal(proxy.faults.length, 2);
  } finally {
    await proxy.close();
  }
});

test('an unreachable store (closed port): the lookup throws instead of answering "no checkpoint"', async () => {
  const cfg = testConfig(uniqueId('ckpt-down'));
  const store = testStore(cfg);
  const prefix = runKey(cfg.run.id, 'sft', 'checkpoints');
  await writeCheckpoint(store, prefix, 1, { 'model.safetensors': new Uint8Array([1]) }, {});
  const down = ObjectStore.fromConfig({ ...cfg.s3, endpoint: `http://127.0.0.1:${await closedPort()}` });
  await assert.rejects(completeCheckpoint(down, `${stepFolder(prefix, 1)}/manifest.json`, () => undefined, fast), CheckpointUnavailableError);
  await assert.rejects(latestCheckpoint(down, prefix, () => undefined, fast), CheckpointUnavailableError);
});

test('a corrupt manifest is skipped with a warning naming its key; a torn one (no manifest) is skipped as before', async () => {
  const cfg = testConfig(uniqueId('ckpt-bad'));
  const store = testStore(cfg);
  const prefix = runKey(cfg.run.id, 'sft', 'checkpoints');
  await writeCheckpoint(store, prefix, 1, { 'model.safetensors': new Uint8Array([1]) }, {});
  const notJson = `${stepFolder(prefix, 2)}/manifest.json`;
  const wrongShape = `${stepFolder(prefix, 3)}/manifest.json`;
  await store.putText(notJson, '{"format": "cm2-checkpoint/1", "step"');
  await store.putJson(wrongShape, { format: 'cm2-checkpoint/0', step: 3 });
  await store.putBytes(`${stepFolder(prefix, 4)}/model.safetensors`, new Uint8Array([4])); // torn: no manifest
  const notes: string[] = [];
  assert.equal((await latestCheckpoint(store, prefix, (m) => notes.push(m), fast))?.manifest.step, 1);
  assert.equal(notes.length, 2, notes.join('\n'));
  assert.match(notes[0]!, new RegExp(`^WARNING: checkpoint ${wrongShape}: unreadable manifest \\(format: .*\\); skipped`));
  assert.match(notes[1]!, new RegExp(`^WARNING: checkpoint ${notJson}: unreadable manifest \\(not JSON`));
});
