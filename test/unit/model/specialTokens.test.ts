import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import * as tf from '@tensorflow/tfjs';
import { QwenModel } from '../../../src/model/net/qwen';
import { SPECIAL_TOKEN_SOURCES, applySpecialTokenInit, initSpecialTokenRows } from '../../../src/model/net/specialTokens';
import { tinyFixtureConfigs } from '../../helpers/tinyFixtures';

// A toy vocabulary: words are split into 2-letter pieces.
const pieces = ['th', 'in', 'k', 'be', 'gi', 'n', 'fi', 'ni', 'sh', 'to', 'ol', 'ca', 'll', 'st', 'ar', 't', 'en', 'd', 'ro', 'le', 'te', 'r', 'ex', 'it'];
const specials = Object.keys(SPECIAL_TOKEN_SOURCES);
const vocab = new Map<string, number>([...pieces, ...specials].map((p, i) => [p, i]));
const tokenize = (word: string): number[] => {
  const out: number[] = [];
  for (let i = 0; i < word.length;) {
    const two = vocab.get(word.slice(i, i + 2));
    if (two !== undefined) {
      out.push(two);
      i += 2;
    } else {
      out.push(vocab.get(word[i]!)!);
      i += 1;
    }
  }
  return out;
};
const rows = vocab.size;
const cols = 6;
const matrix = { rows, cols, data: Float32Array.from({ length: rows * cols }, (_, i) => Math.sin(i * 1.7) * (1 + (i % 5))) };
const row = (data: Float32Array, r: number): number[] => [...data.subarray(r * cols, (r + 1) * cols)];
const norm = (v: number[]): number => Math.sqrt(v.reduce((a, x) => a + x * x, 0));

before(async () => {
  await tf.setBackend('cpu');
});

test('targets = mean of pooled source rows, rescaled to the mean source norm; other rows untouched', () => {
  const res = initSpecialTokenRows(matrix, { tokenToId: vocab, tokenize, sigma: 0, seed: 1 });
  assert.deepEqual(res.missing, []);
  assert.equal(res.initialised.length, specials.length);
  const think = res.initialised.find((e) => e.token === '<think>')!;
  assert.deepEqual(think.sourceIds, [...tokenize('think'), ...tokenize('begin')]);
  const src = think.sourceIds.map((s) => row(matrix.data, s));
  const mean = Array.from({ length: cols }, (_, j) => src.reduce((a, r) => a + r[j]!, 0) / src.length);
  const target = src.reduce((a, r) => a + norm(r), 0) / src.length;
  const got = row(res.data, think.id);
  assert.ok(Math.abs(norm(got) - target) < 1e-4);
  const scaled = mean.map((m) => (m * target) / norm(mean));
  got.forEach((x, j) => assert.ok(Math.abs(x - scaled[j]!) < 1e-4));
  for (let r = 0; r < pieces.length; r++) assert.deepEqual(row(res.data, r), row(matrix.data, r));
  assert.notDeepEqual(row(matrix.data, think.id), got, 'input matrix is not modified in place');
});

test('noise is seeded (σ = 0.005 by default) and missing targets are reported', () => {
  const a = initSpecialTokenRows(matrix, { tokenToId: vocab, tokenize, seed: 3 });
  const b = initSpecialTokenRows(matrix, { tokenToId: vocab, tokenize, seed: 3 });
  const c = initSpecialTokenRows(matrix, { tokenToId: vocab, tokenize, seed: 4 });
  const clean = initSpecialTokenRows(matrix, { tokenToId: vocab, tokenize, sigma: 0 });
  assert.deepEqual(a.data, b.data);
  assert.notDeepEqual(a.data, c.data);
  const id = vocab.get('<tool_call>')!;
  const diff = row(a.data, id).map((x, j) => x - row(clean.data, id)[j]!);
  assert.ok(norm(diff) > 0 && norm(diff) < 0.1);
  const partial = Object.fromEntries([...vocab].filter(([k]) => k !== '<|im_end|>'));
  assert.deepEqual(initSpecialTokenRows(matrix, { tokenToId: partial, tokenize }).missing, ['<|im_end|>']);
});

test('applySpecialTokenInit updates embed_tokens and an untied lm_head separately', () => {
  const model = QwenModel.init(tinyFixtureConfigs['tfjs-tiny-qwen3']!, 5);
  const before = model.namedWeights();
  const tokenToId = { '<think>': 60, '</think>': 61, '<tool_call>': 62, '</tool_call>': 63, '<|im_start|>': 58, '<|im_end|>': 59 };
  const tok = (w: string): number[] => [...w].map((ch) => ch.charCodeAt(0) % 50);
  const res = applySpecialTokenInit(model, { tokenToId, tokenize: tok, seed: 9 });
  assert.ok(res.lmHead);
  const after = model.namedWeights();
  for (const name of ['model.embed_tokens.weight', 'lm_head.weight']) {
    const H = after.get(name)!.shape[1]!;
    const changed = (r: number): boolean => after.get(name)!.data.subarray(r * H, (r + 1) * H).some((x, j) => x !== before.get(name)!.data[r * H + j]);
    assert.ok(changed(60) && changed(58), `${name}: targets changed`);
    assert.ok(!changed(0) && !changed(57), `${name}: other rows kept`);
  }
  assert.notDeepEqual(res.embed.initialised[0]!.norm, res.lmHead.initialised[0]!.norm);
  model.dispose();
});
