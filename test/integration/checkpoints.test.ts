/** Training checkpoints on MinIO: manifest written last, torn and altered checkpoints are never loaded. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { latestCheckpoint, readCheckpoint, stepFolder, writeCheckpoint } from '../../src/storage/checkpoints';
import { runKey } from '../../src/run/layout';
import { testConfig, testStore, uniqueId } from '../helpers/env';

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
