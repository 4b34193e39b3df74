/**
 * Issue 32: cold-start SFT whose training is served by the PyTorch worker (python/cm2_torch/cm2_torch/sft.py) on the
 * run's train queue, on Temporal + MinIO, against the same training run by tfjs in this process: the workflow writes
 * the tokenised data, the step plan and the initial policy first (`sftPrepare`, on the gpu queue), the torch worker
 * trains from them, and the losses, the final weights (and, with LoRA, the PEFT adapter) agree within float tolerance;
 * the format check (TypeScript) reads the policy torch wrote. Full fine-tuning on one rank with the worker SIGKILLed
 * after its first checkpoint (the next attempt resumes from it), LoRA on two torchrun ranks (FSDP2 over gloo).
 * Skipped without the torch environment (scripts/ensure-torch.mjs) unless CM2_REQUIRE_TORCH=1 (CI).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runSft } from '../../src/stages/sft/trainActivity';
import { selectBackend } from '../../src/model/net/backend';
import { startSft } from '../../src/cli/stages';
import { connectClient } from '../../src/infra/temporal';
import { runKey, sftKeys, stageWorkflowId } from '../../src/run/layout';
import { CheckpointManifest } from '../../src/storage/checkpoints';
import { parseSafetensors } from '../../src/model/formats/safetensors';
import { generateDemoDataset } from '../../src/demo/generator';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { startChildWorker, startTorchWorker, writeConfigFile, type ChildWorker } from '../helpers/processes';
import { activityStarts } from '../helpers/activityHistory';
import { torchPython } from '../../scripts/ensure-torch.mjs';

const py = torchPython();
const why = py ? undefined : 'no PyTorch environment (node scripts/ensure-torch.mjs makes it)';
if (!py && process.env['CM2_REQUIRE_TORCH'] === '1') throw new Error(`CM2_REQUIRE_TORCH=1: ${why}`);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const tinySft = {
  backend: 'auto',
  base: { kind: 'init', seed: 5, config: { model_type: 'qwen3', hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8, tie_word_embeddings: true, rope_theta: 10000, max_position_embeddings: 2048 } },
  // 12 dialogues (590 to 1586 tokens; some cut at maxSeqLen), 2 epochs of micro-batches of 2, 2 per step: 6 steps
  epochs: 2, microBatch: 2, gradAccum: 2, maxSeqLen: 900, checkpointEvery: 2, peakLr: 5e-3, warmupRatio: 0.25,
  eval: { prompts: 2, maxNewTokens: 8 },
};

/** rms |a - b| / rms |b| over every tensor of two safetensors files (the same names and shapes). */
function relDiff(a: Uint8Array, b: Uint8Array): number {
  const ta = parseSafetensors(a).tensors;
  const tb = parseSafetensors(b).tensors;
  assert.deepEqual([...ta.keys()].sort(), [...tb.keys()].sort(), 'the same tensors');
  let diff = 0;
  let size = 0;
  for (const [name, t] of tb) {
    const u = ta.get(name)!;
    assert.deepEqual(u.shape, t.shape, name);
    for (let j = 0; j < t.data.length; j++) {
      diff += (u.data[j]! - t.data[j]!) ** 2;
      size += t.data[j]! ** 2;
    }
  }
  return Math.sqrt(diff / size);
}

for (const { ranks, lora } of [{ ranks: 1, lora: null }, { ranks: 2, lora: { rank: 4, alpha: 8, trainTokens: [3, 7] } }]) {
  test(`SFT trained by the PyTorch worker (${ranks} rank${ranks > 1 ? 's' : ''}${lora ? ', LoRA through PEFT' : ', killed after its first checkpoint'}) from sftPrepare's files: the tfjs run's losses and weights within float tolerance`, { skip: why, timeout: 15 * 60_000 }, async () => {
    const cfg = testConfig(uniqueId(`ts-${ranks}`), { sft: { ...tinySft, lora, ...(lora ? { peakLr: 2e-2 } : {}) }, temporal: { activity: { heartbeatTimeout: '10s', maxRetryInterval: '1s' } } });
    cfg.temporal.taskQueues.train = `train-${cfg.run.id.replace(/[^a-z0-9]/gi, '').slice(-12)}`;
    const store = testStore(cfg);
    const examples = generateDemoDataset({ seed: 31, count: 12, brokenRate: 0 });
    await store.putJsonl(runKey(cfg.run.id, 'data', 'cold_start.jsonl'), examples);
    await store.putJsonl(runKey(cfg.run.id, 'data', 'rl.jsonl'), examples.slice(0, 4));

    // The reference: the same training by tfjs, in this process.
    const refRun = `${cfg.run.id}-ref`;
    await store.putJsonl(runKey(refRun, 'data', 'cold_start.jsonl'), examples);
    await selectBackend('auto');
    const reference = await runSft(store, { runId: refRun, sft: cfg.sft, sourceKey: runKey(refRun, 'data', 'cold_start.jsonl') }, { log: () => undefined });
    assert.equal(reference.steps, 6);

    const file = writeConfigFile(cfg);
    const workers: ChildWorker[] = [await startChildWorker(file, 'workflows,api,gpu'), await startTorchWorker(py!, file, {}, { ranks })];
    try {
      const handle = await startSft(await connectClient(cfg), cfg);
      if (!lora) {
        // SIGKILL the torch worker once its first checkpoint is complete; the retried attempt resumes from it
        const prefix = `${sftKeys.checkpoints(cfg.run.id)}/`;
        while (!(await store.list(prefix)).some((k) => k.endsWith('manifest.json'))) await sleep(50);
        await workers[1]!.kill('SIGKILL');
        workers[1] = await startTorchWorker(py!, file, {}, { ranks });
      }
      const report = await handle.result();
      const log = workers[1]!.output();
      const pid = /cm2_torch worker polling .* pid (\d+)\)/.exec(log)?.[1];
      const acts = await activityStarts(cfg, stageWorkflowId(cfg.run.id, 'sft'));
      const prepare = acts.filter((x) => x.type === 'sftPrepare');
      assert.equal(prepare.length, 1);
      assert.equal(prepare[0]!.taskQueue, cfg.temporal.taskQueues.gpu, 'sftPrepare on the gpu queue');
      const trains = acts.filter((x) => x.type === 'sftTrain');
      assert.ok(trains.every((x) => x.taskQueue === cfg.temporal.taskQueues.train));
      assert.ok(trains.at(-1)!.identity.startsWith(`${pid}@`), `sftTrain ran on ${trains.at(-1)!.identity}, not the torch worker ${pid}`);
      assert.equal(trains.at(-1)!.input['prepared'], sftKeys.prepared(cfg.run.id));
      assert.match(report.train.backend, /^torch-cpu/);
      if (!lora) assert.ok(report.train.resumedFrom >= 2 && report.train.resumedFrom < 6, `resumed from step ${report.train.resumedFrom}`);

      // The same run: the same steps and examples; losses within float tolerance (the first step exactly the same
      // computation from the same weights; later ones after updates that agree within float tolerance).
      assert.equal(report.train.steps, reference.steps);
      assert.deepEqual([report.train.examples, report.train.truncated, report.train.untrainable], [reference.examples, reference.truncated, reference.untrainable]);
      assert.ok(reference.truncated > 0, 'a dialogue is cut at maxSeqLen');
      for (const [i, l] of report.train.losses.entries()) {
        const want = reference.losses[i]!;
        assert.ok(Math.abs(l - want) <= (i === 0 ? 1e-5 : 1e-3) * Math.abs(want), `step ${i + 1} loss: torch ${l}, tfjs ${want}`);
      }
      const weights = async (runId: string) => store.getVerified((await store.ref(`${sftKeys.final(runId)}/model.safetensors`))!);
      const rel = relDiff(await weights(cfg.run.id), await weights(refRun));
      console.log(`${cfg.run.id}: final weights rms |torch - tfjs| / rms |w| = ${rel.toExponential(2)}`);
      assert.ok(rel < 1e-4, `final weights differ by ${rel.toExponential(2)} (rms, relative)`);
      if (lora) {
        const adapter = async (runId: string) => store.getVerified((await store.ref(`${sftKeys.adapter(runId)}/adapter_model.safetensors`))!);
        const arel = relDiff(await adapter(cfg.run.id), await adapter(refRun));
        assert.ok(arel < 1e-3, `adapters differ by ${arel.toExponential(2)} (rms, relative)`);
        const manifests = (await store.list(`${sftKeys.checkpoints(cfg.run.id)}/`)).filter((k) => k.endsWith('manifest.json'));
        const m = await store.getJson(manifests[0]!, CheckpointManifest);
        assert.ok(m.files['adapter_model.safetensors'] && !m.files['model.safetensors'], 'LoRA checkpoints hold the adapter, not the weights');
      }
      // the format check (tfjs, gpu queue) loaded the policy torch wrote
      assert.equal(report.sft?.prompts, 2);
    } finally {
      await Promise.all(workers.map((w) => w.kill('SIGTERM')));
    }
  });
}
