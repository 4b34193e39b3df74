/**
 * Shard outputs are written under the activity attempt's own key, so an attempt that Temporal gave up on but that is
 * still running cannot overwrite the shard a later attempt recorded (seen with a real LLM: `hash mismatch`).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MockActivityEnvironment } from '@temporalio/testing';
import { attemptKey } from '../../../src/stages/activityKit';

test('attemptKey: attempt 1 and plain calls keep the key; a retry writes its own', async () => {
  assert.equal(attemptKey('runs/r/data/rl/shard-00001.jsonl'), 'runs/r/data/rl/shard-00001.jsonl');
  const first = new MockActivityEnvironment({ attempt: 1 });
  assert.equal(await first.run(async () => attemptKey('runs/r/data/rl/shard-00001.jsonl')), 'runs/r/data/rl/shard-00001.jsonl');
  const third = new MockActivityEnvironment({ attempt: 3 });
  assert.equal(await third.run(async () => attemptKey('runs/r/data/rl/shard-00001.jsonl')), 'runs/r/data/rl/shard-00001.a3.jsonl');
  assert.equal(await third.run(async () => attemptKey('runs/r.x/data/noext')), 'runs/r.x/data/noext.a3');
});
