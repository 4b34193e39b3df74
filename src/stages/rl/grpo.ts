/**
 * GRPO policy update (spec §6.8): PPO-clip surrogate with optional dual clip, KL to a frozen reference policy with
 * the low-variance estimator, token-mean aggregation over policy tokens only.
 *
 * Per policy token with log-probabilities logp (current), old (sampling policy), ref (reference) and advantage A:
 *   ratio = exp(clamp(logp − old, −20, 20))
 *   pg    = max(−A·ratio, −A·clip(ratio, 1−εlow, 1+εhigh))            (PPO clip)
 *   pg    = min(pg, −A·c)  where A < 0                                   (dual clip, c = clipRatioC > 1)
 *   kl    = clamp(exp(ref − logp) − (ref − logp) − 1, −10, 10)          (VeRL `low_var_kl`)
 *   loss  = Σ_tokens (pg + β·kl) / N_tokens                              (token-mean over the whole update batch)
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
 * - Pure tensor math (`policyLossTerms`) is separate from the trainer so tests can pin it on small tensors.
 */
import * as tf from '@tensorflow/tfjs';
import { AdamW, type AdamWState } from '../../model/optim/adamw';
import { accumulateGradients, yieldToEventLoop } from '../../model/optim/accumulate';

/** What the update needs of a policy (QwenModel satisfies it). */
export interface PolicyModel {
  namedVariables(): Map<string, tf.Variable>;
  tokenLogprobs(ids: number[][], targets: number[][], keyMask?: number[][], temperature?: number): tf.Tensor2D;
}

export interface GrpoLossConfig {
  clipLow: number;
  clipHigh: number;
  /** Dual-clip constant c (> 1); undefined disables dual clip. */
  clipRatioC?: number;
  /** KL coefficient β; 0 skips the reference forward pass entirely. */
  klCoef: number;
}

export const DEFAULT_GRPO_LOSS: GrpoLossConfig = { clipLow: 0.2, clipHigh: 0.2, clipRatioC: 3, klCoef: 1e-4 };

/**
 * Per-token loss terms ([B, T] tensors in, sums out). `mask` is 1 on policy tokens. Returns the sums over masked
 * tokens of the policy-gradient term and of the KL term, and the number of clipped tokens (for metrics).
 */
export function policyLossTerms(
  logp: tf.Tensor2D,
  old: tf.Tensor2D,
  ref: tf.Tensor2D | undefined,
  adv: tf.Tensor2D,
  mask: tf.Tensor2D,
  cfg: GrpoLossConfig,
): { pgSum: tf.Scalar; klSum: tf.Scalar; clipped: tf.Scalar } {
  return tf.tidy(() => {
    const ratio = tf.exp(tf.clipByValue(tf.sub(logp, old), -20, 20));
    const negA = tf.neg(adv);
    const pg1 = tf.mul(negA, ratio);
    const pg2 = tf.mul(negA, tf.clipByValue(ratio, 1 - cfg.clipLow, 1 + cfg.clipHigh));
    let pg = tf.maximum(pg1, pg2);
    const clippedMask = tf.cast(tf.greater(pg2, pg1), 'float32');
    if (cfg.clipRatioC !== undefined) {
      const pg3 = tf.mul(negA, cfg.clipRatioC);
      pg = tf.where(tf.less(adv, 0), tf.minimum(pg, pg3), pg);
    }
    const pgSum = tf.sum(tf.mul(pg, mask)) as tf.Scalar;
    let klSum: tf.Scalar = tf.scalar(0);
    if (ref) {
      const d = tf.sub(ref, logp);
      const kl = tf.clipByValue(tf.sub(tf.sub(tf.exp(d), d), 1), -10, 10);
      klSum = tf.sum(tf.mul(kl, mask)) as tf.Scalar;
    }
    const clipped = tf.sum(tf.mul(clippedMask, mask)) as tf.Scalar;
    return { pgSum, klSum, clipped };
  });
}

/** One training sequence: tokens, policy-token spans with their advantage. */
export interface GrpoSequence {
  tokens: readonly number[];
  /** [start, end) spans of policy tokens in `tokens`, each with the advantage of all its tokens. */
  spans: readonly { start: number; end: number; advantage: number }[];
}

export interface GrpoStepConfig extends GrpoLossConfig {
  lr: number;
  maxGradNorm: number;
  microBatch: number;
  padId: number;
  /** The rollouts' sampling temperature: log-probabilities (policy and reference) are of softmax(logits / T). Default 1. */
  temperature?: number;
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
  ms: number;
}

/** Inputs of position t predict token t+1: ids = tokens[0..n-2], targets = tokens[1..n-1]; target mask from spans. */
export function collateGrpo(batch: readonly GrpoSequence[], padId: number): { ids: number[][]; targets: number[][]; mask: number[][]; adv: number[][]; tokens: number } {
  const T = Math.max(1, ...batch.map((s) => s.tokens.length - 1));
  const ids: number[][] = [];
  const targets: number[][] = [];
  const mask: number[][] = [];
  const adv: number[][] = [];
  let tokens = 0;
  for (const seq of batch) {
    const n = seq.tokens.length;
    const row = Array<number>(T).fill(padId);
    const tgt = Array<number>(T).fill(padId);
    const m = Array<number>(T).fill(0);
    const a = Array<number>(T).fill(0);
    for (let t = 0; t < n - 1; t++) {
      row[t] = seq.tokens[t]!;
      tgt[t] = seq.tokens[t + 1]!;
    }
    for (const span of seq.spans) {
      // Token k (k ≥ 1) is predicted at input position k − 1.
      for (let k = Math.max(span.start, 1); k < Math.min(span.end, n); k++) {
        m[k - 1] = 1;
        a[k - 1] = span.advantage;
        tokens++;
      }
    }
    ids.push(row);
    targets.push(tgt);
    mask.push(m);
    adv.push(a);
  }
  return { ids, targets, mask, adv, tokens };
}

/** The policy update: AdamW over the model's variables, one optimizer step per call. */
export class GrpoTrainer {
  readonly optimizer: AdamW;
  private readonly params: Map<string, tf.Variable>;

  constructor(
    private readonly policy: PolicyModel,
    private readonly reference: PolicyModel | undefined,
    weightDecay: number,
  ) {
    this.params = policy.namedVariables();
    this.optimizer = new AdamW(this.params, { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay });
  }

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
    const seqs = batch.filter((s) => s.spans.some((sp) => sp.end > sp.start));
    const total = seqs.reduce((n, s) => n + collateGrpo([s], cfg.padId).tokens, 0);
    const sums = new Map<string, tf.Tensor>();
    let pgTotal = 0;
    let klTotal = 0;
    let clippedTotal = 0;
    const micro = Math.max(1, cfg.microBatch);
    const chunks = Math.ceil(seqs.length / micro);
    for (let k = 0; k < chunks; k++) {
      const part = seqs.slice(k * micro, (k + 1) * micro);
      const b = collateGrpo(part, cfg.padId);
      if (b.tokens === 0) continue;
      const refLogp = cfg.klCoef > 0 && this.reference ? this.reference.tokenLogprobs(b.ids, b.targets, undefined, cfg.temperature ?? 1) : undefined;
      const behaviourLogp = behaviour?.tokenLogprobs(b.ids, b.targets, undefined, cfg.temperature ?? 1);
      let pgV = 0;
      let klV = 0;
      let clV = 0;
      const { value, grads } = tf.variableGrads(() => {
        const maskT = tf.tensor2d(b.mask);
        const advT = tf.tensor2d(b.adv);
        const logp = this.policy.tokenLogprobs(b.ids, b.targets, undefined, cfg.temperature ?? 1);
        // A constant copy: the tape does not connect it to the weights (tfjs has no stopGradient).
        const old = behaviourLogp ?? tf.tensor2d(logp.dataSync(), logp.shape);
        const terms = policyLossTerms(logp, old, refLogp, advT, maskT, cfg);
        pgV = terms.pgSum.dataSync()[0]!;
        klV = terms.klSum.dataSync()[0]!;
        clV = terms.clipped.dataSync()[0]!;
        return tf.div(tf.add(terms.pgSum, tf.mul(terms.klSum, cfg.klCoef)), Math.max(total, 1)) as tf.Scalar;
      }, [...this.params.values()]);
      value.dispose();
      refLogp?.dispose();
      behaviourLogp?.dispose();
      pgTotal += pgV;
      klTotal += klV;
      clippedTotal += clV;
      accumulateGradients(sums, this.params, grads);
      onMicro?.(k + 1, chunks);
      await yieldToEventLoop();
    }
    let gradNorm = 0;
    if (sums.size > 0) gradNorm = this.optimizer.apply(sums, cfg.lr, cfg.maxGradNorm);
    for (const g of sums.values()) g.dispose();
    const n = Math.max(total, 1);
    return {
      loss: (pgTotal + cfg.klCoef * klTotal) / n,
      pgLoss: pgTotal / n,
      kl: klTotal / n,
      clipFrac: clippedTotal / n,
      gradNorm,
      policyTokens: total,
      sequences: seqs.length,
      activeSequences: seqs.filter((s) => s.spans.some((sp) => sp.advantage !== 0)).length,
      ms: Date.now() - t0,
    };
  }
}
