/**
 * Checkpoint lookups against a scripted S3 server (no MinIO needed; test/integration/checkpoints.test.ts does the
 * same against MinIO through a fault proxy): an answer of the store ("no such key", a corrupt manifest) may make a
 * lookup fall back; an error in asking (5xx, a closed port) is retried and then thrown, never taken for "no checkpoint".
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseConfig } from '../../../src/run/config';
import { CheckpointUnavailableError, completeCheckpoint } from '../../../src/storage/checkpoints';
import { NotFoundError, ObjectStore, retryTransient } from '../../../src/storage/store';
import { closedPort } from '../../helpers/s3FaultProxy';

const env = { CM2_S3_ACCESS_KEY: 'id', CM2_S3_SECRET_KEY: 'secret' };
const storeAt = (endpoint: string) => ObjectStore.fromConfig(parseConfig({ run: { id: 'r' }, s3: { endpoint, bucket: 'bkt' } }).s3, env);
const fast = { retry: { attempts: 3, delayMs: 5 } };
const KEY = 'runs/r/sft/checkpoints/step-00000002/manifest.json';

/** A server that owns bucket `bkt` and answers GETs of objects with `answer(key)`: [status, body]. */
async function scriptedS3(answer: (key: string) => [number, string]): Promise<{ url: string; gets: string[]; close: () => Promise<void> }> {
  const gets: string[] = [];
  const server = http.createServer((req, res) => {
    req.resume();
    const path = decodeURIComponent((req.url ?? '/').split('?')[0]!);
    if (path === '/bkt' || path === '/bkt/') {
      res.writeHead(200);
      res.end();
      return;
    }
    const key = path.replace(/^\/bkt\//, '');
    gets.push(key);
    const [status, body] = answer(key);
    res.writeHead(status, { 'content-type': status === 200 ? 'application/json' : 'application/xml' });
    res.end(req.method === 'HEAD' ? undefined : body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    gets,
    close: () => new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}
const s3Error = (code: string) => `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${code}</Message></Error>`;

test('retryTransient: asks again after errors, never after "not found"', async () => {
  let calls = 0;
  assert.equal(await retryTransient(async () => (++calls < 3 ? Promise.reject(new Error('ECONNRESET')) : 'ok'), { attempts: 3, delayMs: 1 }), 'ok');
  assert.equal(calls, 3);
  calls = 0;
  await assert.rejects(retryTransient(async () => (calls++, Promise.reject(new Error('503'))), { attempts: 2, delayMs: 1 }), /503/);
  assert.equal(calls, 2);
  calls = 0;
  await assert.rejects(retryTransient(async () => (calls++, Promise.reject(new NotFoundError('k'))), { attempts: 5, delayMs: 1 }), NotFoundError);
  assert.equal(calls, 1);
});

test('a 503 for the manifest: retried, then CheckpointUnavailableError (not "no checkpoint")', async () => {
  const s3 = await scriptedS3(() => [503, s3Error('SlowDown')]);
  try {
    await assert.rejects(completeCheckpoint(storeAt(s3.url), KEY, () => undefined, fast), (e: unknown) => e instanceof CheckpointUnavailableError && e.key === KEY);
    // Three tries of ours; minio-js may send each request again on a 5xx itself (one retry in 8.x).
    assert.ok(s3.gets.length >= 3 && s3.gets.length % 3 === 0, `${s3.gets.length} requests`);
  } finally {
    await s3.close();
  }
});

test('an unreachable store: CheckpointUnavailableError', async () => {
  await assert.rejects(completeCheckpoint(storeAt(`http://127.0.0.1:${await closedPort()}`), KEY, () => undefined, fast), CheckpointUnavailableError);
});

test('absent and unreadable manifests are answers: undefined, the unreadable one with a WARNING naming its key', async () => {
  const s3 = await scriptedS3((key) => (key.endsWith('step-00000002/manifest.json') ? [200, '{"format": "cm2-che'] : [404, s3Error('NoSuchKey')]));
  try {
    const notes: string[] = [];
    assert.equal(await completeCheckpoint(storeAt(s3.url), KEY, (m) => notes.push(m), fast), undefined);
    assert.equal(await completeCheckpoint(storeAt(s3.url), KEY.replace('00000002', '00000001'), (m) => notes.push(m), fast), undefined);
    assert.match(notes[0]!, new RegExp(`^WARNING: checkpoint ${KEY}: unreadable manifest \\(not JSON`));
    assert.match(notes[1]!, /step-00000001\/manifest\.json: no manifest/);
    assert.equal(s3.gets.length, 2, 'answers are not retried');
  } finally {
    await s3.close();
  }
});
