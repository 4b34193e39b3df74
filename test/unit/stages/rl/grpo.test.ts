import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as tf from '@tensorflow/tfjs';
import { collateGrpo, GrpoTrainer, type GrpoSequence, type PolicyModel } from '../../../../src/stages/rl/grpo';

describe('collateGrpo', () => {
  test('token k of a span is predicted at position k − 1 with its advantage; other positions are masked', () => {
    const b = collateGrpo([{ tokens: [1, 2, 3, 4, 5], spans: [{ start: 2, end: 4, advantage: 0.5 }] }], 0);
    assert.deepEqual(b.ids, [[1, 2, 3, 4]]);
    assert.deepEqual(b.targets, [[2, 3, 4, 5]]);
    assert.deepEqual(b.mask, [[0, 1, 1, 0]]);
    assert.deepEqual(b.adv, [[0, 0.5, 0.5, 0]]);
    assert.equal(b.tokens, 2);
  });
});

/** A bigram policy: logits = onehot(ids) E W. */
class Bigram implements PolicyModel {
  readonly E: tf.Variable;
  readonly W: tf.Variable;
  constructor(private readonly vocab: number) {
    this.E = tf.variable(tf.randomNormal([vocab, 8], 0, 0.1, 'float32', 1), true, `bg${Math.random()}.E`);
    this.W = tf.variable(tf.randomNormal([8, vocab], 0, 0.1, 'float32', 2), true, `bg${Math.random()}.W`);
  }
  namedVariables() {
    return new Map([['E', this.E], ['W', this.W]]);
  }
  tokenLogprobs(ids: number[][], targets: number[][]): tf.Tensor2D {
    return tf.tidy(() => {
      const x = tf.matMul(tf.cast(tf.oneHot(tf.tensor1d(ids.flat(), 'int32'), this.vocab), 'float32'), this.E);
      const logp = tf.logSoftmax(tf.matMul(x, this.W));
      const tgt = tf.cast(tf.oneHot(tf.tensor1d(targets.flat(), 'int32'), this.vocab), 'float32');
      return tf.reshape(tf.sum(tf.mul(logp, tgt), 1), [ids.length, ids[0]!.length]) as tf.Tensor2D;
    });
  }
}

describe('GrpoTrainer', () => {
  const seqLogp = (m: PolicyModel, s: GrpoSequence) => {
    const b = collateGrpo([s], 0);
    const lp = m.tokenLogprobs(b.ids, b.targets).arraySync()[0]!;
    return lp.reduce((a, x, i) => a + x * b.mask[0]![i]!, 0);
  };
  const step = { lr: 0.05, maxGradNorm: 10, microBatch: 1, padId: 0, clipLow: 0.2, clipHigh: 0.2, clipRatioC: 3, klCoef: 0 };

  test('a positive advantage raises the sequence log-probability, a negative one lowers it', async () => {
    const m = new Bigram(6);
    const good: GrpoSequence = { tokens: [1, 2, 3, 4], spans: [{ start: 2, end: 4, advantage: 1 }] };
    const bad: GrpoSequence = { tokens: [1, 5, 5, 5], spans: [{ start: 2, end: 4, advantage: -1 }] };
    const g0 = seqLogp(m, good);
    const b0 = seqLogp(m, bad);
    const metrics = await new GrpoTrainer(m, undefined, 0).step([good, bad], step);
    assert.ok(seqLogp(m, good) > g0);
    assert.ok(seqLogp(m, bad) < b0);
    assert.equal(metrics.policyTokens, 4);
    assert.equal(metrics.activeSequences, 2);
  });

  test('micro-batching does not change the update (exact token-mean over the whole batch)', async () => {
    const seqs: GrpoSequence[] = [
      { tokens: [1, 2, 3, 4, 2], spans: [{ start: 2, end: 5, advantage: 0.7 }] },
      { tokens: [1, 3, 3], spans: [{ start: 1, end: 3, advantage: -0.4 }] },
      { tokens: [2, 4, 1, 1], spans: [{ start: 3, end: 4, advantage: 0.2 }] },
    ];
    const a = new Bigram(6);
    const b = new Bigram(6);
    b.E.assign(a.E);
    b.W.assign(a.W);
    await new GrpoTrainer(a, undefined, 0).step(seqs, { ...step, microBatch: 3 });
    await new GrpoTrainer(b, undefined, 0).step(seqs, { ...step, microBatch: 1 });
    const diff = tf.max(tf.abs(tf.sub(a.W, b.W))).dataSync()[0]!;
    assert.ok(diff < 1e-6, `max |ΔW| ${diff}`);
  });

  test('one-step-off: the ratio is taken against the behaviour policy (same weights: the on-policy update; stale ones: clipped)', async () => {
    const seqs: GrpoSequence[] = [
      { tokens: [1, 2, 3, 4, 2], spans: [{ start: 2, end: 5, advantage: 0.7 }] },
      { tokens: [1, 3, 3], spans: [{ start: 1, end: 3, advantage: -0.4 }] },
    ];
    const copy = (from: Bigram) => {
      const m = new Bigram(6);
      m.E.assign(from.E);
      m.W.assign(from.W);
      return m;
    };
    const onPolicy = new Bigram(6);
    const withSelf = copy(onPolicy);
    const twin = copy(onPolicy);
    const stale = copy(onPolicy);
    stale.W.assign(tf.mul(stale.W, 8)); // far from the policy: every ratio leaves the clip range
    const withStale = copy(onPolicy);
    await new GrpoTrainer(onPolicy, undefined, 0).step(seqs, step);
    await new GrpoTrainer(withSelf, undefined, 0).step(seqs, step, undefined, twin);
    const diff = tf.max(tf.abs(tf.sub(onPolicy.W, withSelf.W))).dataSync()[0]!;
    assert.ok(diff < 1e-6, `behaviour = policy: the on-policy update (max |ΔW| ${diff})`);
    const metrics = await new GrpoTrainer(withStale, undefined, 0).step(seqs, step, undefined, stale);
    assert.ok(metrics.clipFrac > 0, `a stale behaviour policy is clipped (clipFrac ${metrics.clipFrac})`);
    assert.ok(tf.max(tf.abs(tf.sub(onPolicy.W, withStale.W))).dataSync()[0]! > 1e-6, 'and changes the update');
  });
});
