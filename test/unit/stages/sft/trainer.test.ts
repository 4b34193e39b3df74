import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as tf from '@tensorflow/tfjs';
import { collate, SftTrainer, totalSteps, type SftConfig, type TokenizedExample, type TrainableModel } from '../../../../src/stages/sft/trainer';

/** A bigram model: logits = E[ids] @ W — enough to test the loop without the transformer. */
class Bigram implements TrainableModel {
  readonly E: tf.Variable;
  readonly W: tf.Variable;
  constructor(vocab: number, dim: number, seed: number, prefix: string) {
    this.E = tf.variable(tf.randomNormal([vocab, dim], 0, 0.1, 'float32', seed), true, `${prefix}.E`);
    this.W = tf.variable(tf.randomNormal([dim, vocab], 0, 0.1, 'float32', seed + 1), true, `${prefix}.W`);
  }
  namedVariables() {
    return new Map([['E', this.E], ['W', this.W]]);
  }
  loss(ids: number[][], targets: number[][], mask: number[][]): tf.Scalar {
    return tf.tidy(() => {
      const vocab = this.E.shape[0];
      const x = tf.matMul(tf.cast(tf.oneHot(tf.tensor1d(ids.flat(), 'int32'), vocab), 'float32'), this.E);
      const logits = tf.matMul(x, this.W);
      const logp = tf.logSoftmax(logits);
      const tgt = tf.cast(tf.oneHot(tf.tensor1d(targets.flat(), 'int32'), vocab), 'float32');
      const m = tf.tensor1d(mask.flat(), 'float32');
      const nll = tf.neg(tf.sum(tf.mul(logp, tgt), 1));
      return tf.div(tf.sum(tf.mul(nll, m)), tf.maximum(tf.sum(m), 1)) as tf.Scalar;
    });
  }
}

/** "a b a b …" sequences where only the assistant half is trained. */
function data(n: number): TokenizedExample[] {
  return Array.from({ length: n }, (_, i) => {
    const ids = [1, 2 + (i % 3), 5, 6, 7, 6, 7, 6, 8];
    return { ids, lossMask: ids.map((_, t) => (t >= 3 ? 1 : 0)) };
  });
}

const cfg: SftConfig = { epochs: 3, microBatch: 2, gradAccum: 2, peakLr: 0.05, warmupRatio: 0.1, minLrRatio: 0, maxGradNorm: 1, weightDecay: 0.01, maxSeqLen: 16, seed: 3, padId: 0 };

describe('SFT loop', () => {
  test('collate shifts targets, pads, and trains only targets that are assistant tokens', async () => {
    const b = collate([{ ids: [1, 2, 3, 4], lossMask: [0, 0, 1, 1] }, { ids: [5, 6], lossMask: [0, 1] }], 16, 0);
    assert.deepEqual(b.ids, [[1, 2, 3], [5, 0, 0]]);
    assert.deepEqual(b.targets, [[2, 3, 4], [6, 0, 0]]);
    assert.deepEqual(b.mask, [[0, 1, 1], [1, 0, 0]]);
    assert.equal(b.tokens, 3);
    assert.deepEqual(collate([{ ids: [1, 2, 3, 4], lossMask: [1, 1, 1, 1] }], 2, 0).ids, [[1, 2]]);
  });

  test('the loss falls', async () => {
    const model = new Bigram(10, 8, 1, 'fall');
    const t = new SftTrainer(model, data(12), { ...cfg, epochs: 12 });
    assert.equal(t.total, totalSteps(12, t.cfg));
    while (!t.done) await t.step();
    const l = t.state.losses;
    assert.ok(l[l.length - 1]! < l[0]! * 0.6, `${l[0]} → ${l[l.length - 1]}`);
  });

  test('a run resumed from its state ends with exactly the weights of an uninterrupted run', async () => {
    const a = new Bigram(10, 8, 1, 'a');
    const ta = new SftTrainer(a, data(12), cfg);
    while (!ta.done) await ta.step();

    const b = new Bigram(10, 8, 1, 'b');
    const tb = new SftTrainer(b, data(12), cfg);
    for (let i = 0; i < 4; i++) await tb.step();
    const snapshot = { state: structuredClone(tb.state), opt: tb.optimizer.state(), E: b.E.arraySync(), W: b.W.arraySync() };

    const c = new Bigram(10, 8, 99, 'c');
    c.E.assign(tf.tensor(snapshot.E));
    c.W.assign(tf.tensor(snapshot.W));
    const tc = new SftTrainer(c, data(12), cfg);
    tc.restore(snapshot.state, snapshot.opt);
    while (!tc.done) await tc.step();
    assert.deepEqual(Array.from(c.E.dataSync()), Array.from(a.E.dataSync()));
    assert.deepEqual(Array.from(c.W.dataSync()), Array.from(a.W.dataSync()));
    assert.deepEqual(tc.state.losses, ta.state.losses);
  });
});
