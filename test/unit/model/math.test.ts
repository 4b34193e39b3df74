import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import * as tf from '@tensorflow/tfjs';
import { BackendUnavailableError, selectBackend } from '../../../src/model/net/backend';
import type { QwenConfig } from '../../../src/model/net/qwenConfig';
import { generate, sampleToken } from '../../../src/model/net/generate';
import { matMul2d, scatterAddRows, useReferenceOps } from '../../../src/model/net/ops';
import { QwenModel } from '../../../src/model/net/qwen';
import { assertPrefillInPieces } from '../../helpers/prefill';
import { Rng } from '../../../src/model/net/random';

const qwen3: QwenConfig = {
  model_type: 'qwen3', vocab_size: 40, hidden_size: 16, intermediate_size: 24, num_hidden_layers: 2, num_attention_heads: 4,
  num_key_value_heads: 2, head_dim: 4, rms_norm_eps: 1e-6, rope_theta: 10000, tie_word_embeddings: false,
  max_position_embeddings: 64, hidden_act: 'silu', initializer_range: 0.3,
};
const qwen2Tied: QwenConfig = { ...qwen3, model_type: 'qwen2', head_dim: undefined, tie_word_embeddings: true };

const ids = [[1, 4, 9, 16, 25, 36], [2, 3, 5, 7, 11, 13]];
const targets = [[4, 9, 16, 25, 36, 0], [3, 5, 7, 11, 13, 17]];
const mask = [[1, 1, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1]];

before(async () => {
  await tf.setBackend('cpu');
});

function grads(model: QwenModel): Map<string, Float32Array> {
  const named = model.namedVariables();
  const { value, grads: g } = tf.variableGrads(() => model.loss(ids, targets, mask), [...named.values()]);
  value.dispose();
  const out = new Map<string, Float32Array>();
  named.forEach((v, name) => out.set(name, g[v.name]!.dataSync() as Float32Array));
  tf.dispose(Object.values(g));
  return out;
}

function assertClose(a: ArrayLike<number>, b: ArrayLike<number>, tol: number, what: string): void {
  assert.equal(a.length, b.length, what);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  assert.ok(m < tol, `${what}: max difference ${m}`);
}

test('matMul2d gradients equal tf.matMul gradients', () => {
  const a = tf.randomNormal([5, 7], 0, 1, 'float32', 1) as tf.Tensor2D;
  const b = tf.randomNormal([7, 3], 0, 1, 'float32', 2) as tf.Tensor2D;
  const w = tf.randomNormal([5, 3], 0, 1, 'float32', 3);
  const f = (fn: (x: tf.Tensor2D, y: tf.Tensor2D) => tf.Tensor2D) => tf.grads((x: tf.Tensor, y: tf.Tensor) => tf.sum(tf.mul(fn(x as tf.Tensor2D, y as tf.Tensor2D), w)))([a, b]);
  const [ga, gb] = f(matMul2d);
  const [ra, rb] = f((x, y) => tf.matMul(x, y));
  assertClose(ga!.dataSync(), ra!.dataSync(), 1e-5, 'da');
  assertClose(gb!.dataSync(), rb!.dataSync(), 1e-5, 'db');
  tf.dispose([a, b, w, ga!, gb!, ra!, rb!]);
});

for (const [label, config] of [['qwen3 untied', qwen3], ['qwen2 tied + bias', qwen2Tied]] as const) {
  test(`custom gradients of the loss equal tf's own gradients (${label})`, () => {
    const model = QwenModel.init(config, 7);
    const fast = grads(model);
    useReferenceOps(true);
    let ref: Map<string, Float32Array>;
    try {
      ref = grads(model);
    } finally {
      useReferenceOps(false);
    }
    for (const [k, g] of fast) assertClose(g, ref.get(k)!, 1e-5, k);
    model.dispose();
  });
}

test('the embedding gradient without UnsortedSegmentSum (scatter-add) is right', () => {
  const dy = Float32Array.from([1, 2, 3, 4, 5, 6]);
  assert.deepEqual([...scatterAddRows([2, 0, 2], dy, 3, 2)], [3, 4, 0, 0, 6, 8]);
});

test('training on the wasm backend gives the cpu backend\'s loss and gradients', async () => {
  const model = QwenModel.init(qwen3, 3);
  const weights = new Map([...model.namedWeights()].map(([k, v]) => [k, v.data]));
  const cpuLoss = model.loss(ids, targets, mask).dataSync()[0]!;
  const cpu = grads(model);
  model.dispose();
  require('@tensorflow/tfjs-backend-wasm');
  const ok = await tf.setBackend('wasm');
  try {
    assert.ok(ok && tf.getBackend() === 'wasm', 'wasm backend unavailable');
    const w = QwenModel.fromWeights(qwen3, weights);
    assert.ok(Math.abs(w.loss(ids, targets, mask).dataSync()[0]! - cpuLoss) < 1e-5);
    const wasm = grads(w);
    for (const [k, g] of cpu) assertClose(wasm.get(k)!, g, 1e-5, k);
    w.dispose();
  } finally {
    await tf.setBackend('cpu');
  }
});

test('loss is the mean cross-entropy over mask = 1 positions', () => {
  const model = QwenModel.init(qwen3, 5);
  const logits = model.forward(ids).arraySync();
  let sum = 0;
  let n = 0;
  ids.forEach((row, b) => row.forEach((_, t) => {
    if (!mask[b]![t]) return;
    const l = logits[b]![t]!;
    const max = Math.max(...l);
    const lse = max + Math.log(l.reduce((a, x) => a + Math.exp(x - max), 0));
    sum += lse - l[targets[b]![t]!]!;
    n++;
  }));
  const loss = model.loss(ids, targets, mask).dataSync()[0]!;
  assert.ok(Math.abs(loss - sum / n) < 1e-5, `${loss} vs ${sum / n}`);
  // Targets under mask 0 do not matter.
  const other = targets.map((r) => [...r]);
  other[0]![5] = 33;
  other[1]![0] = 21;
  assert.equal(model.loss(ids, other, mask).dataSync()[0], loss);
  assert.ok(model.loss(ids, targets, mask.map((r) => r.map(() => 0))).dataSync()[0] === 0);
  model.dispose();
});

test('KV-cached greedy generation equals uncached and per-prompt generation; no tensors leak', () => {
  const model = QwenModel.init(qwen3, 11);
  const prompts = [[1, 2, 3, 4, 5, 6, 7], [8, 9], [10, 11, 12, 13]];
  const before = tf.memory().numTensors;
  const cached = generate(model, prompts, { maxNewTokens: 12, temperature: 0 });
  assert.equal(tf.memory().numTensors, before);
  const uncached = generate(model, prompts, { maxNewTokens: 12, temperature: 0, useCache: false });
  assert.deepEqual(cached, uncached);
  prompts.forEach((p, i) => assert.deepEqual(generate(model, [p], { maxNewTokens: 12, temperature: 0 }).tokens[0], cached.tokens[i]));
  assert.ok(cached.tokens.every((t) => t.length === 12));
  assert.deepEqual(cached.finished, [false, false, false]);
  model.dispose();
});

test('a long prompt is prefilled in pieces that continue the cache: same tokens as one prefill call', async () => {
  const model = QwenModel.init(qwen3, 19);
  try {
    await assertPrefillInPieces(model);
  } finally {
    model.dispose();
  }
});

test('sampling: the same seed gives the same tokens, topP → 0 is greedy', () => {
  const model = QwenModel.init(qwen2Tied, 13);
  const prompts = [[1, 2, 3], [4, 5, 6, 7, 8]];
  const opts = { maxNewTokens: 10, temperature: 1.5, topP: 0.9, seed: 42 };
  const a = generate(model, prompts, opts);
  assert.deepEqual(generate(model, prompts, opts), a);
  assert.deepEqual(generate(model, prompts, { ...opts, useCache: false }), a);
  assert.notDeepEqual(generate(model, prompts, { ...opts, seed: 43 }).tokens, a.tokens);
  const greedy = generate(model, prompts, { maxNewTokens: 10, temperature: 0 });
  assert.deepEqual(generate(model, prompts, { ...opts, topP: 1e-9 }).tokens, greedy.tokens);
  model.dispose();
});

test('sampling with one seed per prompt: a sequence gets the same tokens whatever shares its batch (fan-out, issue 16)', () => {
  const model = QwenModel.init(qwen2Tied, 17);
  const opts = { maxNewTokens: 10, temperature: 1.2, topP: 0.95 };
  const alone = generate(model, [[4, 5, 6, 7, 8]], { ...opts, seeds: [99] });
  const withOthers = generate(model, [[1, 2, 3], [4, 5, 6, 7, 8], [9, 10]], { ...opts, seeds: [5, 99, 6] });
  assert.deepEqual(withOthers.tokens[1], alone.tokens[0]);
  const otherOrder = generate(model, [[9, 10, 11, 12], [4, 5, 6, 7, 8]], { ...opts, seeds: [7, 99] });
  assert.deepEqual(otherOrder.tokens[1], alone.tokens[0]);
  assert.throws(() => generate(model, [[1], [2]], { ...opts, seeds: [1] }), /1 seeds for 2 prompts/);
  model.dispose();
});

test('sampleToken: top-p keeps the smallest set reaching the mass; temperature 0 is argmax', () => {
  const logits = [Math.log(0.5), Math.log(0.3), Math.log(0.15), Math.log(0.05)];
  const rng = new Rng(1);
  const seen = new Set<number>();
  for (let i = 0; i < 500; i++) seen.add(sampleToken(logits, 1, 0.75, rng));
  assert.deepEqual([...seen].sort(), [0, 1]);
  assert.equal(sampleToken([0, 3, 3, 1], 0, 1, rng), 1);
});

test('stop tokens end a sequence (included) while the others go on', () => {
  const model = QwenModel.init(qwen3, 17);
  const prompts = [[3, 1, 4], [1, 5, 9, 2, 6]];
  const free = generate(model, prompts, { maxNewTokens: 8, temperature: 0 });
  const stopAt = free.tokens[0]![2]!;
  assert.ok(!free.tokens[0]!.slice(0, 2).includes(stopAt), 'pick a stop token that appears first at index 2');
  const stopped = generate(model, prompts, { maxNewTokens: 8, temperature: 0, stopTokens: [stopAt] });
  assert.deepEqual(stopped.tokens[0], free.tokens[0]!.slice(0, 3));
  assert.equal(stopped.finished[0], true);
  const i = free.tokens[1]!.indexOf(stopAt);
  assert.deepEqual(stopped.tokens[1], i < 0 ? free.tokens[1] : free.tokens[1]!.slice(0, i + 1));
  model.dispose();
});

test('optimizer.minimize on the loss lowers it', () => {
  const model = QwenModel.init(qwen3, 19);
  const opt = tf.train.adam(0.01);
  const first = model.loss(ids, targets, mask).dataSync()[0]!;
  for (let i = 0; i < 5; i++) opt.minimize(() => model.loss(ids, targets, mask), false, model.trainableVariables());
  assert.ok(model.loss(ids, targets, mask).dataSync()[0]! < first);
  opt.dispose();
  model.dispose();
});

test('selectBackend: cpu when forced; a forced missing tfjs-node is a clear error', async () => {
  const lines: string[] = [];
  assert.equal(await selectBackend('cpu', (l) => lines.push(l)), 'cpu');
  assert.equal(tf.getBackend(), 'cpu');
  assert.match(lines.join('\n'), /cpu \(forced\)/);
  let node = true;
  try {
    require.resolve('@tensorflow/tfjs-node');
  } catch {
    node = false;
  }
  if (!node) await assert.rejects(selectBackend('tfjs-node'), (e: Error) => e instanceof BackendUnavailableError && /tfjs-node.*not available/.test(e.message));
  await tf.setBackend('cpu');
});
