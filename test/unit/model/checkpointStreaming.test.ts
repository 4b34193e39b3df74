/**
 * Large checkpoints (issue 12, item 4): safetensors read and written one tensor at a time, in chunks; sharded BF16/F16
 * checkpoints as transformers writes them (test/fixtures/hf-tiny-*-sharded, scripts/make-sharded-fixture.py); shards
 * and index written byte for byte as transformers writes them; AdamW state streamed.
 *
 * The chunked code paths run here with chunks of a few bytes (every tensor spans many chunks); a real file over 2 GiB
 * runs when CM2_LARGE_TESTS=1 (about 2.3 GB of disk, ~30 s) and in bench/large-safetensors.ts.
 */
import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { HfWeights, loadHfCheckpoint, readHfWeights, saveHfCheckpoint } from '../../../src/model/formats/checkpoint';
import { parseSafetensors, SafetensorsReader } from '../../../src/model/formats/safetensors';
import { AdamW, openAdamWState, serializeAdamWState, writeAdamWState } from '../../../src/model/optim/adamw';
import { sha256 } from '../../../src/storage/store';
import { parseShardSize, planShards, serializeSafetensors, writeSafetensors, writeSafetensorsAsync, writeShardedSafetensors } from '../../../src/model/formats/safetensorsWrite';
import { FIXTURES } from '../../helpers/paths';
import { checkLogits, type LogitsFixture } from '../../helpers/logits';

const FIX = FIXTURES;

before(async () => {
  await tf.setBackend('cpu');
});

const tmp = (label: string) => mkdtempSync(join(tmpdir(), `cm2-${label}-`));

for (const [name, dtype] of [['hf-tiny-qwen2-bf16-sharded', 'BF16'], ['hf-tiny-qwen3-f16-sharded', 'F16']] as const) {
  test(`a sharded ${dtype} checkpoint written by transformers (${name}) loads with transformers' logits (weights upcast), whole and in 6-byte chunks`, () => {
    const dir = join(FIX, name);
    const w = HfWeights.open(dir);
    assert.ok(w.names().every((n) => w.entry(n).dtype === dtype));
    assert.ok(new Set(w.names().map((n) => w.entry(n).file)).size > 1, 'the fixture has several shards');
    w.close();
    const ref = JSON.parse(readFileSync(join(dir, 'logits.json'), 'utf8')) as LogitsFixture;
    for (const chunkBytes of [undefined, 6]) {
      const model = loadHfCheckpoint(dir, chunkBytes ? { chunkBytes } : {});
      checkLogits(model, ref);
      model.dispose();
    }
  });
}

test('saving the upcast F16 model writes the shards and index transformers writes, byte for byte', () => {
  const model = loadHfCheckpoint(join(FIX, 'hf-tiny-qwen3-f16-sharded'));
  const ref = join(FIX, 'hf-tiny-qwen3-f32-resharded');
  const dir = tmp('reshard');
  const written = saveHfCheckpoint(dir, model, { maxShardSize: 30_000, chunkBytes: 100 });
  const expected = readdirSync(ref).filter((f) => f.endsWith('.safetensors') || f.endsWith('.json')).sort();
  assert.deepEqual(readdirSync(dir).filter((f) => f !== 'config.json').sort(), expected);
  for (const f of expected) assert.ok(readFileSync(join(dir, f)).equals(readFileSync(join(ref, f))), `${f} differs from transformers' file`);
  for (const w of written) assert.equal(w.sha256, sha256(readFileSync(w.path)), `${w.path}: returned sha256`);
  // And the folder loads back to the same weights.
  const again = loadHfCheckpoint(dir);
  for (const e of model.weightEntries()) assert.deepEqual(again.namedVariables().get(e.name)!.dataSync(), model.namedVariables().get(e.name)!.dataSync(), e.name);
  model.dispose();
  again.dispose();
  rmSync(dir, { recursive: true });
});

test('re-saving with another shard size leaves one checkpoint in the folder (stale shards, single file or index removed)', () => {
  const model = loadHfCheckpoint(join(FIX, 'hf-tiny-qwen2-bf16-sharded'));
  const dir = tmp('resave');
  saveHfCheckpoint(dir, model, { maxShardSize: '10KB' });
  const many = readdirSync(dir).filter((f) => f.endsWith('.safetensors'));
  assert.ok(many.length > 3);
  saveHfCheckpoint(dir, model, { maxShardSize: '30KB' });
  const fewer = readdirSync(dir).filter((f) => f.endsWith('.safetensors'));
  assert.ok(fewer.length > 1 && fewer.length < many.length && fewer.every((f) => f.endsWith(`-of-0000${fewer.length}.safetensors`)), fewer.join(', '));
  saveHfCheckpoint(dir, model);
  assert.deepEqual(readdirSync(dir).sort(), ['config.json', 'model.safetensors']);
  const index = JSON.parse(readFileSync(join(FIX, 'hf-tiny-qwen2-bf16-sharded', 'model.safetensors.index.json'), 'utf8')) as { metadata: { total_parameters: number } };
  assert.equal(model.numParams(), index.metadata.total_parameters);
  checkLogits(loadHfCheckpoint(dir), JSON.parse(readFileSync(join(FIX, 'hf-tiny-qwen2-bf16-sharded', 'logits.json'), 'utf8')) as LogitsFixture);
  model.dispose();
  rmSync(dir, { recursive: true });
});

test('streaming reader and writers (sync and async) agree with the in-memory ones for F32, F16 and BF16, across chunk boundaries', async () => {
  const dir = tmp('st');
  const tensors = new Map([
    ['b', { shape: [3, 5], data: Float32Array.from({ length: 15 }, (_, i) => Math.sin(i) * 1e3) }],
    ['a', { shape: [7], data: Float32Array.from({ length: 7 }, (_, i) => -i / 3) }],
    ['empty', { shape: [0, 4], data: new Float32Array(0) }],
  ]);
  const bytes = serializeSafetensors(tensors, { step: '3' });
  for (const chunkBytes of [4, 12, 1 << 20]) {
    const path = join(dir, `w${chunkBytes}.safetensors`);
    const w = writeSafetensors(path, [...tensors].map(([name, t]) => ({ name, shape: t.shape, data: () => t.data })), { metadata: { step: '3' }, chunkBytes });
    assert.ok(readFileSync(path).equals(Buffer.from(bytes)), `chunk ${chunkBytes}: bytes differ from serializeSafetensors`);
    assert.deepEqual(w, { path, bytes: bytes.byteLength, sha256: sha256(bytes) });
    const path2 = join(dir, `a${chunkBytes}.safetensors`);
    const w2 = await writeSafetensorsAsync(path2, [...tensors].map(([name, t]) => ({ name, shape: t.shape, data: () => t.data })), { metadata: { step: '3' }, chunkBytes });
    assert.ok(readFileSync(path2).equals(Buffer.from(bytes)), `chunk ${chunkBytes}: async writer's bytes differ`);
    assert.deepEqual(w2, { path: path2, bytes: bytes.byteLength, sha256: sha256(bytes) });
    const r = SafetensorsReader.open(path, { chunkBytes });
    assert.deepEqual(r.metadata, { step: '3' });
    for (const [name, t] of tensors) assert.deepEqual(r.read(name, t.shape), t.data);
    r.close();
  }
  // F16 and BF16 in one hand-written file, read in 2-byte... (rounded to 4-byte) chunks.
  const f16 = [0x3c00, 0xc000, 0x3555, 0x0001, 0x7bff];
  const bf16 = [0x3f80, 0xc0a0, 0x4049];
  const header = JSON.stringify({ h: { dtype: 'F16', shape: [5], data_offsets: [0, 10] }, g: { dtype: 'BF16', shape: [3], data_offsets: [10, 16] } });
  const buf = Buffer.alloc(8 + header.length + 16);
  buf.writeBigUInt64LE(BigInt(header.length));
  buf.write(header, 8);
  [...f16, ...bf16].forEach((u, i) => buf.writeUInt16LE(u, 8 + header.length + 2 * i));
  writeFileSync(join(dir, 'half.safetensors'), buf);
  const inMemory = parseSafetensors(buf).tensors;
  const r = SafetensorsReader.open(join(dir, 'half.safetensors'), { chunkBytes: 2 });
  assert.deepEqual(r.read('h'), inMemory.get('h')!.data);
  assert.deepEqual([...r.read('h')], [1, -2, Math.fround(0.333251953125), Math.fround(2 ** -24), 65504]);
  assert.deepEqual([...r.read('g')], [1, -5, 3.140625]);
  r.close();
  rmSync(dir, { recursive: true });
});

test('shards are planned as huggingface_hub does (greedy in order, oversized tensors alone, decimal units)', () => {
  assert.equal(parseShardSize('5GB'), 5_000_000_000);
  assert.equal(parseShardSize('500MB'), 500_000_000);
  assert.equal(parseShardSize(' 1.5kb'), 1500);
  assert.equal(parseShardSize(123), 123);
  assert.throws(() => parseShardSize('5GiB'), /units TB, GB, MB, KB/);
  assert.throws(() => parseShardSize(0), /positive/);
  const plan = planShards([{ name: 'a', bytes: 6 }, { name: 'b', bytes: 6 }, { name: 'c', bytes: 2 }, { name: 'd', bytes: 12 }, { name: 'e', bytes: 2 }, { name: 'f', bytes: 2 }], 10);
  // An oversized tensor is pushed as its own shard at once, before the shard being filled (as huggingface_hub does).
  assert.deepEqual(plan.files, [
    { file: 'model-00001-of-00004.safetensors', names: ['a'] },
    { file: 'model-00002-of-00004.safetensors', names: ['d'] },
    { file: 'model-00003-of-00004.safetensors', names: ['b', 'c', 'e'] },
    { file: 'model-00004-of-00004.safetensors', names: ['f'] },
  ]);
  assert.equal(plan.totalSize, 30);
  // huggingface_hub's docstring example: [6GB, 6GB, 2GB, 6GB, 2GB, 2GB] under 10GB → [6], [6+2], [6+2+2].
  const gb = 1e9;
  assert.deepEqual(planShards([6, 6, 2, 6, 2, 2].map((s, i) => ({ name: `t${i}`, bytes: s * gb })), parseShardSize('10GB')).files.map((f) => f.names), [['t0'], ['t1', 't2'], ['t3', 't4', 't5']]);
  assert.deepEqual(planShards([{ name: 'a', bytes: 6 }], 10).files, [{ file: 'model.safetensors', names: ['a'] }]);
});

test('errors name the file and the tensor', () => {
  const dir = tmp('bad');
  const src = join(FIX, 'hf-tiny-qwen3-f16-sharded');
  const copy = (to: string) => {
    for (const f of readdirSync(src)) copyFileSync(join(src, f), join(to, f));
  };
  // A truncated shard.
  copy(dir);
  const shard = join(dir, 'model-00002-of-00003.safetensors');
  writeFileSync(shard, readFileSync(shard).subarray(0, statSync(shard).size - 10));
  assert.throws(() => loadHfCheckpoint(dir), (e: Error) => e.message.includes('model-00002-of-00003.safetensors') && /tensor \S+: data_offsets .* outside the file/.test(e.message));
  // A missing shard.
  rmSync(shard);
  assert.throws(() => loadHfCheckpoint(dir), /model\.safetensors\.index\.json: lists model-00002-of-00003\.safetensors .* which is missing/);
  // An index that maps a tensor to the wrong shard.
  copy(dir);
  const indexPath = join(dir, 'model.safetensors.index.json');
  const index = JSON.parse(readFileSync(indexPath, 'utf8')) as { weight_map: Record<string, string> };
  index.weight_map['lm_head.weight'] = 'model-00001-of-00003.safetensors';
  writeFileSync(indexPath, JSON.stringify(index));
  assert.throws(() => loadHfCheckpoint(dir), /maps tensor lm_head\.weight to model-00001-of-00003\.safetensors, which has no such tensor/);
  // A tensor of a dtype that is not read; a shape that differs from the config's.
  const odd = join(dir, 'odd.safetensors');
  const header = JSON.stringify({ x: { dtype: 'I64', shape: [1], data_offsets: [0, 8] }, y: { dtype: 'F32', shape: [2], data_offsets: [8, 16] } });
  const buf = Buffer.alloc(8 + header.length + 16);
  buf.writeBigUInt64LE(BigInt(header.length));
  buf.write(header, 8);
  writeFileSync(odd, buf);
  const r = SafetensorsReader.open(odd);
  assert.throws(() => r.read('x'), /odd\.safetensors: tensor x has dtype I64; F32, F16 and BF16 are read/);
  assert.throws(() => r.read('y', [3]), /odd\.safetensors: tensor y has shape \[2\], expected \[3\]/);
  r.close();
  writeFileSync(odd, Buffer.from('not a safetensors file at all'));
  assert.throws(() => SafetensorsReader.open(odd), /odd\.safetensors: header length \d+ exceeds the file/);
  // A checkpoint without a weight the model needs, or with one it does not have.
  const single = tmp('single');
  writeFileSync(join(single, 'config.json'), readFileSync(join(src, 'config.json')));
  const weights = readHfWeights(src);
  const extra = new Map(weights);
  extra.set('model.layers.9.mlp.up_proj.weight', { shape: [1], data: new Float32Array(1) });
  writeFileSync(join(single, 'model.safetensors'), serializeSafetensors(extra));
  assert.throws(() => loadHfCheckpoint(single), /unexpected weights: model\.layers\.9\.mlp\.up_proj\.weight/);
  weights.delete('model.norm.weight');
  writeFileSync(join(single, 'model.safetensors'), serializeSafetensors(weights));
  assert.throws(() => loadHfCheckpoint(single), /weight model\.norm\.weight is missing/);
  rmSync(dir, { recursive: true });
  rmSync(single, { recursive: true });
});

test('AdamW state streams to a file and back bit for bit (the bytes serializeAdamWState gives)', () => {
  const model = loadHfCheckpoint(join(FIX, 'hf-tiny-qwen2-bf16-sharded'));
  const vars = model.namedVariables();
  const opt = new AdamW(vars, { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01 });
  for (let i = 0; i < 3; i++) {
    const grads = new Map([...vars].map(([k, v]) => [k, tf.randomNormal(v.shape, 0, 1, 'float32', 7 + i)]));
    opt.apply(grads, 1e-3, 1.0);
    tf.dispose([...grads.values()]);
  }
  const dir = tmp('adamw');
  const path = join(dir, 'optimizer.safetensors');
  const w = writeAdamWState(path, opt, { chunkBytes: 64 });
  assert.ok(readFileSync(path).equals(Buffer.from(serializeAdamWState(opt.state(), vars))));
  assert.equal(w.sha256, sha256(readFileSync(path)));
  const fresh = new AdamW(vars, opt.config);
  const opened = openAdamWState(path, { chunkBytes: 8 });
  fresh.load(opened.state);
  opened.close();
  assert.equal(fresh.steps, 3);
  const a = opt.state();
  const b = fresh.state();
  for (const k of vars.keys()) {
    assert.deepEqual(b.m.get(k), a.m.get(k), `m.${k}`);
    assert.deepEqual(b.v.get(k), a.v.get(k), `v.${k}`);
  }
  writeFileSync(join(dir, 'nostep.safetensors'), serializeSafetensors(new Map([['m.x', { shape: [1], data: new Float32Array(1) }]])));
  assert.throws(() => openAdamWState(join(dir, 'nostep.safetensors')), /nostep\.safetensors: no optimizer step/);
  opt.dispose();
  fresh.dispose();
  model.dispose();
  rmSync(dir, { recursive: true });
});

test('a safetensors file over 2 GiB round-trips one tensor at a time (CM2_LARGE_TESTS=1)', { skip: process.env.CM2_LARGE_TESTS !== '1' && 'set CM2_LARGE_TESTS=1 (writes ~2.3 GB to TMPDIR)' }, () => {
  const dir = tmp('large');
  const path = join(dir, 'large.safetensors');
  const n = 9;
  const len = 64 * 1024 * 1024; // 256 MiB per tensor, 2.25 GiB in all
  const fill = (i: number) => {
    const a = new Float32Array(len);
    for (let j = 0; j < len; j += 4096) a[j] = i * 1e6 + j;
    a[len - 1] = -i;
    return a;
  };
  const rss0 = process.memoryUsage().rss;
  let peak = rss0;
  const sample = () => { peak = Math.max(peak, process.memoryUsage().rss); };
  try {
    const w = writeSafetensors(path, Array.from({ length: n }, (_, i) => ({ name: `t${i}`, shape: [len / 1024, 1024], data: () => { sample(); const a = fill(i); sample(); return a; } })));
    assert.ok(w.bytes > 2 ** 31, `${w.bytes} bytes`);
    assert.throws(() => readFileSync(path), (e: NodeJS.ErrnoException) => e.code === 'ERR_FS_FILE_TOO_LARGE');
    const r = SafetensorsReader.open(path);
    for (let i = n - 1; i >= 0; i--) {
      const a = r.read(`t${i}`);
      sample();
      assert.equal(a[4096], i * 1e6 + 4096);
      assert.equal(a[len - 1], -i);
    }
    r.close();
    // One tensor (256 MiB) plus a chunk at a time: far below one copy of the file (2.25 GiB).
    const grew = peak - rss0;
    assert.ok(grew < 1.0 * 2 ** 30, `RSS grew by ${(grew / 2 ** 30).toFixed(2)} GiB`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('writeShardedSafetensors refuses duplicate names', () => {
  const dir = tmp('dup');
  const t = { name: 'x', shape: [1], data: () => new Float32Array(1) };
  assert.throws(() => writeShardedSafetensors(dir, [t, t]), /tensor x appears twice/);
  assert.throws(() => writeSafetensors(join(dir, 'a.safetensors'), [t, t]), /tensor x appears twice/);
  rmSync(dir, { recursive: true });
});
