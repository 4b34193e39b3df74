/**
 * Cold-start SFT (spec §4.2–4.3) as a resumable loop: loss on assistant tokens only, AdamW, linear warmup + cosine,
 * global-norm clipping, gradient accumulation. Everything that decides the next update — weights, optimizer
 * moments, step, data cursor, RNG state — is in `TrainerState` and the model, so a run resumed from a checkpoint
 * ends with exactly the weights of an uninterrupted run with the same seed (tfjs on cpu/wasm is deterministic).
 *
 * No I/O here: the caller (the SFT activity) loads data, writes checkpoints and heartbeats through `hooks`.
 */
import type { SftStepRow } from '../../run/layout';
import * as tf from '@tensorflow/tfjs';
import { AdamW, type AdamWState } from '../../model/optim/adamw';
import { lrAt, warmupStepsOf } from '../../model/optim/schedule';
import { Rng, takeBatch, type DataCursor } from '../../kernel/dataOrder';
import { accumulateGradients, yieldToEventLoop } from '../../model/optim/accumulate';
import { applyUpdate, fullTrainable, type TrainableSet } from '../../model/net/trainable';

/** What the trainer needs from a model. */
export interface TrainableModel {
  /** Parameters by (HF) name. */
  namedVariables(): Map<string, tf.Variable>;
  /** ParamLayout (QwenModel): how the variables are held against HF's layout, for the optimizer's checkpoints */
  hfTransposed?(name: string): boolean;
  /** Mean cross-entropy of `targets` over positions where `mask` is 1. Shapes [B, T]. */
  loss(ids: number[][], targets: number[][], mask: number[][]): tf.Scalar;
}

/** A tokenised training example: ids and a mask that is 1 exactly on assistant tokens. */
export interface TokenizedExample {
  ids: number[];
  lossMask: number[];
}

export interface SftConfig {
  epochs: number;
  microBatch: number;
  gradAccum: number;
  peakLr: number;
  warmupRatio: number;
  minLrRatio: number;
  maxGradNorm: number;
  weightDecay: number;
  /** Sequences are truncated to this many tokens (reference `cutoff_len`). */
  maxSeqLen: number;
  seed: number;
  padId: number;
}

export interface TrainerState {
  step: number;
  cursor: DataCursor;
  rngState: number;
  /** Loss per optimizer step so far (the loss curve). */
  losses: number[];
}

/** What a step reports: the row the trackers get (src/run/layout.ts). */
export type StepMetrics = SftStepRow;

/** Optimizer steps of a whole run. */
export function totalSteps(examples: number, cfg: Pick<SftConfig, 'epochs' | 'microBatch' | 'gradAccum'>): number {
  return Math.ceil((examples * cfg.epochs) / (cfg.microBatch * cfg.gradAccum));
}

/** Input ids, next-token targets and the target mask of a micro-batch, right-padded to its longest sequence. */
export function collate(batch: readonly TokenizedExample[], maxSeqLen: number, padId: number): { ids: number[][]; targets: number[][]; mask: number[][]; tokens: number } {
  const seqs = batch.map((ex) => ({ ids: ex.ids.slice(0, maxSeqLen + 1), mask: ex.lossMask.slice(0, maxSeqLen + 1) }));
  const len = Math.max(1, ...seqs.map((s) => s.ids.length - 1));
  const ids: number[][] = [];
  const targets: number[][] = [];
  const mask: number[][] = [];
  let tokens = 0;
  for (const s of seqs) {
    const row: number[] = [];
    const tgt: number[] = [];
    const m: number[] = [];
    for (let t = 0; t < len; t++) {
      const here = t < s.ids.length - 1;
      row.push(here ? s.ids[t]! : padId);
      tgt.push(here ? s.ids[t + 1]! : padId);
      // The target at position t is token t+1: it is trained when token t+1 is an assistant token.
      const on = here && s.mask[t + 1] === 1 ? 1 : 0;
      m.push(on);
      tokens += on;
    }
    ids.push(row);
    targets.push(tgt);
    mask.push(m);
  }
  return { ids, targets, mask, tokens };
}

/** One optimizer step's share of the data: its learning rate, its micro-batches (example indices), the cursor after it. */
export interface StepPlan {
  lr: number;
  micro: number[][];
  cursor: DataCursor;
}

/**
 * Step `step` of a run over `dataLength` examples that starts at `cursor` (what every trainer of the run follows: the
 * tfjs one here, a PyTorch worker through the plan file `sftPrepare` writes, src/stages/sft/prepareActivity.ts).
 */
export function planStep(cfg: SftConfig, dataLength: number, step: number, cursor: DataCursor): StepPlan {
  const total = totalSteps(dataLength, cfg);
  const lr = lrAt(step, { peakLr: cfg.peakLr, totalSteps: total, warmupSteps: warmupStepsOf(total, cfg.warmupRatio), minRatio: cfg.minLrRatio });
  const micro: number[][] = [];
  for (let k = 0; k < cfg.gradAccum; k++) {
    const { indices, next } = takeBatch(cursor, cfg.microBatch, dataLength, cfg.seed, cfg.epochs);
    cursor = next;
    if (indices.length === 0) break;
    micro.push(indices);
  }
  return { lr, micro, cursor };
}

/** Every step of a run, from the start. */
export function planRun(cfg: SftConfig, dataLength: number): StepPlan[] {
  const steps: StepPlan[] = [];
  let cursor: DataCursor = { epoch: 0, index: 0 };
  for (let s = 0; s < totalSteps(dataLength, cfg); s++) {
    const p = planStep(cfg, dataLength, s, cursor);
    steps.push(p);
    cursor = p.cursor;
  }
  return steps;
}

/** The loss mask as spans of 1s. */
export function maskSpans(mask: readonly number[]): [number, number][] {
  const out: [number, number][] = [];
  for (let i = 0; i < mask.length; i++) {
    if (mask[i] !== 1) continue;
    const start = i;
    while (i < mask.length && mask[i] === 1) i++;
    out.push([start, i]);
  }
  return out;
}

/** A line of the prepared data.jsonl (src/stages/sft/prepareActivity.ts). */
export function dataRow(ex: TokenizedExample): { ids: number[]; trained: [number, number][] } {
  return { ids: ex.ids, trained: maskSpans(ex.lossMask) };
}

export class SftTrainer {
  readonly optimizer: AdamW;
  state: TrainerState;
  readonly total: number;
  /** what is trained: every weight (default) or LoRA adapters (src/model/net/trainable.ts) */
  readonly trainable: TrainableSet;

  constructor(
    private readonly model: TrainableModel,
    private readonly data: readonly TokenizedExample[],
    readonly cfg: SftConfig,
    trainable?: TrainableSet,
  ) {
    this.trainable = trainable ?? fullTrainable(model);
    this.optimizer = new AdamW(this.trainable.params, { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: cfg.weightDecay }, { layout: this.trainable.layout });
    this.total = totalSteps(data.length, cfg);
    this.state = { step: 0, cursor: { epoch: 0, index: 0 }, rngState: new Rng(cfg.seed).state, losses: [] };
  }

  /** Continue from a checkpoint (model weights are restored by the caller; the optimizer file in either layout, see AdamW.load). */
  restore(state: TrainerState, optimizer: AdamWState): void {
    this.state = structuredClone(state);
    this.optimizer.load(optimizer);
  }

  get done(): boolean {
    return this.state.step >= this.total;
  }

  /**
   * One optimizer step (gradAccum micro-batches). Yields to the event loop after each micro-batch (and calls `onMicro`),
   * so that a worker keeps heartbeating and polling while a large model trains: one micro-batch of a real model is
   * seconds to tens of seconds of synchronous tensor work.
   */
  async step(onMicro?: (done: number, total: number) => void): Promise<StepMetrics> {
    const t0 = Date.now();
    const { cfg } = this;
    const plan = planStep(cfg, this.data.length, this.state.step, this.state.cursor);
    const { lr, cursor } = plan;
    const sums = new Map<string, tf.Tensor>();
    let lossSum = 0;
    let micro = 0;
    let tokens = 0;
    for (const [k, indices] of plan.micro.entries()) {
      const batch = collate(indices.map((i) => this.data[i]!), cfg.maxSeqLen, cfg.padId);
      if (batch.tokens === 0) continue;
      const { value, grads } = tf.variableGrads(() => this.model.loss(batch.ids, batch.targets, batch.mask), [...this.trainable.tape.values()]);
      lossSum += value.dataSync()[0]!;
      value.dispose();
      accumulateGradients(sums, this.trainable.tape, grads);
      micro++;
      tokens += batch.tokens;
      onMicro?.(k + 1, cfg.gradAccum);
      await yieldToEventLoop();
    }
    let gradNorm = 0;
    if (micro > 0) {
      // Mean over micro-batches, as LLaMA-Factory (each micro-batch loss is a mean over its tokens).
      const mean = new Map([...sums].map(([k, g]) => [k, tf.tidy(() => tf.div(g, micro))]));
      for (const g of sums.values()) g.dispose();
      gradNorm = applyUpdate(this.trainable, mean, (g) => this.optimizer.apply(g, lr, cfg.maxGradNorm));
    } else for (const g of sums.values()) g.dispose();
    const loss = micro > 0 ? lossSum / micro : 0;
    this.state = { ...this.state, step: this.state.step + 1, cursor, losses: [...this.state.losses, loss] };
    return { step: this.state.step, loss, lr, gradNorm, tokens, ms: Date.now() - t0 };
  }
}
