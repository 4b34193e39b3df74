import { test } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod';
import { NotFoundError, sha256 } from '../../src/storage/store';
import { runKey } from '../../src/run/layout';
import { testConfig, testStore, uniqueId } from '../helpers/env';

test('object store round-trips JSON, JSONL and bytes on the real MinIO server', async () => {
  const cfg = testConfig(uniqueId('store'));
  const store = testStore(cfg);
  const key = (name: string) => runKey(cfg.run.id, name);

  const ref = await store.putJson(key('a.json'), { x: 1, y: [1, 2] });
  assert.equal(ref.sha256.length, 64);
  assert.deepEqual(await store.getJson(key('a.json')), { x: 1, y: [1, 2] });
  assert.deepEqual(await store.getJson(key('a.json'), z.object({ x: z.number() })), { x: 1 });
  await assert.rejects(store.getJson(key('a.json'), z.object({ x: z.string() })), /x: /);

  await store.putJsonl(key('rows.jsonl'), [{ a: 1 }, { a: 2 }]);
  assert.deepEqual(await store.getJsonl(key('rows.jsonl')), [{ a: 1 }, { a: 2 }]);

  const bytes = new Uint8Array([0, 1, 2, 255]);
  const bref = await store.putBytes(key('b.bin'), bytes);
  assert.equal(bref.sha256, sha256(bytes));
  assert.deepEqual([...(await store.getVerified(bref))], [0, 1, 2, 255]);
  assert.deepEqual(await store.ref(key('b.bin')), bref);

  assert.equal(await store.exists(key('a.json')), true);
  assert.equal(await store.exists(key('missing.json')), false);
  await assert.rejects(store.getBytes(key('missing.json')), NotFoundError);
  assert.deepEqual(await store.list(runKey(cfg.run.id, '')), [key('a.json'), key('b.bin'), key('rows.jsonl')]);
});

test('server-side encryption asked of a MinIO without a KMS: the header is sent and the server refuses the write', async () => {
  const cfg = testConfig(uniqueId('sse'), { s3: { sse: 'AES256' } });
  const store = testStore(cfg);
  await assert.rejects(store.putText(runKey(cfg.run.id, 'x.txt'), 'x'), (e: Error & { code?: string }) => {
    assert.equal(e.code, 'NotImplemented');
    assert.match(e.message, /Server side encryption specified but KMS is not configured/);
    return true;
  });
  assert.equal(await store.exists(runKey(cfg.run.id, 'x.txt')), false);
});

test('a conditional write lands once: the second writer of a key is told, and the first one’s object stays', async () => {
  const cfg = testConfig(uniqueId('once'));
  const store = testStore(cfg);
  const key = runKey(cfg.run.id, 'rl', 'steps', 'step-000001', 'phase-000.json');
  assert.equal(await store.putJsonIfAbsent(key, { rollouts: [{ id: 'a', tokens: [1, 2, 3] }] }), true);
  assert.equal(await store.putJsonIfAbsent(key, { rollouts: [{ id: 'a', tokens: [9, 9] }] }), false);
  assert.deepEqual(await store.getJson(key), { rollouts: [{ id: 'a', tokens: [1, 2, 3] }] });
  // two at once: exactly one lands
  const other = `${key}.race`;
  const results = await Promise.all([1, 2, 3, 4].map((i) => store.putJsonIfAbsent(other, { writer: i })));
  assert.equal(results.filter(Boolean).length, 1);
  const winner = results.indexOf(true) + 1;
  assert.deepEqual(await store.getJson(other), { writer: winner });
});
