/**
 * cm2's one PRNG (src/kernel/rng.ts) and the classes built on it draw exactly the numbers the four copies it replaced
 * drew (values recorded from them), so data splits, demo datasets, initialisations and data orders are unchanged.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mulberry32 } from '../../../src/kernel/rng';
import { mulberry32 as splitStream } from '../../../src/stages/prepare/split';
import { mulberry32 as worldStream } from '../../../src/demo/random';
import { Rng as ModelRng } from '../../../src/model/net/random';
import { Rng as TrainRng } from '../../../src/kernel/dataOrder';

test('mulberry32 and its users draw the recorded numbers', () => {
  for (const stream of [mulberry32, splitStream, worldStream]) {
    const r = stream(42);
    assert.deepEqual([r(), r(), r()], [0.6011037519201636, 0.44829055899754167, 0.8524657934904099]);
  }
  const m = new ModelRng(7);
  assert.deepEqual([m.next(), m.next()], [0.9823943767696619, 0.3341257639694959]);
  const t = new TrainRng(7);
  assert.deepEqual([t.next(), t.next()], [0.011704753153026104, 0.06195825757458806]);
  const resumed = TrainRng.fromState(t.state);
  assert.equal(resumed.next(), t.next(), 'a stored state resumes the stream');
});
