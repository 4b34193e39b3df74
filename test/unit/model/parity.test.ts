import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { modelLogitsCommand } from '../../../src/cli/modelCommand';
import { loadHfCheckpoint, readHfConfig, saveHfCheckpoint } from '../../../src/model/formats/checkpoint';
import { TINY_FIXTURE_SEED, tinyFixtureConfigs } from '../../helpers/tinyFixtures';
import { QwenModel } from '../../../src/model/net/qwen';
import { parseQwenConfig, qwenDims } from '../../../src/model/net/qwenConfig';
import { f16ToF32, parseSafetensors } from '../../../src/model/formats/safetensors';
import { serializeSafetensors } from '../../../src/model/formats/safetensorsWrite';
import { FIXTURES } from '../../helpers/paths';
import { checkLogits, maxDiff, type LogitsFixture } from '../../helpers/logits';

const FIX = FIXTURES;

before(async () => {
  await tf.setBackend('cpu');
});

for (const name of ['hf-tiny-qwen3', 'hf-tiny-qwen2-tied', 'hf-tiny-llama-tied']) {
  test(`an HF checkpoint (${name}) loads and gives transformers' logits within 1e-4`, () => {
    const dir = join(FIX, name);
    const model = loadHfCheckpoint(dir);
    checkLogits(model, JSON.parse(readFileSync(join(dir, 'logits.json'), 'utf8')) as LogitsFixture);
    model.dispose();
  });
}

for (const [name, config] of Object.entries(tinyFixtureConfigs)) {
  test(`a tfjs checkpoint (${name}) is reproduced byte for byte and transformers gives the same logits`, () => {
    const dir = join(FIX, name);
    const model = QwenModel.init(config, TINY_FIXTURE_SEED);
    const bytes = serializeSafetensors(model.namedWeights(), { format: 'pt' });
    assert.ok(Buffer.from(bytes).equals(readFileSync(join(dir, 'model.safetensors'))), 'safetensors bytes differ from the committed fixture');
    checkLogits(model, JSON.parse(readFileSync(join(dir, 'transformers-logits.json'), 'utf8')) as LogitsFixture);
    model.dispose();
  });
}

test('save → load round-trips weights and config (unknown keys kept)', () => {
  const src = join(FIX, 'hf-tiny-qwen3');
  const model = loadHfCheckpoint(src);
  const dir = mkdtempSync(join(tmpdir(), 'cm2-model-'));
  saveHfCheckpoint(dir, model);
  const again = loadHfCheckpoint(dir);
  const a = model.namedWeights();
  const b = again.namedWeights();
  assert.deepEqual([...a.keys()].sort(), [...b.keys()].sort());
  for (const [k, v] of a) assert.deepEqual(b.get(k)!.data, v.data, k);
  const cfg = readHfConfig(dir) as Record<string, unknown>;
  assert.deepEqual(cfg.layer_types, ['full_attention', 'full_attention']);
  assert.equal(cfg.model_type, 'qwen3');
  model.dispose();
  again.dispose();
});

test('sharded checkpoints load through model.safetensors.index.json', () => {
  const src = join(FIX, 'hf-tiny-qwen2-tied');
  const whole = parseSafetensors(readFileSync(join(src, 'model.safetensors'))).tensors;
  const dir = mkdtempSync(join(tmpdir(), 'cm2-shard-'));
  writeFileSync(join(dir, 'config.json'), readFileSync(join(src, 'config.json')));
  const names = [...whole.keys()].sort();
  const shards = [names.slice(0, 10), names.slice(10)];
  const weightMap: Record<string, string> = {};
  shards.forEach((part, i) => {
    const file = `model-0000${i + 1}-of-00002.safetensors`;
    writeFileSync(join(dir, file), serializeSafetensors(new Map(part.map((n) => [n, whole.get(n)!]))));
    for (const n of part) weightMap[n] = file;
  });
  writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: {}, weight_map: weightMap }));
  const model = loadHfCheckpoint(dir);
  checkLogits(model, JSON.parse(readFileSync(join(src, 'logits.json'), 'utf8')) as LogitsFixture);
  model.dispose();
});

test('safetensors: F32 round trip keeps __metadata__; F16 and BF16 decode', () => {
  const tensors = new Map([['b', { shape: [3], data: Float32Array.from([1.5, -2, 3.25]) }], ['a', { shape: [2, 1], data: Float32Array.from([0.1, 7]) }]]);
  const bytes = serializeSafetensors(tensors, { format: 'pt' });
  const headerLen = Number(new DataView(bytes.buffer).getBigUint64(0, true));
  assert.equal(headerLen % 8, 0);
  const back = parseSafetensors(bytes);
  assert.deepEqual(back.metadata, { format: 'pt' });
  for (const [k, v] of tensors) {
    assert.deepEqual(back.tensors.get(k)!.shape, v.shape);
    assert.deepEqual(back.tensors.get(k)!.data, v.data);
  }

  // Hand-written file with F16 and BF16 tensors.
  const f16 = [0x3c00, 0xc000, 0x3555, 0x0001, 0x7bff];
  const bf16 = [0x3f80, 0xc0a0, 0x4049];
  const header = JSON.stringify({
    h: { dtype: 'F16', shape: [5], data_offsets: [0, 10] },
    g: { dtype: 'BF16', shape: [3], data_offsets: [10, 16] },
    __metadata__: { note: 'x' },
  });
  const buf = new Uint8Array(8 + header.length + 16);
  const view = new DataView(buf.buffer);
  view.setBigUint64(0, BigInt(header.length), true);
  buf.set(new TextEncoder().encode(header), 8);
  [...f16, ...bf16].forEach((u, i) => view.setUint16(8 + header.length + 2 * i, u, true));
  const parsed = parseSafetensors(buf);
  assert.deepEqual([...parsed.tensors.get('h')!.data], [1, -2, Math.fround(0.333251953125), Math.fround(2 ** -24), 65504]);
  assert.deepEqual([...parsed.tensors.get('g')!.data], [1, -5, 3.140625]);
  assert.equal(f16ToF32(0xfc00), -Infinity);
  assert.equal(parsed.metadata?.note, 'x');
});

test('cm2 model logits prints the last position\'s logits', async () => {
  const ref = JSON.parse(readFileSync(join(FIX, 'hf-tiny-qwen3', 'logits.json'), 'utf8')) as LogitsFixture;
  const printed: string[] = [];
  const log = console.log;
  const err = console.error;
  console.log = (s: string) => printed.push(s);
  console.error = () => {};
  try {
    await modelLogitsCommand({ checkpoint: join(FIX, 'hf-tiny-qwen3'), inputIds: ref.input_ids[1]!.join(','), backend: 'cpu' });
  } finally {
    console.log = log;
    console.error = err;
  }
  const row = JSON.parse(printed[0]!) as number[];
  assert.ok(maxDiff([[row]], [[ref.logits[1]!.at(-1)!]]) < 1e-4);
});

test('config.json: Llama is read as Qwen-without-bias; what the decoder cannot compute is refused by name', () => {
  const llama = JSON.parse(readFileSync(join(FIX, 'hf-tiny-llama-tied', 'config.json'), 'utf8')) as Record<string, unknown>;
  const dims = qwenDims(parseQwenConfig(llama));
  assert.deepEqual([dims.qkvBias, dims.oBias, dims.qkNorm, dims.tied, dims.ropeTheta], [false, false, false, true, 100000]);
  assert.deepEqual([qwenDims(parseQwenConfig({ ...llama, attention_bias: true })).qkvBias, qwenDims(parseQwenConfig({ ...llama, attention_bias: true })).oBias], [true, true]);
  assert.throws(() => parseQwenConfig({ ...llama, mlp_bias: true }), /mlp_bias is not supported/);
  assert.throws(() => parseQwenConfig({ ...llama, rope_scaling: { rope_type: 'llama3', factor: 8 } }), /rope scaling 'llama3' is not supported/);
  assert.throws(() => parseQwenConfig({ ...llama, model_type: 'mistral' }), /model_type/);
});
