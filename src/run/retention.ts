/**
 * Checkpoint retention (`rl.keepCheckpoints`): which RL checkpoints a run keeps. Pure, so the workflow computes the
 * list from its committed state and hands it to the pruning activity (`rlPruneCheckpoints`), which removes every
 * other checkpoint up to the current step.
 *
 * Kept: the newest `keep` checkpoints (never fewer than `minimumKept`), and every checkpoint still in use whatever
 * `keep` says: the current policy (the next step's update starts from it; a resume loads it), the evaluated policies
 * (the held-out evaluation points) and, at the end, the final policy (which is the current one).
 */

/** What the retention rule looks at: the newest committed step and the steps whose checkpoints are in use. */
export interface RetentionInput {
  /** The newest step whose checkpoint is committed (the workflow has recorded it). */
  step: number;
  /** `rl.keepCheckpoints`: the newest this many checkpoints are kept; 0 keeps all. */
  keep: number;
  /** Steps whose checkpoint must stay whatever `keep` says (current policy, evaluation points, …). */
  inUse: readonly number[];
  /** Floor of `keep` when pruning is on (see `minimumKept`). */
  minimum?: number;
}

/**
 * The fewest newest checkpoints pruning ever keeps: 1 (the current policy), 2 when the run trains one step off-policy
 * (`async`: step n's rollouts come from the policy of step n−1, so that checkpoint is in use as well).
 */
export function minimumKept(rl: { keepCheckpoints?: number; async?: string }): number {
  return rl.async === 'one-step-off' ? 2 : 1;
}

/** The steps (ascending) whose checkpoints are kept, among steps 1..step; undefined when pruning is off (keep all). */
export function checkpointsToKeep(r: RetentionInput): number[] | undefined {
  if (!(r.keep > 0)) return undefined;
  const newest = Math.max(Math.floor(r.keep), r.minimum ?? 1);
  const kept = new Set<number>();
  for (let s = Math.max(1, r.step - newest + 1); s <= r.step; s++) kept.add(s);
  for (const s of r.inUse) if (Number.isInteger(s) && s >= 1 && s <= r.step) kept.add(s);
  return [...kept].sort((a, b) => a - b);
}

/** The checkpoint steps of `existing` (any order) that pruning removes: at or below `step`, not kept. */
export function checkpointsToPrune(existing: readonly number[], step: number, keep: readonly number[]): number[] {
  const kept = new Set(keep);
  return [...new Set(existing)].filter((s) => s <= step && !kept.has(s)).sort((a, b) => a - b);
}
