import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as tf from '@tensorflow/tfjs';
import { policyLossTerms } from '../../../../../src/stages/rl/algo/loss';

const t2 = (xs: number[]) => tf.tensor2d([xs]);
const val = (s: tf.Scalar) => s.dataSync()[0]!;

describe('GRPO policy loss terms', () => {
  const cfg = { clipLow: 0.2, clipHigh: 0.2, clipRatioC: 3, klCoef: 0 };

  test('ratio 1 (on-policy): the loss is −A per token', () => {
    const lp = t2([-1, -2]);
    const r = policyLossTerms(lp, lp, undefined, t2([0.5, -1]), t2([1, 1]), cfg);
    assert.ok(Math.abs(val(r.pgSum) - (-0.5 + 1)) < 1e-6);
    assert.equal(val(r.clipped), 0);
  });

  test('PPO clip: a positive advantage stops gaining above 1 + ε, a negative one below 1 − ε', () => {
    // ratio e^0.5 ≈ 1.65 with A = +1 → clipped at 1.2: loss −1.2; ratio e^−0.5 ≈ 0.61 with A = −1 → max(0.61, 0.8) = 0.8.
    const r = policyLossTerms(t2([0.5, -0.5]), t2([0, 0]), undefined, t2([1, -1]), t2([1, 1]), cfg);
    assert.ok(Math.abs(val(r.pgSum) - (-1.2 + 0.8)) < 1e-5);
    assert.equal(val(r.clipped), 2);
  });

  test('dual clip bounds the loss of a negative advantage at −A·c when the ratio explodes', () => {
    const ratio = Math.log(10); // ratio 10, A = −1: PPO gives 10, dual clip caps at 3
    const r = policyLossTerms(t2([ratio]), t2([0]), undefined, t2([-1]), t2([1]), cfg);
    assert.ok(Math.abs(val(r.pgSum) - 3) < 1e-5);
    const noDual = policyLossTerms(t2([ratio]), t2([0]), undefined, t2([-1]), t2([1]), { ...cfg, clipRatioC: undefined });
    assert.ok(Math.abs(val(noDual.pgSum) - 10) < 1e-4);
  });

  test('low-variance KL: exp(ref − logp) − (ref − logp) − 1, zero when equal, masked tokens ignored', () => {
    const r = policyLossTerms(t2([-1, -1, -3]), t2([-1, -1, -3]), t2([-1, -2, 0]), t2([0, 0, 0]), t2([1, 1, 0]), cfg);
    const d = -1;
    assert.ok(Math.abs(val(r.klSum) - (Math.exp(d) - d - 1)) < 1e-6);
  });
});
