import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mapConcurrent } from '../../../src/kernel/mapConcurrent';

test('mapConcurrent: results in order, at most `concurrency` in flight, progress after each', async () => {
  let inFlight = 0;
  let most = 0;
  const progress: number[] = [];
  const out = await mapConcurrent([30, 5, 20, 1, 10], 2, async (ms, i) => {
    most = Math.max(most, ++inFlight);
    await new Promise((r) => setTimeout(r, ms));
    inFlight--;
    return i * 10;
  }, (done) => progress.push(done));
  assert.deepEqual(out, [0, 10, 20, 30, 40]);
  assert.equal(most, 2);
  assert.deepEqual(progress, [1, 2, 3, 4, 5]);
});

test('mapConcurrent: the first failure stops new calls and is thrown after the ones in flight end', async () => {
  const started: number[] = [];
  let finished = 0;
  await assert.rejects(mapConcurrent([0, 1, 2, 3, 4, 5], 2, async (x) => {
    started.push(x);
    await new Promise((r) => setTimeout(r, x === 1 ? 1 : 20));
    if (x === 1) throw new Error('boom');
    finished++;
    return x;
  }), /boom/);
  assert.deepEqual(started, [0, 1], 'nothing new after the failure');
  assert.equal(finished, 1, 'the call in flight ended');
  assert.deepEqual(await mapConcurrent([], 4, async (x: number) => x), []);
});
