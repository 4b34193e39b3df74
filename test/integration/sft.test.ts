/**
 * Cold-start SFT on Temporal + MinIO: a worker killed in the middle of training is replaced, the new attempt resumes
 * from the last S3 checkpoint, and the run ends with exactly the weights of an uninterrupted run with the same seed.
 */
import { test } from 'node:test';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import * as tf from '@tensorflow/tfjs';
import { runSft } from '../../src/stages/sft/trainActivity';
import { selectBackend } from '../../src/model/net/backend';
import { startSft, sftInput } from '../../src/cli/stages';
import { connectClient } from '../../src/infra/temporal';
import { runKey, sftKeys } from '../../src/run/layout';
import { CheckpointManifest } from '../../src/storage/checkpoints';
import { generateDemoDataset } from '../../src/demo/generator';
import { exactnessBackends, testConfig, testStore, uniqueId } from '../helpers/env';
import { startChildWorker, writeConfigFile } from '../helpers/processes';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const tinySft = {
  backend: 'auto',
  base: { kind: 'init', seed: 5, config: { model_type: 'qwen3', hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8, tie_word_embeddings: true, rope_theta: 10000, max_position_embeddings: 1024 } },
  epochs: 3, microBatch: 2, gradAccum: 2, maxSeqLen: 640, checkpointEvery: 3, peakLr: 5e-3,
  eval: { prompts: 0 },
};

const sftCases = [
  ...exactnessBackends().map((backend) => ({ backend, lora: null as null | Record<string, unknown> })),
  // LoRA on the first backend, with two token rows trained beside the adapters.
  { backend: exactnessBackends()[0]!, lora: { rank: 4, alpha: 8, trainTokens: [3, 7] } },
];
for (const { backend, lora } of sftCases) test(`SFT resumes after a worker kill and ends with the weights of an uninterrupted run [${backend}${lora ? ', LoRA' : ''}]`, async () => {
  const examples = generateDemoDataset({ seed: 31, count: 40, brokenRate: 0 });
  const cfg = testConfig(uniqueId('sft'), { sft: { ...tinySft, backend, lora, ...(lora ? { peakLr: 2e-2 } : {}) }, temporal: { activity: { heartbeatTimeout: '5s', maxRetryInterval: '1s' } } });
  const store = testStore(cfg);
  await store.putJsonl(runKey(cfg.run.id, 'data', 'cold_start.jsonl'), examples);
  await store.putJsonl(runKey(cfg.run.id, 'data', 'rl.jsonl'), examples.slice(0, 4));

  // Reference: the same training, uninterrupted, in this process.
  const refRun = `${cfg.run.id}-ref`;
  await store.putJsonl(runKey(refRun, 'data', 'cold_start.jsonl'), examples);
  await selectBackend(backend as Parameters<typeof selectBackend>[0]);
  const tensors = tf.memory().numTensors;
  const reference = await runSft(store, { runId: refRun, sft: cfg.sft, sourceKey: runKey(refRun, 'data', 'cold_start.jsonl') }, { log: () => undefined });
  // Nothing left behind (the model, the optimizer's moments): a worker trains again and again.
  assert.equal(tf.memory().numTensors, tensors, 'tensors left after runSft');
  assert.ok(reference.steps >= 15, `${reference.steps} steps`);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  assert.ok(mean(reference.losses.slice(-5)) < mean(reference.losses.slice(0, 5)), `the loss falls: ${reference.losses.map((l) => l.toFixed(2)).join(' ')}`);

  const file = writeConfigFile(cfg);
  let worker = await startChildWorker(file);
  try {
    const client = await connectClient(cfg);
    const handle = await startSft(client, cfg);
    // Kill the worker as soon as the first checkpoint is complete.
    const prefix = runKey(cfg.run.id, 'sft', 'checkpoints/');
    while (!(await store.list(prefix)).some((k) => k.endsWith('manifest.json'))) await sleep(20);
    await worker.kill('SIGKILL');
    worker = await startChildWorker(file);
    const report = await handle.result();
    assert.ok(report.train.resumedFrom > 0 && report.train.resumedFrom < reference.steps, `resumed from step ${report.train.resumedFrom}`);
    assert.equal(report.train.steps, reference.steps);
    assert.equal(report.train.model.sha256, reference.model.sha256, 'same final weights as the uninterrupted run');
    assert.deepEqual(report.train.losses, reference.losses);
    assert.equal(sftInput(cfg).sourceKey, runKey(cfg.run.id, 'data', 'cold_start.jsonl'));
    if (lora) {
      const manifests = (await store.list(prefix)).filter((k) => k.endsWith('manifest.json'));
      const m = await store.getJson(manifests[0]!, CheckpointManifest);
      assert.ok(m.files['adapter_model.safetensors'] && !m.files['model.safetensors'], 'LoRA checkpoints hold the adapter, not the weights');
      const adapterRef = await store.ref(`${sftKeys.adapter(cfg.run.id)}/adapter_model.safetensors`);
      const refAdapter = await store.ref(`${sftKeys.adapter(refRun)}/adapter_model.safetensors`);
      assert.ok(adapterRef && refAdapter && adapterRef.sha256 === refAdapter.sha256, 'the PEFT adapter equals the uninterrupted run\'s');
    }
  } finally {
    await worker.kill('SIGTERM');
  }
});

test('the SFT stage imports a base the gpu worker lacks (sft.base.importFrom: a GGUF file), then trains from it', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'cm2-sft-import-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const dir = join(root, 'base');
  const gguf = join(__dirname, '..', 'fixtures', 'gguf', 'tiny-llama-f32.gguf');
  // the fixture's tokenizer is character-level: a demo dialogue is a few thousand tokens
  const examples = generateDemoDataset({ seed: 32, count: 4, brokenRate: 0 });
  const cfg = testConfig(uniqueId('sft-import'), {
    sft: { backend: 'auto', tokenizerDir: dir, base: { kind: 'hf', dir, importFrom: gguf }, epochs: 1, microBatch: 1, gradAccum: 2, maxSeqLen: 8192, checkpointEvery: 10, peakLr: 1e-3, eval: { prompts: 0 } },
  });
  const store = testStore(cfg);
  await store.putJsonl(runKey(cfg.run.id, 'data', 'cold_start.jsonl'), examples);
  await store.putJsonl(runKey(cfg.run.id, 'data', 'rl.jsonl'), examples.slice(0, 2));
  const worker = await startChildWorker(writeConfigFile(cfg));
  try {
    const client = await connectClient(cfg);
    const report = await (await startSft(client, cfg)).result();
    assert.ok(report.train.steps >= 1, `${report.train.steps} steps`);
    assert.ok(existsSync(join(dir, 'model.safetensors')));
    assert.equal(JSON.parse(readFileSync(join(dir, 'cm2-import.json'), 'utf8')).from, gguf);
  } finally {
    await worker.kill('SIGTERM');
  }
});

test('a continued LoRA SFT (sft.initAdapter) starts from an earlier run\'s adapter; one of another layout is refused', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'cm2-sft-init-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const examples = generateDemoDataset({ seed: 33, count: 24, brokenRate: 0 });
  const lora = { rank: 4, alpha: 8, trainTokens: [3, 7] };
  const cfg = testConfig(uniqueId('sft-init'), { sft: { ...tinySft, lora, peakLr: 2e-2, epochs: 2 } });
  const store = testStore(cfg);
  const source = runKey(cfg.run.id, 'data', 'cold_start.jsonl');
  await store.putJsonl(source, examples);
  await selectBackend(cfg.sft.backend);
  const first = await runSft(store, { runId: cfg.run.id, sft: cfg.sft, sourceKey: source }, { log: () => undefined });
  for (const f of ['adapter_config.json', 'adapter_model.safetensors']) await store.getFile(`${sftKeys.adapter(cfg.run.id)}/${f}`, join(dir, f));

  const next = `${cfg.run.id}-next`;
  const continued = await runSft(store, { runId: next, sft: { ...cfg.sft, epochs: 1, initAdapter: dir }, sourceKey: source }, { log: () => undefined });
  const fresh = await runSft(store, { runId: `${cfg.run.id}-fresh`, sft: { ...cfg.sft, epochs: 1 }, sourceKey: source }, { log: () => undefined });
  // the same data order and schedule: only the starting adapter differs
  assert.ok(continued.losses[0]! < fresh.losses[0]!, `continued starts lower: ${continued.losses[0]} vs fresh ${fresh.losses[0]}`);
  assert.ok(continued.losses[0]! < first.losses[0]!, `and below the first run's start: ${continued.losses[0]} vs ${first.losses[0]}`);

  await assert.rejects(runSft(store, { runId: `${cfg.run.id}-bad`, sft: { ...cfg.sft, epochs: 1, lora: { ...cfg.sft.lora!, rank: 2 }, initAdapter: dir }, sourceKey: source }, { log: () => undefined }), /sft\.initAdapter .*: its layout .*"rank":4.* is not sft\.lora's .*"rank":2/);
  await assert.rejects(runSft(store, { runId: `${cfg.run.id}-none`, sft: { ...cfg.sft, epochs: 1, initAdapter: join(dir, 'missing') }, sourceKey: source }, { log: () => undefined }), /sft\.initAdapter: .*missing: no adapter_config\.json/);
});
