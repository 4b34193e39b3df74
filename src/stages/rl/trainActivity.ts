/**
 * The `rlTrain` activity's body as a plain function (`activities.ts` wraps it: input parsing,
 * exactly-once, heap guard): read the batch and its advantages, open the policy and its trainer, apply the update,
 * save the step's checkpoint. I/O through the object store and the worker's policy cache handed in.
 *
 * Exactly once: the caller's `once` returns a recorded result; when the step's manifest exists but its result does not
 * (an attempt died between the two), the result is the one saved in the manifest (`reused`). Otherwise step n−1 is
 * loaded (weights, AdamW moments, the LoRA adapter), one update is applied, and step n is written, manifest last. The
 * policy is taken out of the cache before it is mutated, so a failed attempt never leaves a half-updated model there.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { z } from 'zod';
import type { ChatTokenizer } from '../../chat/tokenize';
import { hfConfigJson } from '../../model/formats/checkpoint';
import { LoraAdapter } from '../../model/net/lora';
import type { QwenModel } from '../../model/net/qwen';
import { loraTrainable } from '../../model/net/trainable';
import { policyKey, rlKeys, type PolicyRef } from '../../run/layout';
import { CheckpointManifest, stepFolder } from '../../storage/checkpoints';
import { saveLoraCheckpoint } from '../../storage/loraCheckpoint';
import { BadPolicyError, loadPolicy, saveTrainingCheckpoint, type PolicyCache, type RestoredLora } from '../../storage/policyStore';
import type { ObjectStore } from '../../storage/store';
import { joinAdvantages, type RolloutAdvantages } from './algo/advantages';
import { GrpoTrainer, type GrpoSequence, type GrpoStepConfig } from './grpo';
import { AdvantagesFile, RolloutFile, type RlTrainInput, type RlTrainResult } from './shapes';
import type { Rollout } from './rolloutSchema';

type TrainInput = z.infer<typeof RlTrainInput>;

export interface TrainContext {
  store: ObjectStore;
  policies: PolicyCache;
  tokenizer: ChatTokenizer;
  /** Called before and after each micro-batch (the activity's heartbeat). */
  onMicro?: (done: number, total: number) => void;
  /** Called as each phase before the update ends (batch read, policies loaded): the heartbeat between them. */
  onPhase?: (phase: string) => void;
}

/** Where step `step`'s checkpoint manifest is. */
export const trainManifestKey = (runId: string, step: number): string => `${stepFolder(rlKeys.checkpoints(runId), step)}/manifest.json`;

/** The update's settings: the live hyperparameters (`hp`, which `cm2 rl set` changes) and the run's fixed ones. */
export function updateSettings(input: Pick<TrainInput, 'rl' | 'hp'>, padId: number): GrpoStepConfig {
  const { rl, hp } = input;
  return {
    lr: hp.lr,
    klCoef: hp.klCoef,
    clipLow: rl.clipLow,
    clipHigh: rl.clipHigh,
    ...(rl.clipRatioC !== null ? { clipRatioC: rl.clipRatioC } : {}),
    maxGradNorm: rl.maxGradNorm,
    microBatch: rl.microBatch,
    // absent from inputs recorded before it existed
    ...(rl.microBatchTokens ? { microBatchTokens: rl.microBatchTokens } : {}),
    padId,
    // The update's policy is the one that sampled: softmax(logits / T) at the rollout temperature.
    temperature: rl.rollout.temperature,
  };
}

/**
 * The advantage rows of a batch: `rows` keyed by rollout id; files written before the rows existed hold one array per
 * rollout in batch order, given ids here by position (a count that differs is then caught by the join).
 */
export async function readAdvantageRows(store: ObjectStore, key: string, rollouts: readonly Rollout[]): Promise<RolloutAdvantages[]> {
  const file = await store.getJson(key, AdvantagesFile);
  return file.rows ?? (file.advantages ?? []).map((advantages, i) => ({ id: rollouts[i]?.id ?? `#${i} (positional)`, advantages }));
}

/** The batch as the trainer takes it: every rollout's tokens, its spans with their advantages, its sampling log-probabilities. */
async function readBatch(store: ObjectStore, input: TrainInput): Promise<GrpoSequence[]> {
  const rollouts = (await store.getJson(input.rolloutsKey, RolloutFile)).rollouts;
  // Read outside the try: an S3 error here (MinIO restarting) is retried like any other, never taken for bad input.
  const rows = await readAdvantageRows(store, input.advantagesKey, rollouts);
  let spans;
  try {
    spans = joinAdvantages(rollouts, rows, `${input.advantagesKey} × ${input.rolloutsKey}`);
  } catch (e) {
    // A misaligned batch stays misaligned on every retry.
    throw e instanceof ApplicationFailure ? e : ApplicationFailure.nonRetryable((e as Error).message, 'BadInput');
  }
  return rollouts.map((r, i) => ({ tokens: r.tokens, spans: spans[i]!, sampled: r.logprobs }));
}

interface OpenedPolicy {
  model: QwenModel;
  trainer: GrpoTrainer;
  /** The LoRA adapter and the base it applies to (rl.lora), or undefined for full fine-tuning. */
  lora?: RestoredLora;
}

/**
 * The policy to update and its trainer: a checkpoint with its moments (and adapter) restored, or an HF policy (the
 * SFT output) with a fresh trainer (and a fresh adapter when rl.lora is set). A checkpoint that holds what rl.lora
 * does not say (an adapter, or full weights) is refused: a run cannot switch between LoRA and full fine-tuning.
 */
async function openPolicy(ctx: TrainContext, input: TrainInput, cached: QwenModel | undefined, reference: QwenModel | undefined): Promise<OpenedPolicy> {
  const { rl } = input;
  const trainerFor = (model: QwenModel, lora?: RestoredLora) => new GrpoTrainer(model, reference, rl.weightDecay, lora ? loraTrainable(lora.adapter) : undefined);
  if (input.policy.kind === 'ckpt') {
    cached?.dispose();
    const from = input.policy.manifestKey;
    let opened: { trainer: GrpoTrainer; lora?: RestoredLora } | undefined;
    const model = await loadPolicy(ctx.store, input.policy, (m, optimizer, restored) => {
      if (Boolean(restored) !== Boolean(rl.lora)) {
        restored?.adapter.dispose();
        throw new BadPolicyError(`${from}: the checkpoint holds ${restored ? 'a LoRA adapter' : 'full weights'}, but rl.lora is ${rl.lora ? 'set' : 'null'}: a run cannot switch between LoRA and full fine-tuning`);
      }
      const trainer = trainerFor(m, restored);
      trainer.restore(optimizer);
      opened = { trainer, ...(restored ? { lora: restored } : {}) };
    });
    return { model, ...(opened ?? { trainer: trainerFor(model) }) };
  }
  const model = cached ?? (await loadPolicy(ctx.store, input.policy));
  const lora = rl.lora ? { adapter: LoraAdapter.create(model, rl.lora, rl.seed), base: input.policy } : undefined;
  return { model, trainer: trainerFor(model, lora), ...(lora ? { lora } : {}) };
}

/** One GRPO update from step−1's policy; writes step's checkpoint and returns what it did. */
export async function trainStep(ctx: TrainContext, input: TrainInput): Promise<RlTrainResult> {
  const { store } = ctx;
  const prefix = rlKeys.checkpoints(input.runId);
  const manifestKey = trainManifestKey(input.runId, input.step);
  if (await store.exists(manifestKey)) {
    // The update was applied and saved by an earlier attempt that died before recording its result.
    const manifest = await store.getJson(manifestKey, CheckpointManifest);
    const saved = manifest.state['train'] as RlTrainResult | undefined;
    if (saved) return { ...saved, reused: true };
  }
  const t0 = Date.now();
  const batch = await readBatch(store, input);
  ctx.onPhase?.('batch read');
  // Take the policy out of the cache before the reference is looked up: it is about to be mutated, and at the first
  // step it is the reference's own policy (the SFT output), which must then be loaded apart.
  const cached = ctx.policies.take(input.policy);
  const reference = input.hp.klCoef > 0 ? await ctx.policies.get(input.reference) : undefined;
  ctx.onPhase?.('reference loaded');
  // One-step-off: the behaviour policy's log-probabilities for the importance ratio (never the policy itself).
  const behaviour = input.behaviour && policyKey(input.behaviour) !== policyKey(input.policy) ? await ctx.policies.get(input.behaviour) : undefined;
  const { model, trainer, lora } = await openPolicy(ctx, input, cached, reference);
  ctx.onPhase?.('policy opened');
  let metrics;
  try {
    metrics = await trainer.step(batch, updateSettings(input, ctx.tokenizer.special.pad), ctx.onMicro, behaviour);
  } catch (e) {
    trainer.optimizer.dispose();
    lora?.adapter.dispose();
    model.dispose();
    throw e;
  }
  const trainSeconds = (Date.now() - t0) / 1000;
  ctx.onPhase?.('saving the checkpoint');
  const t1 = Date.now();
  const policy: PolicyRef = { kind: 'ckpt', manifestKey, step: input.step };
  const done = {
    policy,
    step: input.step,
    reused: false,
    loss: metrics.loss,
    pgLoss: metrics.pgLoss,
    kl: metrics.kl,
    clipFrac: metrics.clipFrac,
    gradNorm: metrics.gradNorm,
    policyTokens: metrics.policyTokens,
    ...(metrics.logprobGap ? { logprobGap: metrics.logprobGap } : {}),
    trainSeconds,
  };
  // The manifest carries the result (with the weights' hash, known once they are written) for a retry that finds it.
  const state = ({ weightsSha256 }: { weightsSha256: string }) => ({ ...input.state, hp: input.hp, train: { ...done, checkpointSeconds: 0, weightsSha256 } });
  const config = hfConfigJson(model);
  let saved;
  try {
    saved = lora
      ? await saveLoraCheckpoint(store, prefix, input.step, lora.adapter, trainer.optimizer, lora.base, state, { config })
      : await saveTrainingCheckpoint(store, prefix, input.step, model, trainer.optimizer, state, { config });
  } finally {
    // The moments live on in the checkpoint (the next step restores them into a new trainer): free them here, or every
    // step leaks them and the optimizer's graph sessions (~5 MiB RSS a step: bench/soak.ts). The adapter too: the
    // model keeps its merged weights for the next rollouts.
    trainer.optimizer.dispose();
    lora?.adapter.dispose();
  }
  // The updated policy is the next rollout's policy: keep it.
  ctx.policies.put(policy, model);
  return { ...done, checkpointSeconds: (Date.now() - t1) / 1000, weightsSha256: saved.weightsSha256 };
}
