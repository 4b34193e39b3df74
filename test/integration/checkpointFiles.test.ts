/**
 * Checkpoints of any size on MinIO (issue 12, item 4): files streamed up and down (multipart above 64 MiB), sha256
 * checked against the manifest on the way down; a training checkpoint (weights + AdamW state) written and restored
 * through temp files (large) or memory (small) bit for bit, the same bytes either way; a sharded BF16 HF folder in S3 loaded as transformers' logits say.
 */
import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { assignFromWeights, checkpointModel, loadStoredHfModel, saveTrainingCheckpoint, uploadModelWeights, withCheckpoint } from '../../src/storage/policyStore';
import { downloadCheckpoint, latestCheckpoint, stepFolder } from '../../src/storage/checkpoints';
import { sha256, sha256File } from '../../src/storage/store';
import { runKey } from '../../src/run/layout';
import { hfConfigJson, loadHfCheckpoint } from '../../src/model/formats/checkpoint';
import { QwenModel } from '../../src/model/net/qwen';
import { AdamW, serializeAdamWState } from '../../src/model/optim/adamw';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { serializeTensors } from '../../src/model/formats/safetensorsWrite';

const FIX = join(__dirname, '..', 'fixtures');

before(async () => {
  await tf.setBackend('cpu');
});

test('files stream to and from S3 with their sha256 (multipart above 64 MiB); a differing object is refused and not left behind', async () => {
  const cfg = testConfig(uniqueId('files'));
  const store = testStore(cfg);
  const dir = mkdtempSync(join(tmpdir(), 'cm2-files-'));
  try {
    const big = join(dir, 'big.bin');
    const data = randomBytes(70 * 1024 * 1024);
    writeFileSync(big, data);
    const key = runKey(cfg.run.id, 'big.bin');
    const ref = await store.putFile(key, big);
    assert.deepEqual(ref, { key, sha256: sha256(data), bytes: data.length });
    assert.deepEqual(await store.ref(key), ref);
    const back = join(dir, 'back.bin');
    await store.getVerifiedFile(ref, back);
    assert.deepEqual(await sha256File(back), { sha256: ref.sha256, bytes: ref.bytes });
    assert.deepEqual(readdirSync(dir).sort(), ['back.bin', 'big.bin']);

    // An object replaced behind the reference's back.
    await store.putBytes(key, Buffer.from('something else'));
    const wrong = join(dir, 'wrong.bin');
    await assert.rejects(store.getVerifiedFile(ref, wrong), /hash mismatch for .*big\.bin/);
    assert.equal(existsSync(wrong), false);
    assert.equal(existsSync(`${wrong}.partial`), false);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

for (const [label, inMemoryMaxBytes] of [['temp files', 0], ['memory (small)', undefined]] as const) {
  test(`a training checkpoint (weights + AdamW moments) goes through ${label} and comes back bit for bit; an altered file is refused`, async () => {
    const cfg = testConfig(uniqueId('ckptfiles'));
    const store = testStore(cfg);
    const prefix = runKey(cfg.run.id, 'sft', 'checkpoints');
    const transfer = inMemoryMaxBytes === undefined ? {} : { inMemoryMaxBytes };
    const model = loadHfCheckpoint(join(FIX, 'hf-tiny-qwen3-f16-sharded'));
    const vars = model.namedVariables();
    const opt = new AdamW(vars, { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.1 });
    const grads = new Map([...vars].map(([k, v]) => [k, tf.randomNormal(v.shape, 0, 1, 'float32', 5)]));
    opt.apply(grads, 1e-2, 1.0);
    tf.dispose([...grads.values()]);

    const saved = await saveTrainingCheckpoint(store, prefix, 7, model, opt, ({ weightsSha256 }) => ({ trainer: { step: 7 }, weightsSha256 }), { config: hfConfigJson(model), ...transfer });
    assert.equal(saved.manifest.state['weightsSha256'], saved.weightsSha256);
    assert.equal(saved.manifest.files['model.safetensors']!.sha256, saved.weightsSha256);
    // The same bytes either way: what the in-memory writer gives.
    assert.equal(saved.weightsSha256, sha256(serializeTensors(model.weightEntries(), { format: 'pt' })));
    // The moments in HF layout (the model's, for an optimizer made without one), as serializeAdamWState gives them.
    assert.equal(saved.manifest.files['optimizer.safetensors']!.sha256, sha256(serializeAdamWState(opt.state(), vars, model)));
    assert.equal((await latestCheckpoint(store, prefix))?.manifest.step, 7);

    // Restore into a fresh model and optimizer.
    const restored = await withCheckpoint(store, saved.manifestKey, ({ manifest, weights, config, optimizer }) => {
      assert.equal(manifest.step, 7);
      const m = checkpointModel({ weights, ...(config ? { config } : {}) }, saved.manifestKey);
      const o = new AdamW(m.namedVariables(), opt.config, { layout: m });
      assert.equal(optimizer!.layout, 'hf');
      o.load(optimizer!);
      return { m, o };
    }, transfer);
    for (const [k, v] of vars) assert.deepEqual(restored.m.namedVariables().get(k)!.dataSync(), v.dataSync(), k);
    const a = opt.state();
    const b = restored.o.state();
    assert.equal(b.step, 1);
    for (const k of vars.keys()) {
      assert.deepEqual(b.m.get(k), a.m.get(k));
      assert.deepEqual(b.v.get(k), a.v.get(k));
    }
    // assignFromWeights (the SFT resume path) gives the same weights to an existing model.
    const other = QwenModel.init(model.config, 99);
    await withCheckpoint(store, saved.manifestKey, ({ weights }) => assignFromWeights(other, weights), { optimizer: false, ...transfer });
    for (const [k, v] of vars) assert.deepEqual(other.namedVariables().get(k)!.dataSync(), v.dataSync(), k);

    // The optimizer file replaced behind the manifest's back: refused.
    await store.putBytes(`${stepFolder(prefix, 7)}/optimizer.safetensors`, Buffer.from('torn'));
    await assert.rejects(withCheckpoint(store, saved.manifestKey, () => undefined, transfer), /hash mismatch for .*optimizer\.safetensors/);
    const dir = mkdtempSync(join(tmpdir(), 'cm2-dl-'));
    await assert.rejects(downloadCheckpoint(store, saved.manifestKey, dir), /hash mismatch for .*optimizer\.safetensors/);
    // Only what is asked for is fetched (an evaluation needs no optimizer state).
    const { paths } = await downloadCheckpoint(store, saved.manifestKey, dir, ['config.json', 'model.safetensors']);
    assert.deepEqual(Object.keys(paths).sort(), ['config.json', 'model.safetensors']);
    rmSync(dir, { recursive: true, force: true });
    for (const t of [model, restored.m, other]) t.dispose();
    opt.dispose();
    restored.o.dispose();
  });
}

for (const [label, inMemoryMaxBytes] of [['a temp file', 0], ['memory (small)', undefined]] as const) {
  test(`policy weights go up and come back through ${label}`, async () => {
    const cfg = testConfig(uniqueId('policy'));
    const store = testStore(cfg);
    const transfer = inMemoryMaxBytes === undefined ? {} : { inMemoryMaxBytes };
    const model = loadHfCheckpoint(join(FIX, 'hf-tiny-qwen2-bf16-sharded'));
    const prefix = runKey(cfg.run.id, 'sft', 'final');
    await store.putJson(`${prefix}/config.json`, hfConfigJson(model));
    const ref = await uploadModelWeights(store, `${prefix}/model.safetensors`, model, transfer);
    assert.equal(ref.sha256, sha256(serializeTensors(model.weightEntries(), { format: 'pt' })));
    const back = await loadStoredHfModel(store, prefix, transfer);
    for (const [k, v] of model.namedVariables()) assert.deepEqual(back.namedVariables().get(k)!.dataSync(), v.dataSync(), k);
    model.dispose();
    back.dispose();
  });
}

test('a sharded BF16 HF folder in S3 (as transformers writes it) loads with transformers\' logits', async () => {
  const cfg = testConfig(uniqueId('hfs3'));
  const store = testStore(cfg);
  const src = join(FIX, 'hf-tiny-qwen2-bf16-sharded');
  const prefix = runKey(cfg.run.id, 'policy');
  for (const f of readdirSync(src)) if (f !== 'logits.json') await store.putFile(`${prefix}/${f}`, join(src, f));
  const model = await loadStoredHfModel(store, prefix);
  const ref = JSON.parse(readFileSync(join(src, 'logits.json'), 'utf8')) as { input_ids: number[][]; logits: number[][][] };
  const logits = model.forward(ref.input_ids).arraySync();
  let d = 0;
  logits.forEach((s, i) => s.forEach((r, t) => r.forEach((x, v) => { d = Math.max(d, Math.abs(x - ref.logits[i]![t]![v]!)); })));
  assert.ok(d < 1e-4, `logits differ by ${d}`);
  model.dispose();
});
