/**
 * The GRPO loss (spec §6.8), pure tensor math over one micro-batch: PPO-clip surrogate with optional dual clip, KL to
 * a frozen reference policy with the low-variance estimator, token-mean aggregation over policy tokens only.
 *
 * Per policy token with log-probabilities logp (current), old (sampling policy), ref (reference) and advantage A:
 *   ratio = exp(clamp(logp − old, −20, 20))
 *   pg    = max(−A·ratio, −A·clip(ratio, 1−εlow, 1+εhigh))            (PPO clip)
 *   pg    = min(pg, −A·c)  where A < 0                                   (dual clip, c = clipRatioC > 1)
 *   kl    = clamp(exp(ref − logp) − (ref − logp) − 1, −10, 10)          (VeRL `low_var_kl`)
 *   loss  = Σ_tokens (pg + β·kl) / N_tokens                              (token-mean over the whole update batch)
 *
 * The trainer (`../grpo.ts`) divides the sums by the policy-token count of the whole update batch, so gradient
 * accumulation does not change the loss; what `old` is (the same forward pass, or the behaviour policy one step off)
 * is its decision too.
 */
import * as tf from '@tensorflow/tfjs';

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
