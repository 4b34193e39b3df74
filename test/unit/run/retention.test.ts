/** Checkpoint retention (`rl.keepCheckpoints`): which checkpoints stay, which go. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkpointsToKeep, checkpointsToPrune, minimumKept } from '../../../src/run/retention';
import { RlConfig } from '../../../src/run/config';

test('keepCheckpoints 0 (the default) keeps everything: no pruning at all', () => {
  assert.equal(RlConfig.parse({}).keepCheckpoints, 0);
  assert.equal(checkpointsToKeep({ step: 50, keep: 0, inUse: [50] }), undefined);
  assert.throws(() => RlConfig.parse({ keepCheckpoints: -1 }));
  assert.throws(() => RlConfig.parse({ keepCheckpoints: 1.5 }));
});

test('the newest `keep` checkpoints stay, and every one in use whatever `keep` says', () => {
  assert.deepEqual(checkpointsToKeep({ step: 7, keep: 2, inUse: [7, 0, 3, 6] }), [3, 6, 7]);
  assert.deepEqual(checkpointsToKeep({ step: 7, keep: 1, inUse: [7] }), [7]);
  assert.deepEqual(checkpointsToKeep({ step: 2, keep: 5, inUse: [2] }), [1, 2]);
  // The current policy is kept even when the caller forgets to say so, as the newest step.
  assert.deepEqual(checkpointsToKeep({ step: 9, keep: 1, inUse: [] }), [9]);
  // Steps in use beyond the committed step or below 1 (the SFT policy) are not checkpoints of this range.
  assert.deepEqual(checkpointsToKeep({ step: 4, keep: 1, inUse: [0, 4, 8] }), [4]);
});

test('the floor: one-step-off async training keeps at least the two newest', () => {
  assert.equal(minimumKept({}), 1);
  assert.equal(minimumKept({ async: 'off' }), 1);
  assert.equal(minimumKept({ async: 'one-step-off' }), 2);
  assert.deepEqual(checkpointsToKeep({ step: 10, keep: 1, inUse: [10], minimum: minimumKept({ async: 'one-step-off' }) }), [9, 10]);
  assert.deepEqual(checkpointsToKeep({ step: 10, keep: 3, inUse: [10], minimum: 2 }), [8, 9, 10]);
});

test('pruning removes only steps at or below the committed one that are not kept', () => {
  assert.deepEqual(checkpointsToPrune([1, 2, 3, 4, 5, 6, 7, 8], 7, [3, 6, 7]), [1, 2, 4, 5]);
  // A step above the committed one (a later step being written, seen by a stale attempt) is never touched.
  assert.deepEqual(checkpointsToPrune([9, 8, 1], 7, [7]), [1]);
  assert.deepEqual(checkpointsToPrune([], 7, [7]), []);
});
