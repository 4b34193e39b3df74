/**
 * Learning-rate schedule of the cold-start SFT (spec §4.3: cosine with `warmup_ratio` 0.1, as LLaMA-Factory /
 * transformers' `get_cosine_schedule_with_warmup`): linear warmup from 0 to the peak over the warmup steps, then a
 * half cosine from the peak down to `minRatio × peak` at the last step. Pure.
 */
export interface CosineSchedule {
  peakLr: number;
  /** Optimizer steps (after gradient accumulation). */
  totalSteps: number;
  warmupSteps: number;
  /** Floor of the cosine as a share of the peak (transformers: 0). */
  minRatio?: number;
}

/** Learning rate for optimizer step `step` (0-based: the first update uses step 0). */
export function lrAt(step: number, s: CosineSchedule): number {
  const min = (s.minRatio ?? 0) * s.peakLr;
  if (s.warmupSteps > 0 && step < s.warmupSteps) return (s.peakLr * step) / s.warmupSteps;
  const span = Math.max(1, s.totalSteps - s.warmupSteps);
  const progress = Math.min(1, Math.max(0, (step - s.warmupSteps) / span));
  return min + (s.peakLr - min) * 0.5 * (1 + Math.cos(Math.PI * progress));
}

/** Warmup steps from a ratio, rounded up as transformers does (`math.ceil(total * ratio)`). */
export const warmupStepsOf = (totalSteps: number, ratio: number): number => Math.ceil(totalSteps * ratio);
