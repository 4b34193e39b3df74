/**
 * Advantages travel with the rollouts they belong to (issue 14's silent join): the trainer joins them by rollout id,
 * in any order, and a missing, extra, duplicated or misshapen row is an error naming the rollout, never a 0.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { joinAdvantages } from '../../../../../src/stages/rl/algo/advantages';

const seg = (start: number, end: number) => ({ start, end, turn: 0 });
const rollouts = [
  { id: 'a#0', segments: [seg(10, 20), seg(30, 35)] },
  { id: 'a#1', segments: [seg(10, 18)] },
];

test('joined by id whatever the order of the rows; every segment gets its own advantage', () => {
  const out = joinAdvantages(rollouts, [{ id: 'a#1', advantages: [-0.5] }, { id: 'a#0', advantages: [0.25, 0.75] }], 'step 3');
  assert.deepEqual(out, [
    [{ ...seg(10, 20), advantage: 0.25 }, { ...seg(30, 35), advantage: 0.75 }],
    [{ ...seg(10, 18), advantage: -0.5 }],
  ]);
});

test('a rollout without a row, a row without a rollout, a duplicate, a wrong segment count or a non-finite value is an error', () => {
  const ok = { id: 'a#0', advantages: [0.25, 0.75] };
  assert.throws(() => joinAdvantages(rollouts, [ok], 'step 3'), /step 3: no advantages for rollout a#1/);
  assert.throws(() => joinAdvantages(rollouts, [ok, { id: 'a#1', advantages: [0] }, { id: 'b#0', advantages: [1] }], 'step 3'), /advantages for 1 rollout\(s\) not in the batch \(b#0\)/);
  assert.throws(() => joinAdvantages(rollouts, [ok, ok, { id: 'a#1', advantages: [0] }], 'step 3'), /two advantage rows for rollout a#0/);
  assert.throws(() => joinAdvantages(rollouts, [ok, { id: 'a#1', advantages: [0, 1] }], 'step 3'), /rollout a#1 has 1 segments but 2 advantages/);
  assert.throws(() => joinAdvantages(rollouts, [ok, { id: 'a#1', advantages: [Number.NaN] }], 'step 3'), /rollout a#1, segment 0: advantage NaN/);
});
