/**
 * The bounds of the RL hyperparameters a run may change while it runs (`cm2 rl set`, the workflow's
 * `setHyperparameters` update), in one table: the config schema (./config.ts `RlHyperparameters`) is built from it,
 * and the workflow's validator reads it. Plain code, no zod: workflow code imports it.
 */

export const GRANULARITIES = ['trajectory', 'turn', 'step'] as const;

/** lr in (0, 1]; klCoef in [0, 10]. */
export const HP_BOUNDS = {
  lr: { above: 0, max: 1 },
  klCoef: { min: 0, max: 10 },
} as const;

const finite = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

/** Why `patch` is not a valid change of {lr, klCoef, granularity}, or undefined when it is. */
export function validateHyperparameters(patch: unknown): string | undefined {
  if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) return 'expected an object {lr?, klCoef?, granularity?}';
  const p = patch as Record<string, unknown>;
  const unknownKeys = Object.keys(p).filter((k) => !['lr', 'klCoef', 'granularity'].includes(k));
  if (unknownKeys.length) return `unknown field(s) ${unknownKeys.join(', ')}; allowed: lr, klCoef, granularity`;
  if (Object.keys(p).length === 0) return 'nothing to change';
  const { lr, klCoef } = HP_BOUNDS;
  if ('lr' in p && !(finite(p['lr']) && p['lr'] > lr.above && p['lr'] <= lr.max)) return `lr must be a number in (${lr.above}, ${lr.max}]`;
  if ('klCoef' in p && !(finite(p['klCoef']) && p['klCoef'] >= klCoef.min && p['klCoef'] <= klCoef.max)) return `klCoef must be a number in [${klCoef.min}, ${klCoef.max}]`;
  if ('granularity' in p && !GRANULARITIES.includes(p['granularity'] as (typeof GRANULARITIES)[number])) return `granularity must be one of ${GRANULARITIES.join(', ')}`;
  return undefined;
}
