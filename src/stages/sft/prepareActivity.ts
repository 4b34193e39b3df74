/**
 * What a trainer in another language needs to run a cold-start SFT run (issue 32: `sftTrain` served by PyTorch workers
 * on the `train` queue), written to S3 by `sftPrepare` on a gpu worker, so that the method — the chat template and its
 * loss mask, the data order, the learning-rate schedule, the base's special-token rows, the adapter's initialisation —
 * stays in TypeScript and the trainer only executes updates:
 *
 *   <prefix>/data.jsonl     one training example per line: token ids and the spans [start, end) of trained (assistant)
 *                           tokens, after the examples with no assistant token within maxSeqLen were left out
 *   <prefix>/plan.json      the run's settings and every optimizer step: its learning rate, its micro-batches (indices
 *                           into data.jsonl) and the data cursor after it (the checkpoint state the tfjs trainer writes)
 *   <prefix>/initial/       the policy step 0 starts from, as an HF folder (config.json, model.safetensors, tokenizer
 *                           files): the base with its special-token rows initialised, or the fresh model of `base.kind: init`
 *   <prefix>/adapter/       with sft.lora: the adapter step 0 starts from, in PEFT's format
 *
 * The tfjs trainer computes the same from the same functions (trainer.ts `planStep`), so a run may change engines at a
 * checkpoint. Deterministic: a retried activity writes the same files.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import type { ObjectStore } from '../../storage/store';
import { loadChatTokenizer } from '../../chat/tokenize';
import { resolveFromRoot } from '../../infra/binaries';
import { hfConfigJson } from '../../model/formats/checkpoint';
import { ADAPTER_CONFIG, ADAPTER_WEIGHTS } from '../../model/net/lora';
import { uploadModelWeights } from '../../storage/policyStore';
import { sftKeys } from '../../run/layout';
import { Rng } from '../../kernel/dataOrder';
import { dataRow, planRun } from './trainer';
import { baseModel, sftData, startAdapter, trainerConfig } from './trainActivity';
import { SftPlanFile, type SftPrepareResult, type SftTrainInput } from './shapes';

/** Writes the prepared files (skipped when plan.json is there: written last, it means the rest is complete). */
export async function prepareSft(store: ObjectStore, input: z.infer<typeof SftTrainInput>, log: (line: string) => void): Promise<SftPrepareResult> {
  const prefix = sftKeys.prepared(input.runId);
  const planKey = `${prefix}/plan.json`;
  if (await store.exists(planKey)) {
    const plan = await store.getJson(planKey, SftPlanFile);
    return { prefix, steps: plan.steps.length, dataRows: plan.dataRows, reused: true };
  }
  const { sft } = input;
  const tok = loadChatTokenizer(resolveFromRoot(sft.tokenizerDir));
  const { examples, truncated, untrainable, data } = await sftData(store, input, tok, log);
  const cfg = trainerConfig(sft, tok);
  const model = baseModel(sft, tok);
  const adapter = startAdapter(model, sft);
  try {
    const initial = `${prefix}/initial`;
    await store.putJson(`${initial}/config.json`, hfConfigJson(model));
    for (const f of ['tokenizer.json', 'tokenizer_config.json']) {
      await store.putBytes(`${initial}/${f}`, readFileSync(path.join(resolveFromRoot(sft.tokenizerDir), f)), 'application/json');
    }
    await uploadModelWeights(store, `${initial}/model.safetensors`, model);
    if (adapter) {
      await store.putJson(`${prefix}/adapter/${ADAPTER_CONFIG}`, adapter.configJson(sft.base.kind === 'hf' ? sft.base.dir : null));
      await store.putBytes(`${prefix}/adapter/${ADAPTER_WEIGHTS}`, adapter.weightsBytes());
    }
  } finally {
    adapter?.dispose();
    model.dispose();
  }
  await store.putJsonl(`${prefix}/data.jsonl`, data.map(dataRow));
  const steps = planRun(cfg, data.length);
  const plan: SftPlanFile = {
    format: 'cm2-sft-plan/1', runId: input.runId, examples, truncated, untrainable, dataRows: data.length, maxSeqLen: sft.maxSeqLen, padId: cfg.padId,
    maxGradNorm: sft.maxGradNorm, weightDecay: sft.weightDecay, checkpointEvery: sft.checkpointEvery, rngState: new Rng(sft.seed).state, lora: Boolean(sft.lora), steps,
  };
  await store.putJson(planKey, plan);
  log(`prepared ${data.length} examples and ${steps.length} steps under ${prefix}`);
  return { prefix, steps: steps.length, dataRows: data.length, reused: false };
}
