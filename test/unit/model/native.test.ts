/**
 * The model on native TensorFlow (tfjs-node): its hand-written gradients against tf's own, its logits against wasm's
 * and transformers', its in-place KV cache against uncached decoding. Skipped when the native backend is not installed.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { readNativeStatus } from '../../../src/model/net/backend';
import { loadHfCheckpoint } from '../../../src/model/formats/checkpoint';
import type { QwenConfig } from '../../../src/model/net/qwenConfig';
import { TINY_FIXTURE_SEED, tinyFixtureConfigs } from '../../helpers/tinyFixtures';
import { generate } from '../../../src/model/net/generate';
import { useReferenceOps } from '../../../src/model/net/ops';
import { QwenModel } from '../../../src/model/net/qwen';
import { assertPrefillInPieces } from '../../helpers/prefill';
import { decodePlan, decodeThreads, weightPlan } from '../../../src/model/net/decodeGraph';
import { GraphBuilder, GraphSession } from '../../../src/model/net/graph';
import { backwardThreads, graphLength } from '../../../src/model/net/trainGraph';
import { AdamW, adamWReference } from '../../../src/model/optim/adamw';
import { FIXTURES } from '../../helpers/paths';

const FIX = FIXTURES;
const native = readNativeStatus().ok;
const skip = native ? false : 'native TensorFlow is not installed (node scripts/ensure-native.mjs)';

const qwen3: QwenConfig = {
  model_type: 'qwen3', vocab_size: 40, hidden_size: 16, intermediate_size: 24, num_hidden_layers: 2, num_attention_heads: 4,
  num_key_value_heads: 2, head_dim: 4, rms_norm_eps: 1e-6, rope_theta: 10000, tie_word_embeddings: false,
  max_position_embeddings: 64, hidden_act: 'silu', initializer_range: 0.3,
};
const qwen2Tied: QwenConfig = { ...qwen3, model_type: 'qwen2', head_dim: undefined, tie_word_embeddings: true };
const qwen3Bias: QwenConfig = { ...qwen3, attention_bias: true, num_key_value_heads: 1 };

const ids = [[1, 4, 9, 16, 25, 36], [2, 3, 5, 7, 11, 13]];
const targets = [[4, 9, 16, 25, 36, 0], [3, 5, 7, 11, 13, 17]];
const mask = [[1, 1, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1]];

let previous = 'cpu';
before(async () => {
  previous = tf.getBackend() ?? 'cpu';
  if (!native) return;
  process.env.TF_OVERRIDE_GLOBAL_THREADPOOL ??= '1'; // as selectBackend does: sessions get their own thread pools
  require('@tensorflow/tfjs-node');
  assert.ok(await tf.setBackend('tensorflow'), 'tensorflow backend did not activate');
});
after(async () => {
  await tf.setBackend(previous);
});

function lossAndGrads(model: QwenModel, keyMask?: number[][]): { loss: number; grads: Map<string, Float32Array> } {
  const named = model.namedVariables();
  const f = (): tf.Scalar => (keyMask
    ? tf.tidy(() => tf.neg(tf.sum(tf.mul(model.tokenLogprobs(ids, targets, keyMask), tf.tensor2d(mask)))) as tf.Scalar)
    : model.loss(ids, targets, mask));
  const { value, grads } = tf.variableGrads(f, [...named.values()]);
  const loss = value.dataSync()[0]!;
  value.dispose();
  const out = new Map<string, Float32Array>();
  named.forEach((v, name) => out.set(name, grads[v.name]!.dataSync() as Float32Array));
  tf.dispose(Object.values(grads));
  return { loss, grads: out };
}

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

/** |a − b| < tol, scaled by the reference's largest magnitude when that exceeds 1 (float32 rounding grows with it). */
function assertClose(a: ArrayLike<number>, b: ArrayLike<number>, tol: number, what: string): void {
  const m = maxAbsDiff(a, b);
  let scale = 1;
  for (let i = 0; i < b.length; i++) scale = Math.max(scale, Math.abs(b[i]!));
  assert.ok(m < tol * scale, `${what}: max difference ${m} (largest |reference| ${scale})`);
}

test('training graphs are built for lengths rounded up to a multiple of 16, 32, 64 or 128', () => {
  const cases: [number, number][] = [[1, 16], [64, 64], [65, 96], [256, 256], [257, 320], [1024, 1024], [1025, 1152], [2048, 2048]];
  for (const [T, want] of cases) assert.equal(graphLength(T), want, `T = ${T}`);
  const lengths = new Set(Array.from({ length: 2048 }, (_, i) => graphLength(i + 1)));
  assert.ok(lengths.size <= 32, `${lengths.size} graph lengths up to 2,048 (the cache keeps 32)`);
});

/** Runs `f` with the training graphs on (the default: trainGraph.ts) or off (CM2_TF_GRAPH=0: layer by layer, eagerly). */
function withGraphs<R>(on: boolean, f: () => R): R {
  const saved = process.env.CM2_TF_GRAPH;
  if (on) delete process.env.CM2_TF_GRAPH;
  else process.env.CM2_TF_GRAPH = '0';
  try {
    return f();
  } finally {
    if (saved === undefined) delete process.env.CM2_TF_GRAPH;
    else process.env.CM2_TF_GRAPH = saved;
  }
}
const MODES = [['stack graph', true], ['layer by layer', false]] as const;

for (const [mode, graphs] of MODES) for (const [label, config] of [['qwen3 untied', qwen3], ['qwen2 tied + bias', qwen2Tied], ['qwen3 attention_bias, 1 kv head', qwen3Bias]] as const) {
  test(`native (${mode}): hand-written layer and head gradients equal tf's own (${label})`, { skip }, () => withGraphs(graphs, () => {
    const model = QwenModel.init(config, 7);
    for (const keyMask of [undefined, [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]]]) {
      const fast = lossAndGrads(model, keyMask);
      useReferenceOps(true);
      let ref: ReturnType<typeof lossAndGrads>;
      try {
        ref = lossAndGrads(model, keyMask);
      } finally {
        useReferenceOps(false);
      }
      assert.ok(Math.abs(fast.loss - ref.loss) < 1e-5, `loss ${fast.loss} vs ${ref.loss}`);
      for (const [k, g] of fast.grads) assertClose(g, ref.grads.get(k)!, 1e-5, `${k}${keyMask ? ' (key mask)' : ''}`);
    }
    model.dispose();
  }));
}

for (const [mode, graphs] of MODES) test(`native (${mode}): log-probabilities at a sampling temperature are log softmax(logits / T), with tf's own gradients (tied and untied)`, { skip }, () => withGraphs(graphs, () => {
  const T = 0.7;
  for (const config of [qwen3, qwen2Tied]) {
    const model = QwenModel.init(config, 11);
    const want = tf.tidy(() => {
      const logits = tf.div(model.forward(ids), T);
      const lsm = tf.logSoftmax(logits);
      const oneHot = tf.oneHot(tf.tensor2d(targets, undefined, 'int32'), config.vocab_size);
      return tf.sum(tf.mul(lsm, oneHot), -1).arraySync() as number[][];
    });
    const got = tf.tidy(() => model.tokenLogprobs(ids, targets, undefined, T).arraySync());
    assertClose(got.flat(), want.flat(), 1e-5, `log p at T = ${T} (${config.model_type}, tied ${config.tie_word_embeddings})`);
    const named = model.namedVariables();
    const run = () => {
      const { value, grads } = tf.variableGrads(() => tf.tidy(() => tf.neg(tf.sum(tf.mul(model.tokenLogprobs(ids, targets, undefined, T), tf.tensor2d(mask))))) as tf.Scalar, [...named.values()]);
      const out = new Map([...named].map(([k, v]) => [k, grads[v.name]!.dataSync() as Float32Array]));
      tf.dispose([value, ...Object.values(grads)]);
      return out;
    };
    const fast = run();
    useReferenceOps(true);
    let ref: Map<string, Float32Array>;
    try {
      ref = run();
    } finally {
      useReferenceOps(false);
    }
    for (const [k, g] of fast) assertClose(g, ref.get(k)!, 1e-5, `${k} at T = ${T}`);
    assert.throws(() => model.tokenLogprobs(ids, targets, undefined, 0), /temperature must be > 0/);
    model.dispose();
  }
}));

for (const [mode, graphs] of MODES) test(`native (${mode}): gradients equal tf's own over several causal attention chunks (T = 300, padded)`, { skip }, () => withGraphs(graphs, () => {
  const model = QwenModel.init(qwen3Bias, 17);
  const named = model.namedVariables();
  const T = 300;
  const longIds = [Array.from({ length: T }, (_, t) => (t * 7 + 1) % 40), Array.from({ length: T }, (_, t) => (t * 11 + 3) % 40)];
  const longTargets = longIds.map((r) => r.map((x) => (x * 3 + 1) % 40));
  const keyMask = [Array.from({ length: T }, (_, t) => (t < 250 ? 1 : 0)), Array.from({ length: T }, () => 1)];
  const run = (): { loss: number; grads: Map<string, Float32Array> } => {
    const { value, grads } = tf.variableGrads(() => tf.tidy(() => tf.neg(tf.mean(model.tokenLogprobs(longIds, longTargets, keyMask))) as tf.Scalar), [...named.values()]);
    const out = { loss: value.dataSync()[0]!, grads: new Map([...named].map(([k, v]) => [k, grads[v.name]!.dataSync() as Float32Array])) };
    tf.dispose([value, ...Object.values(grads)]);
    return out;
  };
  const fast = run();
  useReferenceOps(true);
  let ref: ReturnType<typeof run>;
  try {
    ref = run();
  } finally {
    useReferenceOps(false);
  }
  assert.ok(Math.abs(fast.loss - ref.loss) < 1e-5, `loss ${fast.loss} vs ${ref.loss}`);
  for (const [k, g] of fast.grads) assertClose(g, ref.grads.get(k)!, 1e-5, k);
  model.dispose();
}));

test('native: loss and gradients equal the cpu backend\'s; a training step leaves no tensors behind', { skip }, async () => {
  const model = QwenModel.init(qwen3, 3);
  const weights = new Map([...model.namedWeights()].map(([k, v]) => [k, v.data]));
  const nat = lossAndGrads(model);
  const before = tf.memory().numTensors;
  lossAndGrads(model);
  assert.equal(tf.memory().numTensors, before);
  model.dispose();
  await tf.setBackend('cpu');
  try {
    const cpuModel = QwenModel.fromWeights(qwen3, weights);
    const cpu = lossAndGrads(cpuModel);
    assert.ok(Math.abs(nat.loss - cpu.loss) < 1e-5);
    for (const [k, g] of cpu.grads) assertClose(nat.grads.get(k)!, g, 1e-5, k);
    cpuModel.dispose();
  } finally {
    await tf.setBackend('tensorflow');
  }
});

interface LogitsFixture {
  input_ids: number[][];
  logits: number[][][];
  padded: { input_ids: number[][]; attention_mask: number[][]; position_ids: number[][]; logits: number[][][] };
}

/** Max |a - b| over positions with mask 1. */
function logitsDiff(a: number[][][], b: number[][][], m?: number[][]): number {
  let d = 0;
  a.forEach((seq, i) => seq.forEach((row, t) => {
    if (m && m[i]![t] === 0) return;
    d = Math.max(d, maxAbsDiff(row, b[i]![t]!));
  }));
  return d;
}

function fixtureLogits(model: QwenModel, ref: LogitsFixture): { plain: number[][][]; padded: number[][][] } {
  const p = ref.padded;
  const a = model.forward(ref.input_ids);
  const b = model.forward(p.input_ids, { positions: p.position_ids, keyMask: p.attention_mask });
  const out = { plain: a.arraySync(), padded: b.arraySync() };
  tf.dispose([a, b]);
  return out;
}

const fixtures: { name: string; load: () => QwenModel; ref: () => LogitsFixture }[] = [
  ...['hf-tiny-qwen3', 'hf-tiny-qwen2-tied', 'hf-tiny-llama-tied'].map((name) => ({
    name,
    load: () => loadHfCheckpoint(join(FIX, name)),
    ref: () => JSON.parse(readFileSync(join(FIX, name, 'logits.json'), 'utf8')) as LogitsFixture,
  })),
  ...Object.entries(tinyFixtureConfigs).map(([name, config]) => ({
    name,
    load: () => QwenModel.init(config, TINY_FIXTURE_SEED),
    ref: () => JSON.parse(readFileSync(join(FIX, name, 'transformers-logits.json'), 'utf8')) as LogitsFixture,
  })),
];

for (const fx of fixtures) {
  test(`native: ${fx.name} gives transformers' logits within 1e-4 and wasm's within 1e-4`, { skip }, async () => {
    const ref = fx.ref();
    const model = fx.load();
    const nat = fixtureLogits(model, ref);
    // Through the trainable path too (what loss/tokenLogprobs see): the inference path's fused weights must agree.
    const viaTape = tf.tidy(() => {
      let out: number[][][] = [];
      tf.variableGrads(() => {
        const l = model.forward(ref.input_ids);
        out = l.arraySync();
        return tf.sum(l) as tf.Scalar;
      });
      return out;
    });
    model.dispose();
    assert.ok(logitsDiff(nat.plain, ref.logits) < 1e-4, `logits differ from transformers by ${logitsDiff(nat.plain, ref.logits)}`);
    assert.ok(logitsDiff(nat.padded, ref.padded.logits, ref.padded.attention_mask) < 1e-4, 'left-padded logits differ from transformers');
    assert.ok(logitsDiff(viaTape, nat.plain) < 1e-4, `trainable and inference paths differ by ${logitsDiff(viaTape, nat.plain)}`);
    require('@tensorflow/tfjs-backend-wasm');
    assert.ok(await tf.setBackend('wasm'), 'wasm backend unavailable');
    try {
      const w = fx.load();
      const wasm = fixtureLogits(w, ref);
      w.dispose();
      assert.ok(logitsDiff(nat.plain, wasm.plain) < 1e-4, `native and wasm logits differ by ${logitsDiff(nat.plain, wasm.plain)}`);
      assert.ok(logitsDiff(nat.padded, wasm.padded, ref.padded.attention_mask) < 1e-4, 'native and wasm left-padded logits differ');
    } finally {
      await tf.setBackend('tensorflow');
    }
  });
}

test('native: KV-cached greedy generation equals uncached and per-prompt generation; the cache grows; no tensors leak', { skip }, () => {
  for (const config of [qwen3, qwen2Tied]) {
    const model = QwenModel.init(config, 11);
    const prompts = [[1, 2, 3, 4, 5, 6, 7], [8, 9], [10, 11, 12, 13]];
    generate(model, prompts, { maxNewTokens: 2, temperature: 0 }); // constants of the decoding path are created once
    const before = tf.memory().numTensors;
    const cached = generate(model, prompts, { maxNewTokens: 12, temperature: 0 });
    assert.equal(tf.memory().numTensors, before);
    const uncached = generate(model, prompts, { maxNewTokens: 12, temperature: 0, useCache: false });
    assert.deepEqual(cached.tokens, uncached.tokens);
    for (let b = 0; b < prompts.length; b++) assertClose(cached.logprobs[b]!, uncached.logprobs[b]!, 1e-4, 'logprobs');
    prompts.forEach((p, i) => assert.deepEqual(generate(model, [p], { maxNewTokens: 12, temperature: 0 }).tokens[0], cached.tokens[i]));
    // Past the first allocation (64 slots): the cache is copied into a larger buffer and decoding goes on the same.
    const long = [Array.from({ length: 60 }, (_, i) => (i * 7) % 40)];
    const grown = generate(model, long, { maxNewTokens: 10, temperature: 0 });
    assert.deepEqual(grown.tokens, generate(model, long, { maxNewTokens: 10, temperature: 0, useCache: false }).tokens);
    const cache = model.emptyCache();
    const stepwise: number[] = [];
    let input = long;
    for (let i = 0; i < 10; i++) {
      const l = model.forward(input, { cache, lastOnly: true });
      const tok = tf.tidy(() => tf.argMax(tf.reshape(l, [-1]))).dataSync()[0]!;
      l.dispose();
      stepwise.push(tok);
      input = [[tok]];
    }
    assert.ok(cache.native!.capacity >= 70 && cache.native!.capacity % 64 === 0);
    model.disposeCache(cache);
    assert.deepEqual(stepwise, grown.tokens[0]);
    model.dispose();
  }
});

test('the backward training graph runs on half the cores (inter-op parallelism does the rest), LoRA\'s on all of them; CM2_TRAIN_BWD_THREADS forces a count', () => {
  assert.equal(backwardThreads({}, 2), 1);
  assert.equal(backwardThreads({}, 2, true), 2, 'LoRA: no weight gradients to run beside dX');
  assert.equal(backwardThreads({ CM2_TRAIN_BWD_THREADS: '1' }, 2, true), 1);
  assert.equal(backwardThreads({}, 1), 1);
  assert.equal(backwardThreads({}, 16), 8);
  assert.equal(backwardThreads({ CM2_TRAIN_BWD_THREADS: '0' }, 16), 0);
  assert.equal(backwardThreads({ CM2_TRAIN_BWD_THREADS: '3' }, 2), 3);
  assert.equal(backwardThreads({ CM2_TRAIN_BWD_THREADS: 'x' }, 2), 1);
});

test('decoding runs on one thread when its matmuls are small, on the default pool when they are not', () => {
  const dims = (hidden: number, layers: number, vocab: number, heads = 4, kvHeads = 2, headDim = hidden / 4, intermediate = 3 * hidden) => ({
    vocab, hidden, intermediate, layers, heads, kvHeads, headDim, eps: 1e-6, ropeTheta: 1e4, tied: true, qkvBias: false, oBias: false, qkNorm: true,
  });
  const env = {};
  assert.equal(decodeThreads(dims(128, 4, 512), 8, env), 1); // bench tiny
  assert.equal(decodeThreads(dims(256, 6, 2048), 4, env), 1); // bench small
  assert.equal(decodeThreads(dims(192, 4, 1024), 32, env), 1); // demo model, a rollout batch
  assert.equal(decodeThreads(dims(896, 24, 151936, 14, 2, 64, 4864), 2, env), 0); // Qwen2.5-0.5B's shape
  assert.equal(decodeThreads(dims(576, 30, 49152, 9, 3, 64, 1536), 16, env), 0); // SmolLM2-135M
  assert.equal(decodeThreads(dims(256, 6, 2048), 4, { CM2_DECODE_THREADS: '0' }), 0);
  assert.equal(decodeThreads(dims(896, 24, 151936, 14, 2, 64, 4864), 2, { CM2_DECODE_THREADS: '2' }), 2);
  assert.equal(decodeThreads(dims(256, 6, 2048), 4, { CM2_DECODE_THREADS: 'many' }), 1, 'a bad value is ignored');
  // a big step on the CPU: one matmul slice per core, each on one thread; small steps, a GPU and forced threads: whole
  const q05 = dims(896, 24, 151936, 14, 2, 64, 4864);
  assert.deepEqual(decodePlan(q05, 2, env, 2, false), { threads: 1, parts: 2 });
  assert.deepEqual(decodePlan(q05, 2, env, 16, false), { threads: 1, parts: 16 });
  assert.deepEqual(decodePlan(q05, 2, env, 2, true), { threads: 0, parts: 1 });
  assert.deepEqual(decodePlan(q05, 2, env, 1, false), { threads: 0, parts: 1 });
  assert.deepEqual(decodePlan(dims(128, 4, 512), 8, env, 2, false), { threads: 1, parts: 1 });
  assert.deepEqual(decodePlan(q05, 2, { CM2_DECODE_THREADS: '0' }, 2, false), { threads: 0, parts: 1 });
  assert.deepEqual(decodePlan(q05, 2, { CM2_DECODE_PARTS: '3' }, 2, false), { threads: 1, parts: 3 });
});

test('native: decoding on a one-thread session gives the default pool\'s tokens and log-probabilities', { skip }, () => {
  const model = QwenModel.init(qwen3, 17);
  const prompts = [[1, 2, 3, 4], [5, 6], [7, 8, 9]];
  const saved = process.env.CM2_DECODE_THREADS;
  try {
    process.env.CM2_DECODE_THREADS = '1';
    const one = generate(model, prompts, { maxNewTokens: 10, temperature: 0 });
    assert.equal(GraphSession.sessionConfig, 'supported', 'the addon takes a session\'s thread count (cm2\'s patch)');
    process.env.CM2_DECODE_THREADS = '0';
    const pool = generate(model, prompts, { maxNewTokens: 10, temperature: 0 });
    assert.deepEqual(one.tokens, pool.tokens);
    for (let b = 0; b < prompts.length; b++) assertClose(one.logprobs[b]!, pool.logprobs[b]!, 1e-6, 'logprobs');
  } finally {
    if (saved === undefined) delete process.env.CM2_DECODE_THREADS;
    else process.env.CM2_DECODE_THREADS = saved;
    model.dispose();
  }
});

test('native: decoding with every weight matmul cut into row slices (the big-model plan) gives the whole matmuls\' tokens and log-probabilities', { skip }, () => {
  const model = QwenModel.init(qwen2Tied, 23);
  const prompts = [[1, 2, 3, 4], [5, 6], [7, 8, 9]];
  const saved = { parts: process.env.CM2_DECODE_PARTS, threads: process.env.CM2_DECODE_THREADS };
  const restore = (name: string, v: string | undefined): void => {
    if (v === undefined) delete process.env[name];
    else process.env[name] = v;
  };
  try {
    process.env.CM2_DECODE_THREADS = '1';
    process.env.CM2_DECODE_PARTS = '1';
    const whole = generate(model, prompts, { maxNewTokens: 10, temperature: 0 });
    for (const parts of ['2', '3']) {
      process.env.CM2_DECODE_PARTS = parts; // uneven slices (rows rounded to 16) of q|k|v, o, the MLP and the tied head
      const cut = generate(model, prompts, { maxNewTokens: 10, temperature: 0 });
      assert.deepEqual(cut.tokens, whole.tokens, `${parts} slices`);
      for (let b = 0; b < prompts.length; b++) assertClose(cut.logprobs[b]!, whole.logprobs[b]!, 1e-5, `logprobs, ${parts} slices`);
    }
  } finally {
    restore('CM2_DECODE_PARTS', saved.parts);
    restore('CM2_DECODE_THREADS', saved.threads);
    model.dispose();
  }
});

test('inference weights are read [in, out] (x·W) by default, with a transposed copy of a tied head on the CPU; CM2_WEIGHT_LAYOUT forces a layout', () => {
  assert.deepEqual(weightPlan({}, false), { layout: 'in-out', headCopy: true });
  assert.deepEqual(weightPlan({}, true), { layout: 'in-out', headCopy: false }, 'a GPU reads x·embedᵀ at full speed');
  assert.deepEqual(weightPlan({ CM2_WEIGHT_LAYOUT: 'out-in' }, false), { layout: 'out-in', headCopy: false });
  assert.deepEqual(weightPlan({ CM2_WEIGHT_LAYOUT: 'in-out' }, true), { layout: 'in-out', headCopy: false });
  assert.deepEqual(weightPlan({ CM2_WEIGHT_LAYOUT: '' }, false), { layout: 'in-out', headCopy: true });
  assert.throws(() => weightPlan({ CM2_WEIGHT_LAYOUT: 'rows' }, false), /CM2_WEIGHT_LAYOUT: 'rows'/);
});

for (const [label, config] of [['untied, QK-norm', qwen3], ['tied', qwen2Tied], ['q|k|v bias', qwen3Bias]] as const) {
  test(`native (${label}): both weight layouts give the same logits, tokens and log-probabilities, whole and in row slices; no tensors leak`, { skip }, () => {
    const prompts = [[1, 2, 3, 4], [5, 6], [7, 8, 9]];
    const names = ['CM2_WEIGHT_LAYOUT', 'CM2_DECODE_THREADS', 'CM2_DECODE_PARTS'] as const;
    const saved = names.map((n) => process.env[n]);
    const run = (layout: string, parts: string): { logits: Float32Array; tokens: number[][]; logprobs: number[][] } => {
      process.env.CM2_WEIGHT_LAYOUT = layout;
      process.env.CM2_DECODE_THREADS = '1';
      process.env.CM2_DECODE_PARTS = parts;
      const model = QwenModel.init(config, 29); // the layout is read when the model is made
      try {
        const logits = model.forward([[1, 2, 3, 4, 5, 6]]).dataSync() as Float32Array;
        const out = generate(model, prompts, { maxNewTokens: 10, temperature: 0 });
        const before = tf.memory().numTensors;
        generate(model, prompts, { maxNewTokens: 10, temperature: 0 });
        assert.equal(tf.memory().numTensors, before, `tensors left behind (${layout}, ${parts} parts)`);
        return { logits, tokens: out.tokens, logprobs: out.logprobs };
      } finally {
        model.dispose();
      }
    };
    try {
      const ref = run('out-in', '1');
      for (const [layout, parts] of [['in-out', '1'], ['in-out', '2'], ['in-out', '3'], ['out-in', '2']] as const) {
        const got = run(layout, parts);
        assertClose(got.logits, ref.logits, 1e-5, `logits (${layout}, ${parts} parts)`);
        assert.deepEqual(got.tokens, ref.tokens, `tokens (${layout}, ${parts} parts)`);
        for (let b = 0; b < prompts.length; b++) assertClose(got.logprobs[b]!, ref.logprobs[b]!, 1e-5, `logprobs (${layout}, ${parts} parts)`);
      }
    } finally {
      names.forEach((n, i) => {
        if (saved[i] === undefined) delete process.env[n];
        else process.env[n] = saved[i];
      });
    }
  });
}

test('native: a long prompt is prefilled in pieces that continue the cache: same tokens as one prefill call', { skip }, async () => {
  const model = QwenModel.init(qwen3, 19);
  try {
    await assertPrefillInPieces(model);
  } finally {
    model.dispose();
  }
});

test('native: sampling with a seed repeats itself, with and without the cache', { skip }, () => {
  const model = QwenModel.init(qwen2Tied, 13);
  const prompts = [[1, 2, 3], [4, 5, 6, 7, 8]];
  const opts = { maxNewTokens: 10, temperature: 1.5, topP: 0.9, seed: 42 };
  const a = generate(model, prompts, opts);
  assert.deepEqual(generate(model, prompts, opts), a);
  assert.deepEqual(generate(model, prompts, { ...opts, useCache: false }).tokens, a.tokens);
  model.dispose();
});

test('native: a weight update reaches the inference path (fused weights are rebuilt)', { skip }, () => {
  const model = QwenModel.init(qwen3, 5);
  const before = model.forward([[1, 2, 3]]).dataSync().slice();
  const name = 'model.layers.0.self_attn.v_proj.weight'; // (k would not do: QK-norm undoes a scale)
  const w = model.namedWeights().get(name)!;
  model.assignWeights(new Map([[name, w.data.map((x) => x * 2)]]));
  const changed = model.forward([[1, 2, 3]]).dataSync();
  assert.ok(maxAbsDiff(before, changed) > 1e-4);
  const fresh = QwenModel.fromWeights(qwen3, new Map([...model.namedWeights()].map(([k, v]) => [k, v.data])));
  assertClose(fresh.forward([[1, 2, 3]]).dataSync(), changed, 1e-5, 'rebuilt model');
  fresh.dispose();
  model.dispose();
});

test('native: an update of a tied embedding reaches the head\'s transposed copy (decoding graph and forward)', { skip }, () => {
  const model = QwenModel.init(qwen2Tied, 31);
  const prompts = [[1, 2, 3], [4, 5]];
  generate(model, prompts, { maxNewTokens: 4, temperature: 0 }); // builds the copy
  const name = 'model.embed_tokens.weight';
  const w = model.namedWeights().get(name)!;
  model.assignWeights(new Map([[name, w.data.map((x, i) => (i % 7 === 0 ? -x : x * 1.5))]]));
  const fresh = QwenModel.fromWeights(qwen2Tied, new Map([...model.namedWeights()].map(([k, v]) => [k, v.data])));
  try {
    assertClose(model.forward([[1, 2, 3]]).dataSync(), fresh.forward([[1, 2, 3]]).dataSync(), 1e-5, 'forward');
    const a = generate(model, prompts, { maxNewTokens: 6, temperature: 0 });
    const b = generate(fresh, prompts, { maxNewTokens: 6, temperature: 0 });
    assert.deepEqual(a.tokens, b.tokens);
    for (let i = 0; i < prompts.length; i++) assertClose(a.logprobs[i]!, b.logprobs[i]!, 1e-5, 'logprobs');
  } finally {
    fresh.dispose();
    model.dispose();
  }
});

for (const mode of ['fused', 'graph'] as const) test(`native: AdamW's ${mode === 'fused' ? 'fused update (ResourceApplyAdam)' : 'update as one graph run'} follows the reference definition and the op-by-op update on cpu; state round-trips`, { skip }, async () => {
  const shapes = [[7, 5], [5], [3, 4, 2]];
  const init = shapes.map((s, i) => tf.tidy(() => tf.randomNormal(s, 0, 1, 'float32', i + 1).dataSync() as Float32Array));
  const gradsAt = (step: number): Float32Array[] => shapes.map((s, i) => tf.tidy(() => tf.randomNormal(s, 0, step === 2 ? 50 : 0.5, 'float32', 100 * step + i).dataSync() as Float32Array));
  const run = (): { weights: Float32Array[]; m: Float32Array[]; norms: number[] } => {
    const params = new Map(shapes.map((s, i) => [`p${i}`, tf.variable(tf.tensor(init[i]!, s))]));
    const opt = new AdamW(params, { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.1 }, { mode });
    if (tf.getBackend() === 'tensorflow') assert.equal(opt.graphMode, mode === 'graph');
    let tensorsAfterFirst = 0; // the fused update makes its work variables in the first step
    const norms: number[] = [];
    for (let step = 1; step <= 4; step++) {
      const grads = new Map(shapes.map((s, i) => [`p${i}`, tf.tensor(gradsAt(step)[i]!, s)]));
      norms.push(opt.apply(grads, 1e-2, 1.0)); // step 2's gradients are large: clipped
      tf.dispose([...grads.values()]);
      if (step === 1) tensorsAfterFirst = tf.memory().numTensors;
      else assert.equal(tf.memory().numTensors, tensorsAfterFirst, `tensors left behind by step ${step}`);
    }
    const state = opt.state();
    const out = { weights: [...params.values()].map((p) => p.dataSync() as Float32Array), m: [...state.m.values()], norms };
    // a restored optimizer continues the same way
    const again = new AdamW(params, opt.config, { mode });
    again.load(state);
    assert.deepEqual([...again.state().v.values()], [...state.v.values()]);
    again.dispose();
    opt.dispose();
    tf.dispose([...params.values()]);
    return out;
  };
  const nat = run();
  // The definition (float64): the same four steps.
  const ref = { params: init.map((a) => Float64Array.from(a)), state: { m: init.map((a) => new Float64Array(a.length)), v: init.map((a) => new Float64Array(a.length)), step: 0 } };
  const refNorms = [1, 2, 3, 4].map((step) => adamWReference(ref.params, gradsAt(step), ref.state, 1e-2, { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.1 }, 1.0));
  for (let i = 0; i < shapes.length; i++) assertClose(nat.weights[i]!, Float32Array.from(ref.params[i]!), 1e-5, `p${i} vs the reference`);
  assertClose(nat.norms, refNorms, 1e-3, 'gradient norms vs the reference');
  await tf.setBackend('cpu');
  try {
    const cpu = run();
    for (let i = 0; i < shapes.length; i++) {
      assertClose(nat.weights[i]!, cpu.weights[i]!, 1e-5, `p${i}`);
      assertClose(nat.m[i]!, cpu.m[i]!, 1e-5, `m${i}`);
    }
    assertClose(nat.norms, cpu.norms, 1e-3, 'gradient norms');
  } finally {
    await tf.setBackend('tensorflow');
  }
});

test('native: an addon without cm2\'s patch (TensorFlow finds no meta graph with the thread tag) falls back to the default pool once, with a warning, and the graph still runs', { skip }, () => {
  const backend = tf.backend() as unknown as { loadSavedModelMetaGraph(dir: string, tags: string): number };
  const load = backend.loadSavedModelMetaGraph;
  const savedConfig = GraphSession.sessionConfig;
  const warn = console.warn;
  const warnings: string[] = [];
  const tagsAsked: string[] = [];
  const build = (): GraphBuilder => {
    const g = new GraphBuilder();
    const x = g.placeholder('x', 'float32', [2]);
    g.node('Mul', [x, x], { T: { type: 'float32' } }, 'y');
    return g;
  };
  try {
    console.warn = (m: string) => warnings.push(m);
    // what an unpatched addon does: it passes every tag on to TensorFlow, which has no meta graph tagged with ours
    backend.loadSavedModelMetaGraph = function (this: unknown, dir: string, tags: string): number {
      tagsAsked.push(tags);
      if (tags.includes('cm2:intra_op_threads')) throw new Error(`MetaGraphDef associated with tags '${tags.split(',').join("' '")}' could not be found in SavedModel`);
      return load.call(this, dir, tags);
    };
    GraphSession.sessionConfig = 'unknown';
    const a = new GraphSession(build(), ['y'], { intraOpThreads: 1 });
    assert.equal(GraphSession.sessionConfig, 'unsupported');
    assert.equal(a.intraOpThreads, 0, 'the session uses the default pool');
    const x = tf.tensor1d([2, 3]);
    const [y] = a.run([x], ['y']);
    assert.deepEqual(Array.from(y!.dataSync()), [4, 9]);
    // later sessions do not ask again, and the warning came once
    const b = new GraphSession(build(), ['y'], { intraOpThreads: 1 });
    assert.deepEqual(tagsAsked, ['serve,cm2:intra_op_threads=1', 'serve', 'serve']);
    assert.equal(warnings.filter((w) => /cannot give a graph its own thread pool/.test(w)).length, 1);
    tf.dispose([x, y!]);
    a.dispose();
    b.dispose();
  } finally {
    backend.loadSavedModelMetaGraph = load;
    GraphSession.sessionConfig = savedConfig;
    console.warn = warn;
  }
});
