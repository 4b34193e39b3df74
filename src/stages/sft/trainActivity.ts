/**
 * The SFT stage's training run (`sftTrain`) as a plain function, callable outside Temporal too (a test's reference
 * run): the base policy (or its LoRA adapter), the trainer over the cold-start dialogues, checkpoints to S3 every
 * `checkpointEvery` steps and a resumed attempt from the newest one, the final HF folder.
 */
import { readFileSync } from 'node:fs';
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { loadChatTokenizer, tokenizeForTraining, type ChatTokenizer } from '../../chat/tokenize';
import { Example } from '../../kernel/schema';
import { resolveFromRoot } from '../../infra/binaries';
import { latestCheckpoint } from '../../storage/checkpoints';
import { SftConfig } from '../../run/config';
import type { ObjectStore } from '../../storage/store';
import { sftKeys } from '../../run/layout';
import { selectBackend } from '../../model/net/backend';
import { parseQwenConfig } from '../../model/net/qwenConfig';
import { QwenModel } from '../../model/net/qwen';
import { hfConfigJson, loadHfCheckpoint } from '../../model/formats/checkpoint';
import { applySpecialTokenInit, SPECIAL_TOKEN_SOURCES } from '../../model/net/specialTokens';
import { SftTrainer, type SftConfig as TrainerConfig, type TokenizedExample, type TrainerState } from './trainer';
import { assignFromWeights, saveTrainingCheckpoint, uploadModelWeights, withCheckpoint } from '../../storage/policyStore';
import { ADAPTER_CONFIG, ADAPTER_WEIGHTS, layoutOf, LoraAdapter } from '../../model/net/lora';
import { applyLoraCheckpoint, isLoraCheckpoint, saveLoraCheckpoint } from '../../storage/loraCheckpoint';
import { loraTrainable } from '../../model/net/trainable';
import type { AdamWState } from '../../model/optim/adamw';
import { cancellationSignal, heartbeat } from '../activityKit';
import { SftTrainInput, SftTrainResult } from './shapes';
import path from 'node:path';

/** The base policy of the config: a fresh model sized to the tokenizer, or an HF checkpoint. */
export function baseModel(sft: SftConfig, tok: ChatTokenizer): QwenModel {
  if (sft.base.kind === 'init') {
    const config = parseQwenConfig({ vocab_size: tok.vocabSize, eos_token_id: tok.special.imEnd, ...sft.base.config });
    if (config.vocab_size < tok.vocabSize) {
      throw ApplicationFailure.nonRetryable(`sft.base.config.vocab_size ${config.vocab_size} is smaller than the tokenizer's ${tok.vocabSize} ids`, 'BadConfig');
    }
    return QwenModel.init(config, sft.base.seed);
  }
  const model = loadHfCheckpoint(resolveFromRoot(sft.base.dir));
  if (sft.base.initSpecialTokens) {
    const ids = new Map<string, number>();
    for (const token of Object.keys(SPECIAL_TOKEN_SOURCES)) {
      const id = tok.tokenToId(token);
      if (id !== undefined) ids.set(token, id);
    }
    applySpecialTokenInit(model, { tokenToId: ids, tokenize: (w: string) => tok.encode(w), seed: sft.seed });
  }
  return model;
}

/** The training data of a run: the dialogues tokenised, those with no assistant token within maxSeqLen left out. */
export async function sftData(store: ObjectStore, input: z.infer<typeof SftTrainInput>, tok: ChatTokenizer, log: (line: string) => void): Promise<{ examples: number; truncated: number; untrainable: number; data: TokenizedExample[] }> {
  const { sft } = input;
  const examples = await store.getJsonl(input.sourceKey, Example);
  if (examples.length === 0) throw ApplicationFailure.nonRetryable(`${input.sourceKey}: no training examples`, 'BadInput');
  const tokenized = examples.map((ex) => tokenizeForTraining(ex, tok));
  const truncated = tokenized.filter((d) => d.ids.length > sft.maxSeqLen + 1).length;
  // A dialogue whose first assistant token lies beyond maxSeqLen would train nothing: leave it out, and say so.
  const data = tokenized.filter((d) => d.lossMask.slice(1, sft.maxSeqLen + 1).includes(1));
  const untrainable = tokenized.length - data.length;
  if (untrainable > 0) log(`${untrainable} example(s) have no assistant token within maxSeqLen ${sft.maxSeqLen}; left out`);
  if (data.length === 0) {
    throw ApplicationFailure.nonRetryable(`sft.maxSeqLen ${sft.maxSeqLen} cuts every example before its first assistant token; raise it`, 'BadConfig');
  }
  return { examples: examples.length, truncated, untrainable, data };
}

/** The adapter a LoRA run starts from (`sft.initAdapter`, else a fresh one seeded with `sft.seed`); none without sft.lora. */
export function startAdapter(model: QwenModel, sft: SftConfig): LoraAdapter | undefined {
  if (!sft.lora) {
    if (sft.initAdapter) throw ApplicationFailure.nonRetryable(`sft.initAdapter ${sft.initAdapter}: needs sft.lora (the adapter's layout)`, 'BadConfig');
    return undefined;
  }
  return sft.initAdapter ? initialAdapter(model, sft.lora, sft.initAdapter) : LoraAdapter.create(model, sft.lora, sft.seed);
}

/** The trainer's settings from the config. */
export function trainerConfig(sft: SftConfig, tok: ChatTokenizer): TrainerConfig {
  return {
    epochs: sft.epochs, microBatch: sft.microBatch, gradAccum: sft.gradAccum, peakLr: sft.peakLr, warmupRatio: sft.warmupRatio,
    minLrRatio: sft.minLrRatio, maxGradNorm: sft.maxGradNorm, weightDecay: sft.weightDecay, maxSeqLen: sft.maxSeqLen, seed: sft.seed, padId: tok.special.pad,
  };
}

export interface SftHooks {
  log?: (line: string) => void;
}

/** The whole training run (also callable outside Temporal, e.g. by a test's reference run). */
export async function runSft(store: ObjectStore, input: z.infer<typeof SftTrainInput>, hooks: SftHooks = {}): Promise<SftTrainResult> {
  const log = hooks.log ?? ((l: string) => console.log(`[sft ${input.runId}] ${l}`));
  const { sft } = input;
  const t0 = Date.now();
  const backend = await selectBackend(sft.backend, log);
  const tok = loadChatTokenizer(resolveFromRoot(sft.tokenizerDir));
  const { examples, truncated, untrainable, data } = await sftData(store, input, tok, log);

  const model = baseModel(sft, tok);
  let optimizer: SftTrainer['optimizer'] | undefined;
  // sft.lora: adapters on the base (rebuilt from the config on every attempt), checkpointed without the weights.
  let adapter: LoraAdapter | undefined;
  try {
    const prefix = sftKeys.checkpoints(input.runId);
    const latest = await latestCheckpoint(store, prefix, log);
    if (latest && isLoraCheckpoint(latest.manifest) !== Boolean(sft.lora)) {
      throw ApplicationFailure.nonRetryable(`${latest.manifestKey}: the checkpoint holds ${sft.lora ? 'full weights' : 'a LoRA adapter'}, but sft.lora is ${sft.lora ? 'set' : 'null'}: a run cannot switch between LoRA and full fine-tuning`, 'BadConfig');
    }
    let restoredOptimizer: AdamWState | undefined;
    if (sft.lora && latest) {
      const applied = await applyLoraCheckpoint(store, latest.manifestKey, latest.manifest, model, { optimizer: true });
      adapter = applied.adapter;
      restoredOptimizer = applied.optimizer;
    } else adapter = startAdapter(model, sft); // none without sft.lora (refuses sft.initAdapter then)
    const trainer = new SftTrainer(model, data, trainerConfig(sft, tok), adapter ? loraTrainable(adapter) : undefined);
    optimizer = trainer.optimizer;
    if (latest && restoredOptimizer) trainer.restore(latest.manifest.state['trainer'] as TrainerState, restoredOptimizer);
    else if (latest) {
      await withCheckpoint(store, latest.manifestKey, ({ manifest, weights, optimizer }) => {
        if (!optimizer) throw new Error(`${latest.manifestKey}: the checkpoint has no optimizer.safetensors`);
        assignFromWeights(model, weights);
        trainer.restore(manifest.state['trainer'] as TrainerState, optimizer);
      });
    }
    if (latest) log(`resumed from checkpoint step ${latest.manifest.step}/${trainer.total}`);
    const resumedFrom = trainer.state.step;
    log(`${examples} examples (${truncated} truncated to ${sft.maxSeqLen} tokens), ${model.numParams()} parameters${adapter ? ` (LoRA: ${adapter.numParams()} trained)` : ''}, ${trainer.total} steps on ${backend}`);
    let trainedTokens = 0;
    const save = async () => {
      if (adapter) await saveLoraCheckpoint(store, prefix, trainer.state.step, adapter, trainer.optimizer, undefined, { trainer: trainer.state }, { config: hfConfigJson(model) });
      else await saveTrainingCheckpoint(store, prefix, trainer.state.step, model, trainer.optimizer, { trainer: trainer.state });
    };
    while (!trainer.done) {
      if (cancellationSignal()?.aborted) throw new Error('cancelled');
      const m = await trainer.step((done, total) => heartbeat({ step: trainer.state.step, total: trainer.total, micro: done, of: total }));
      trainedTokens += m.tokens;
      heartbeat({ step: m.step, total: trainer.total, loss: m.loss });
      if (m.step % 10 === 0 || m.step === trainer.total) log(`step ${m.step}/${trainer.total} loss ${m.loss.toFixed(4)} lr ${m.lr.toExponential(2)} |g| ${m.gradNorm.toFixed(3)} ${m.tokens} tok in ${m.ms} ms`);
      // The step's numbers for the experiment trackers (issue 35): one small object per step, rewritten as it was by a
      // retry that redoes the step from a checkpoint. Tracking must never stop training: a failed write is logged.
      await store.putJson(sftKeys.stepRow(input.runId, m.step), m)
        .catch((e: unknown) => log(`step ${m.step}: its metrics row was not written (${e instanceof Error ? e.message : String(e)})`));
      if (m.step % sft.checkpointEvery === 0 || trainer.done) await save();
      // A step is synchronous tensor work: let the event loop run (heartbeats, polls, cancellation) between steps.
      await new Promise((r) => setImmediate(r));
    }

    // The final policy as an HF checkpoint with its tokenizer: loads in transformers, and in the RL stage.
    const finalPrefix = sftKeys.final(input.runId);
    await store.putJson(`${finalPrefix}/config.json`, hfConfigJson(model));
    for (const f of ['tokenizer.json', 'tokenizer_config.json']) {
      await store.putBytes(`${finalPrefix}/${f}`, readFileSync(path.join(resolveFromRoot(sft.tokenizerDir), f)), 'application/json');
    }
    const modelRef = await uploadModelWeights(store, `${finalPrefix}/model.safetensors`, model);
    if (adapter) {
      const adapterPrefix = sftKeys.adapter(input.runId);
      await store.putJson(`${adapterPrefix}/${ADAPTER_CONFIG}`, adapter.configJson(sft.base.kind === 'hf' ? sft.base.dir : null));
      await store.putBytes(`${adapterPrefix}/${ADAPTER_WEIGHTS}`, adapter.weightsBytes());
    }
    return {
      backend,
      params: model.numParams(),
      examples,
      truncated,
      untrainable,
      steps: trainer.state.step,
      resumedFrom,
      losses: trainer.state.losses,
      trainedTokens,
      seconds: (Date.now() - t0) / 1000,
      finalPrefix,
      model: modelRef,
    };
  } finally {
    // The AdamW moments are as large as the weights, twice: a worker that trains again must not keep them.
    optimizer?.dispose();
    adapter?.dispose();
    model.dispose();
  }
}

/**
 * The adapter a continued SFT starts from (`sft.initAdapter`): a PEFT folder whose layout must be `sft.lora`'s (the
 * same rank, alpha, targets and token rows), so the run trains and saves what its config says.
 */
function initialAdapter(model: QwenModel, lora: NonNullable<SftConfig['lora']>, dir: string): LoraAdapter {
  const where = resolveFromRoot(dir);
  let adapter: LoraAdapter;
  try {
    adapter = LoraAdapter.load(model, where);
  } catch (e) {
    throw ApplicationFailure.nonRetryable(`sft.initAdapter: ${(e as Error).message}`, 'BadConfig');
  }
  const want = layoutOf(lora);
  const got = adapter.layout;
  const key = (l: typeof want) => JSON.stringify({ rank: l.rank, alpha: l.alpha, rslora: l.rslora, targets: typeof l.targets === 'string' ? l.targets : [...l.targets].sort(), trainTokens: [...l.trainTokens].sort((a, b) => a - b) });
  if (key(got) !== key(want)) {
    adapter.dispose();
    throw ApplicationFailure.nonRetryable(`sft.initAdapter ${dir}: its layout ${key(got)} is not sft.lora's ${key(want)}`, 'BadConfig');
  }
  return adapter;
}
