/**
 * Held-out statistics (pure): the mean checklist reward of a policy over held-out prompts with its standard error.
 *
 * The unit is the prompt: with several samples per prompt the samples of one prompt are not independent, so each
 * prompt's samples are averaged first and the spread is taken across prompts (n = prompts). With one sample per
 * prompt this is the usual standard error of the mean of the rewards.
 */
export interface HeldOutStats {
  /** Prompts. */
  n: number;
  /** Mean over prompts of the per-prompt mean reward (= the mean reward when every prompt has as many samples). */
  mean: number;
  /** Sample standard deviation (n − 1) of the per-prompt means; null with fewer than two prompts. */
  sd: number | null;
  /** Standard error of `mean`: sd / √n; null with fewer than two prompts. */
  se: number | null;
}

/** `rewards[i]` belongs to prompt `groups[i]`. */
export function promptMeanStats(rewards: readonly number[], groups: readonly (number | string)[]): HeldOutStats {
  if (rewards.length !== groups.length) throw new Error(`promptMeanStats: ${rewards.length} rewards but ${groups.length} group labels`);
  const byPrompt = new Map<number | string, { sum: number; count: number }>();
  rewards.forEach((r, i) => {
    const slot = byPrompt.get(groups[i]!) ?? { sum: 0, count: 0 };
    slot.sum += r;
    slot.count++;
    byPrompt.set(groups[i]!, slot);
  });
  const means = [...byPrompt.values()].map((s) => s.sum / s.count);
  const n = means.length;
  if (n === 0) return { n: 0, mean: 0, sd: null, se: null };
  const mean = means.reduce((a, b) => a + b, 0) / n;
  if (n < 2) return { n, mean, sd: null, se: null };
  const sd = Math.sqrt(means.reduce((a, m) => a + (m - mean) ** 2, 0) / (n - 1));
  return { n, mean, sd, se: sd / Math.sqrt(n) };
}

/** `mean ± se (n=…)` with 4 decimals, or the mean alone without a standard error. */
export function formatMeanSe(mean: number | null | undefined, se: number | null | undefined, n?: number | null): string {
  if (mean === null || mean === undefined || !Number.isFinite(mean)) return '–';
  const base = mean.toFixed(4);
  const err = se !== null && se !== undefined && Number.isFinite(se) ? ` ± ${se.toFixed(4)}` : '';
  return `${base}${err}${n ? ` (n=${n})` : ''}`;
}

/**
 * ` [3 of 24 rollouts failed, scored 0]` after a held-out mean: a failed rollout (judge or tool environment) counts as
 * reward 0 in the mean, so a mean is not read without it. '' when none failed or the count is unknown (older runs).
 */
export function formatFailed(failed: number | null | undefined, rollouts?: number | null): string {
  if (!failed || !Number.isFinite(failed)) return '';
  return ` [${failed}${rollouts ? ` of ${rollouts}` : ''} rollout${(rollouts ?? failed) === 1 ? '' : 's'} failed, scored 0]`;
}

/** "sampler/trainer log p gap: mean …, max … over N tokens" from a step row, or undefined (rows recorded before it). */
export function logprobGapLine(row: Record<string, unknown> | undefined): string | undefined {
  const g = row?.['logprobGap'] as { mean?: number; max?: number; tokens?: number } | undefined;
  if (g?.mean === undefined || g.max === undefined) return undefined;
  return `sampler/trainer log p gap: mean ${g.mean.toExponential(2)}, max ${g.max.toExponential(2)} over ${g.tokens ?? '?'} sampled tokens`;
}
