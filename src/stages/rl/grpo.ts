/**
 * GRPO policy update (spec §6.8): the trainer around the loss of `./algo/loss.ts` (micro-batches, packing, gradient
 * accumulation, clipping, AdamW).
 *
 * Decisions:
 * - Token-mean is exact over the whole update batch: each micro-batch contributes Σ/N with N the policy-token
 *   count of the whole batch, so gradient accumulation does not change the loss (VeRL scales per micro-batch mean
 *   by the micro-batch share of sequences, which only approximates this).
 * - With one update per RL step (ppo_epochs 1, one mini-batch; the reference's setting) the policy that sampled the
 *   rollouts is the policy being updated, so `old` = stop-gradient(logp) of the same forward pass and the ratio is
 *   exactly 1 (its gradient is ∇logp). The sampler's own log-probabilities are kept in the rollouts for diagnostics
 *   (`logprobGap` metric) rather than used as `old`, which would turn float differences between the KV-cache
 *   sampling path and the training path into spurious off-policy corrections.
 * - One-step-off asynchronous RL (issue 16) is off-policy by one update: `old` is then the behaviour policy's
 *   log-probabilities recomputed on the training path (a forward pass of its checkpoint), for the same reason.
 */
import * as tf from '@tensorflow/tfjs';
import { AdamW, type AdamWState } from '../../model/optim/adamw';
import { accumulateGradients, yieldToEventLoop } from '../../model/optim/accumulate';
import { applyUpdate, fullTrainable, type TrainableSet } from '../../model/net/trainable';
import type { PackedRows } from '../../model/net/forwardTypes';
import { policyLossTerms, type GrpoLossConfig } from './algo/loss';

/** What the update needs of a policy (QwenModel satisfies it). */
export interface PolicyModel {
  namedVariables(): Map<string, tf.Variable>;
  /** ParamLayout (QwenModel): how the variables are held against HF's layout, for the optimizer's checkpoints */
  hfTransposed?(name: string): boolean;
  tokenLogprobs(ids: number[][], targets: number[][], keyMask?: number[][], temperature?: number, pack?: PackedRows): tf.Tensor2D;
}

/** One training sequence: tokens, policy-token spans with their advantage. */
export interface GrpoSequence {
  tokens: readonly number[];
  /** [start, end) spans of policy tokens in `tokens`, each with the advantage of all its tokens. */
  spans: readonly { start: number; end: number; advantage: number }[];
  /** The sampler's log-probability of each span token, spans in order (for `logprobGap`; left out when absent or misaligned). */
  sampled?: readonly number[];
}

export interface GrpoStepConfig extends GrpoLossConfig {
  lr: number;
  maxGradNorm: number;
  microBatch: number;
  /**
   * At most this many positions (rows × padded row length, after packing) per forward/backward, a bound on the
   * update's memory: a micro-batch takes sequences in order while it stays within `microBatch` sequences and this
   * budget; a sequence over the budget alone gets a micro-batch of its own. Absent: `microBatch` alone decides.
   */
  microBatchTokens?: number;
  padId: number;
  /** The rollouts' sampling temperature: log-probabilities (policy and reference) are of softmax(logits / T). Default 1. */
  temperature?: number;
  /**
   * Sequences of a micro-batch that share a prompt are packed into one row, the prompt computed once (`packGrpo`);
   * default true. The same loss and gradients as one row each, up to float rounding.
   */
  pack?: boolean;
}

export interface GrpoStepMetrics {
  loss: number;
  pgLoss: number;
  kl: number;
  clipFrac: number;
  gradNorm: number;
  policyTokens: number;
  sequences: number;
  /** Sequences with a non-zero advantage somewhere (the ones that carry gradient). */
  activeSequences: number;
  /**
   * |sampler log p − trainer log p| over the sampled tokens, at the sampling temperature (trainer = the policy that
   * sampled: the updated one, or the behaviour policy one step off): how far the KV-cache sampling path and the
   * training path disagree. Absent when no sequence brought its sampler log-probabilities.
   */
  logprobGap?: LogprobGap;
  ms: number;
}

export interface LogprobGap {
  mean: number;
  max: number;
  tokens: number;
}

/** Inputs of position t predict token t+1: ids = tokens[0..n-2], targets = tokens[1..n-1]; target mask from spans. */
export function collateGrpo(batch: readonly GrpoSequence[], padId: number): { ids: number[][]; targets: number[][]; mask: number[][]; adv: number[][]; tokens: number; sampled: (number | undefined)[][] } {
  const T = Math.max(1, ...batch.map((s) => s.tokens.length - 1));
  const ids: number[][] = [];
  const targets: number[][] = [];
  const mask: number[][] = [];
  const adv: number[][] = [];
  const sampled: (number | undefined)[][] = [];
  let tokens = 0;
  for (const seq of batch) {
    const n = seq.tokens.length;
    const row = Array<number>(T).fill(padId);
    const tgt = Array<number>(T).fill(padId);
    const m = Array<number>(T).fill(0);
    const a = Array<number>(T).fill(0);
    const s = Array<number | undefined>(T).fill(undefined);
    const own = seq.sampled && seq.sampled.length === seq.spans.reduce((x, sp) => x + Math.max(0, sp.end - sp.start), 0) ? seq.sampled : undefined;
    let j = 0;
    for (let t = 0; t < n - 1; t++) {
      row[t] = seq.tokens[t]!;
      tgt[t] = seq.tokens[t + 1]!;
    }
    for (const span of seq.spans) {
      // Token k (k ≥ 1) is predicted at input position k − 1.
      for (let k = span.start; k < span.end; k++, j++) {
        if (k < 1 || k >= n) continue;
        m[k - 1] = 1;
        a[k - 1] = span.advantage;
        if (own) s[k - 1] = own[j];
        tokens++;
      }
    }
    sampled.push(s);
    ids.push(row);
    targets.push(tgt);
    mask.push(m);
    adv.push(a);
  }
  return { ids, targets, mask, adv, tokens, sampled };
}

/** Adds |trainer − sampler| over the positions whose sampler log-probability is known. `trainer` is [B, T] row-major. */
function addGap(gap: { sum: number; max: number; tokens: number }, trainer: ArrayLike<number>, sampled: readonly (number | undefined)[][], T: number): void {
  sampled.forEach((row, b) => row.forEach((s, t) => {
    if (s === undefined) return;
    const d = Math.abs(trainer[b * T + t]! - s);
    gap.sum += d;
    gap.max = Math.max(gap.max, d);
    gap.tokens++;
  }));
}

/** A collated micro-batch: rows of ids and targets, the policy-token mask, advantages, sampler log-probabilities. */
export interface GrpoRows {
  ids: number[][];
  targets: number[][];
  mask: number[][];
  adv: number[][];
  tokens: number;
  sampled: (number | undefined)[][];
  /** Positions and segments of packed rows (absent: one sequence per row). */
  pack?: PackedRows;
}

/** How many leading tokens `seqs` share before any policy token (the prompt), at most each one's first span start. */
function sharedPrefix(seqs: readonly GrpoSequence[]): number {
  let n = Math.min(...seqs.map((s) => Math.min(s.tokens.length, ...s.spans.filter((sp) => sp.end > sp.start).map((sp) => sp.start))));
  const first = seqs[0]!.tokens;
  for (const s of seqs.slice(1)) {
    let k = 0;
    while (k < n && s.tokens[k] === first[k]) k++;
    n = k;
  }
  return n;
}

/**
 * The micro-batch with each run of consecutive sequences that share a prompt packed into one row (GRPO's G samples of
 * a prompt: verl and slime pack a group the same way): the shared prompt but its last token once (segment 0,
 * positions 0…L−2), then each sequence from the prompt's last token on (segment k, positions from L−1), attending to
 * the prompt and to itself only. Every sequence's tokens keep their positions and their context, so each policy token's
 * log-probability, and the loss and gradients, are those of one row per sequence; the prompt's forward and backward
 * run once instead of G times. A sequence whose prompt is shared with none gets a row as in `collateGrpo`.
 */
export function packGrpo(batch: readonly GrpoSequence[], padId: number): GrpoRows {
  const runs: GrpoSequence[][] = [];
  for (const s of batch) {
    const last = runs[runs.length - 1];
    if (last && sharedPrefix([last[0]!, s]) >= 2 && sharedPrefix([...last, s]) >= 2) last.push(s);
    else runs.push([s]);
  }
  type Row = { ids: number[]; targets: number[]; mask: number[]; adv: number[]; sampled: (number | undefined)[]; positions: number[]; segments: number[] };
  const rows: Row[] = [];
  let tokens = 0;
  for (const run of runs) {
    const L = run.length > 1 ? sharedPrefix(run) : 1;
    const row: Row = { ids: [], targets: [], mask: [], adv: [], sampled: [], positions: [], segments: [] };
    const first = run[0]!.tokens;
    for (let t = 0; t < L - 1; t++) {
      row.ids.push(first[t]!);
      row.targets.push(first[t + 1]!);
      row.mask.push(0);
      row.adv.push(0);
      row.sampled.push(undefined);
      row.positions.push(t);
      row.segments.push(0);
    }
    run.forEach((seq, k) => {
      const one = collateGrpo([seq], padId);
      const n = seq.tokens.length - 1;
      for (let t = L - 1; t < n; t++) {
        row.ids.push(one.ids[0]![t]!);
        row.targets.push(one.targets[0]![t]!);
        row.mask.push(one.mask[0]![t]!);
        row.adv.push(one.adv[0]![t]!);
        row.sampled.push(one.sampled[0]![t]);
        row.positions.push(t);
        row.segments.push(run.length > 1 ? k + 1 : 0);
      }
      tokens += one.tokens;
    });
    rows.push(row);
  }
  const T = Math.max(1, ...rows.map((r) => r.ids.length));
  const fill = <X>(xs: X[], v: X): X[] => [...xs, ...Array<X>(T - xs.length).fill(v)];
  return {
    ids: rows.map((r) => fill(r.ids, padId)),
    targets: rows.map((r) => fill(r.targets, padId)),
    mask: rows.map((r) => fill(r.mask, 0)),
    adv: rows.map((r) => fill(r.adv, 0)),
    tokens,
    sampled: rows.map((r) => fill(r.sampled, undefined)),
    // Right padding: causal attention keeps it out of every real position.
    pack: { positions: rows.map((r) => fill(r.positions, 0)), segments: rows.map((r) => fill(r.segments, 0)) },
  };
}

/** Positions a collated micro-batch computes: rows × padded row length. */
export const rowPositions = (b: Pick<GrpoRows, 'ids'>): number => b.ids.length * (b.ids[0]?.length ?? 0);

/**
 * The micro-batches of an update, collated: sequences in order, each micro-batch at most `microBatch` of them and, with
 * `maxPositions`, at most that many positions once collated (`rowPositions`); a sequence over the budget alone goes
 * in a micro-batch of its own.
 */
export function microBatches(seqs: readonly GrpoSequence[], microBatch: number, maxPositions: number | undefined, collate: (part: readonly GrpoSequence[]) => GrpoRows): GrpoRows[] {
  const micro = Math.max(1, microBatch);
  const out: GrpoRows[] = [];
  let cur: GrpoSequence[] = [];
  let curRows: GrpoRows | undefined;
  for (const s of seqs) {
    if (cur.length > 0 && cur.length < micro) {
      const next = collate([...cur, s]);
      if (maxPositions === undefined || rowPositions(next) <= maxPositions) {
        cur.push(s);
        curRows = next;
        continue;
      }
    }
    if (curRows) out.push(curRows);
    cur = [s];
    curRows = collate(cur);
  }
  if (curRows) out.push(curRows);
  return out;
}

/** The policy update: AdamW over the model's variables, one optimizer step per call. */
export class GrpoTrainer {
  readonly optimizer: AdamW;
  /** what is trained: every weight (default) or LoRA adapters (src/model/net/trainable.ts) */
  readonly trainable: TrainableSet;

  constructor(
    private readonly policy: PolicyModel,
    private readonly reference: PolicyModel | undefined,
    weightDecay: number,
    trainable?: TrainableSet,
  ) {
    this.trainable = trainable ?? fullTrainable(policy);
    this.optimizer = new AdamW(this.trainable.params, { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay }, { layout: this.trainable.layout });
  }

  /** The optimizer state of a checkpoint (either layout: AdamW.load brings an HF-layout file into the variables' layout). */
  restore(state: AdamWState): void {
    this.optimizer.load(state);
  }

  /** One update on `batch` (micro-batched). Sequences without policy tokens are skipped. */
  /**
   * `behaviour`: the policy that sampled `batch` when it is not the one being updated (one-step-off asynchronous RL);
   * `old` is then its log-probabilities (same temperature), so the clipped ratio corrects for the staleness.
   */
  async step(batch: readonly GrpoSequence[], cfg: GrpoStepConfig, onMicro?: (done: number, total: number) => void, behaviour?: PolicyModel): Promise<GrpoStepMetrics> {
    const t0 = Date.now();
    const withTokens = batch.filter((s) => s.spans.some((sp) => sp.end > sp.start));
    const total = withTokens.reduce((n, s) => n + collateGrpo([s], cfg.padId).tokens, 0);
    // A sequence whose advantage is 0 everywhere adds nothing to the loss or the gradients when there is no KL term
    // (pg = −A·ratio = 0, also clipped): its tokens count in the token mean (`total`) but it is not computed.
    const seqs = cfg.klCoef > 0 && this.reference ? withTokens : withTokens.filter((s) => s.spans.some((sp) => sp.advantage !== 0));
    const sums = new Map<string, tf.Tensor>();
    let pgTotal = 0;
    let klTotal = 0;
    let clippedTotal = 0;
    const gap = { sum: 0, max: 0, tokens: 0 };
    const collated = (part: readonly GrpoSequence[]): GrpoRows => (cfg.pack === false ? collateGrpo(part, cfg.padId) : packGrpo(part, cfg.padId));
    const parts = microBatches(seqs, cfg.microBatch, cfg.microBatchTokens, collated);
    const chunks = parts.length;
    for (let k = 0; k < chunks; k++) {
      const b: GrpoRows = parts[k]!;
      if (b.tokens === 0) continue;
      // before each micro-batch too: the first one builds the training graphs, which can take a minute on busy cores
      onMicro?.(k, chunks);
      const refLogp = cfg.klCoef > 0 && this.reference ? this.reference.tokenLogprobs(b.ids, b.targets, undefined, cfg.temperature ?? 1, b.pack) : undefined;
      const behaviourLogp = behaviour?.tokenLogprobs(b.ids, b.targets, undefined, cfg.temperature ?? 1, b.pack);
      let pgV = 0;
      let klV = 0;
      let clV = 0;
      const { value, grads } = tf.variableGrads(() => {
        const maskT = tf.tensor2d(b.mask);
        const advT = tf.tensor2d(b.adv);
        const logp = this.policy.tokenLogprobs(b.ids, b.targets, undefined, cfg.temperature ?? 1, b.pack);
        // A constant copy: the tape does not connect it to the weights (tfjs has no stopGradient).
        const old = behaviourLogp ?? tf.tensor2d(logp.dataSync(), logp.shape);
        addGap(gap, old.dataSync(), b.sampled, logp.shape[1]);
        const terms = policyLossTerms(logp, old, refLogp, advT, maskT, cfg);
        pgV = terms.pgSum.dataSync()[0]!;
        klV = terms.klSum.dataSync()[0]!;
        clV = terms.clipped.dataSync()[0]!;
        return tf.div(tf.add(terms.pgSum, tf.mul(terms.klSum, cfg.klCoef)), Math.max(total, 1)) as tf.Scalar;
      }, [...this.trainable.tape.values()]);
      value.dispose();
      refLogp?.dispose();
      behaviourLogp?.dispose();
      pgTotal += pgV;
      klTotal += klV;
      clippedTotal += clV;
      accumulateGradients(sums, this.trainable.tape, grads);
      onMicro?.(k + 1, chunks);
      await yieldToEventLoop();
    }
    let gradNorm = 0;
    if (sums.size > 0) gradNorm = applyUpdate(this.trainable, sums, (g) => this.optimizer.apply(g, cfg.lr, cfg.maxGradNorm));
    const n = Math.max(total, 1);
    return {
      loss: (pgTotal + cfg.klCoef * klTotal) / n,
      pgLoss: pgTotal / n,
      kl: klTotal / n,
      clipFrac: clippedTotal / n,
      gradNorm,
      policyTokens: total,
      sequences: withTokens.length,
      activeSequences: withTokens.filter((s) => s.spans.some((sp) => sp.advantage !== 0)).length,
      ...(gap.tokens > 0 ? { logprobGap: { mean: gap.sum / gap.tokens, max: gap.max, tokens: gap.tokens } } : {}),
      ms: Date.now() - t0,
    };
  }
}
