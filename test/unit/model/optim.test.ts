import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as tf from '@tensorflow/tfjs';
import { AdamW, adamWReference, globalNorm } from '../../../src/model/optim/adamw';
import { lrAt, warmupStepsOf } from '../../../src/model/optim/schedule';
import { epochOrder, Rng, takeBatch } from '../../../src/kernel/dataOrder';

describe('cosine schedule with warmup', () => {
  test('linear warmup, peak, cosine to the floor', () => {
    const s = { peakLr: 1e-3, totalSteps: 100, warmupSteps: 10 };
    assert.equal(lrAt(0, s), 0);
    assert.ok(Math.abs(lrAt(5, s) - 5e-4) < 1e-12);
    assert.equal(lrAt(10, s), 1e-3);
    assert.ok(Math.abs(lrAt(55, s) - 5e-4) < 1e-12);
    assert.ok(lrAt(100, s) < 1e-12);
    assert.ok(Math.abs(lrAt(100, { ...s, minRatio: 0.1 }) - 1e-4) < 1e-12);
    assert.equal(warmupStepsOf(95, 0.1), 10);
  });
});

describe('seeded RNG and data cursor', () => {
  test('state round-trips: a restored RNG continues the same stream', () => {
    const a = new Rng(7);
    for (let i = 0; i < 5; i++) a.next();
    const b = Rng.fromState(a.state);
    assert.deepEqual([a.next(), a.next(), a.normal()], [b.next(), b.next(), b.normal()]);
  });

  test('batches cross epochs, each epoch a fresh permutation, resumable from the cursor', () => {
    const n = 7;
    const all: number[] = [];
    let cursor = { epoch: 0, index: 0 };
    for (;;) {
      const { indices, next } = takeBatch(cursor, 3, n, 42, 2);
      if (indices.length === 0) break;
      all.push(...indices);
      cursor = next;
    }
    assert.equal(all.length, 14);
    assert.deepEqual(all.slice(0, 7), epochOrder(7, 42, 0));
    assert.deepEqual(all.slice(7), epochOrder(7, 42, 1));
    assert.notDeepEqual(epochOrder(7, 42, 0), epochOrder(7, 42, 1));
    assert.deepEqual([...all.slice(0, 7)].sort(), [0, 1, 2, 3, 4, 5, 6]);
  });
});

describe('AdamW', () => {
  test('matches the PyTorch AdamW update computed by hand, with clipping and weight decay', () => {
    const p = tf.variable(tf.tensor1d([1, -2]));
    const opt = new AdamW(new Map([['p', p]]), { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.1 });
    const g = tf.tensor1d([3, 4]); // norm 5
    const norm = opt.apply(new Map([['p', g]]), 0.01, 1);
    assert.ok(Math.abs(norm - 5) < 1e-6);
    // Clipped gradient g' = g / 5 = [0.6, 0.8]; step 1: m̂ = g', v̂ = g'², update = g'/(|g'|+eps) ≈ sign.
    const expected = [1 - 0.01 * 0.1 * 1 - 0.01 * (0.6 / (0.6 + 1e-8)), -2 - 0.01 * 0.1 * -2 - 0.01 * (0.8 / (0.8 + 1e-8))];
    const got = p.dataSync();
    for (let i = 0; i < 2; i++) assert.ok(Math.abs(got[i]! - expected[i]!) < 1e-6, `${got[i]} vs ${expected[i]}`);
    assert.ok(Math.abs(globalNorm(new Map([['g', g]])) - 5) < 1e-6);
  });

  test('the op-by-op update follows the reference definition over several steps, clipped and not, with weight decay', () => {
    const config = { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.1 };
    const shapes = [[3, 4], [5]];
    const init = shapes.map((s, i) => Float64Array.from(tf.tidy(() => tf.randomNormal(s, 0, 1, 'float32', i + 1).dataSync())));
    const gradsAt = (step: number) => shapes.map((s, i) => tf.tidy(() => tf.randomNormal(s, 0, step === 2 ? 50 : 0.5, 'float32', 10 * step + i).dataSync() as Float32Array));
    const params = new Map(shapes.map((s, i) => [`p${i}`, tf.variable(tf.tensor(Float32Array.from(init[i]!), s))]));
    const opt = new AdamW(params, config);
    const ref = { params: init.map((a) => Float64Array.from(a)), state: { m: init.map((a) => new Float64Array(a.length)), v: init.map((a) => new Float64Array(a.length)), step: 0 } };
    for (let step = 1; step <= 4; step++) {
      const g = gradsAt(step);
      const norm = opt.apply(new Map(shapes.map((s, i) => [`p${i}`, tf.tensor(g[i]!, s)])), 1e-2, 1.0); // step 2 is clipped
      const refNorm = adamWReference(ref.params, g, ref.state, 1e-2, config, 1.0);
      assert.ok(Math.abs(norm - refNorm) <= 1e-4 * refNorm, `step ${step}: norm ${norm} vs ${refNorm}`);
      [...params.values()].forEach((p, k) => p.dataSync().forEach((x, i) => assert.ok(Math.abs(x - ref.params[k]![i]!) < 1e-5, `step ${step}, p${k}[${i}]: ${x} vs ${ref.params[k]![i]}`)));
    }
    opt.dispose();
    tf.dispose([...params.values()]);
  });

  test('state save/load continues bit for bit', () => {
    const make = () => tf.variable(tf.tensor2d([[0.5, -0.25], [1.5, 2]]));
    const grads = [tf.tensor2d([[0.1, 0.2], [-0.3, 0.4]]), tf.tensor2d([[-0.5, 0.1], [0.2, 0.05]]), tf.tensor2d([[0.3, -0.3], [0.1, 0.9]])];
    const a = make();
    const optA = new AdamW(new Map([['w', a]]));
    for (const g of grads) optA.apply(new Map([['w', g]]), 0.01);

    const b = make();
    const optB = new AdamW(new Map([['w', b]]));
    optB.apply(new Map([['w', grads[0]!]]), 0.01);
    const saved = optB.state();
    const weights = new Float32Array(b.dataSync());
    const c = tf.variable(tf.tensor2d(weights, [2, 2]));
    const optC = new AdamW(new Map([['w', c]]));
    optC.load(saved);
    for (const g of grads.slice(1)) optC.apply(new Map([['w', g]]), 0.01);
    assert.deepEqual(Array.from(c.dataSync()), Array.from(a.dataSync()));
    assert.equal(optC.steps, 3);
  });
});
