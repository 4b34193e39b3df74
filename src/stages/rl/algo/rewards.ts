/**
 * Checklist rewards (spec §6.5, §6.6, §8.3). Pure: no I/O.
 *
 * Per turn t of checklist variant v, with `steps[s][c]` the verdict of item c on the turn prefix through assistant
 * step s:
 *   satisfied_c = OR_s steps[s][c].pass                                   (no dependency gating, §6.6 step 3)
 *   R_t^v       = Σ_c w_c · 1[satisfied_c]
 *   R_t         = (1/V) Σ_v R_t^v                                         (÷ num_variants, §6.6 step 5)
 *   R           = (1/L_ref) Σ_{reached t} R_t ∈ [0, 1]                    (÷ reference turns, not reached turns)
 * A failed rollout (tool failure or any failed judge call) gets R = 0.
 *
 * Decisions (reference behaviour unless noted):
 * - Reached turns are the leading turns with at least one judged assistant step; a turn with none ends them (the
 *   reference stops placing turn rewards at the first turn with zero steps). The rollout loop never produces such a
 *   turn, so in practice every judged turn counts.
 * - Termination is decided with `refTurns` both per variant ("last reference turn") and across variants (the
 *   reference uses `len(checklist_list[0])` for both; the rollout's `refTurns` is that number).
 * - Reason priority when several apply: `final_turn` (the episode would end anyway), then `judge_failed`, then
 *   `turn_control` (a majority of variants left a required item unsatisfied).
 */
import type { ChecklistVariant, StoredItem } from '../../checklist/schema';
import type { RolloutVerdicts, TurnVerdicts, Verdict } from '../rolloutSchema';

/** Item c is satisfied in the turn: judged true at some step (OR over steps). */
export function itemSatisfied(steps: Verdict[][], c: number): boolean {
  return steps.some((step) => step[c]?.pass === true);
}

/** R_t of one variant: Σ_c w_c · 1[c satisfied at some step]. */
export function turnReward(items: StoredItem[], steps: Verdict[][]): number {
  let r = 0;
  items.forEach((item, c) => {
    if (itemSatisfied(steps, c)) r += item.weight;
  });
  return r;
}

export type TurnDecision = { continue: boolean; reason?: 'final_turn' | 'turn_control' | 'judge_failed' };

/**
 * Turn control after a final reply (spec §6.5). `perVariant[v]` = this turn's verdicts under variant v.
 * Variant v votes to terminate if some `required_for_next_turn` item was true at no step, or if this is the last
 * reference turn; the episode terminates if MORE than half the variants vote so, if any judge call failed, or if
 * `turn + 1 >= refTurns`.
 */
export function turnDecision(variants: ChecklistVariant[], perVariant: TurnVerdicts[], turn: number, refTurns: number): TurnDecision {
  const lastTurn = turn + 1 >= refTurns;
  const votes = perVariant.map((tv, v) => {
    const items = variants[v]?.[turn] ?? [];
    const requiredMissed = items.some((item, c) => item.required_for_next_turn && !itemSatisfied(tv.steps, c));
    return requiredMissed || lastTurn;
  });
  const terminateVotes = votes.filter(Boolean).length;
  const judgeFailed = perVariant.some((tv) => tv.steps.some((step) => step.some((verdict) => !verdict.ok)));
  if (lastTurn) return { continue: false, reason: 'final_turn' };
  if (judgeFailed) return { continue: false, reason: 'judge_failed' };
  if (terminateVotes > perVariant.length / 2) return { continue: false, reason: 'turn_control' };
  return { continue: true };
}

/** The sample is failed (reward 0, excluded at turn/step level): a tool failed or some judge call failed. */
export function rolloutFailed(toolFailed: boolean, verdicts: RolloutVerdicts): boolean {
  return toolFailed || verdicts.some((perTurn) => perTurn.some((tv) => tv.steps.some((step) => step.some((verdict) => !verdict.ok))));
}

/** Number of reached turns: leading turns with at least one judged step (variant 0 holds the same steps as all). */
export function reachedTurns(verdicts: RolloutVerdicts): number {
  const perTurn = verdicts[0] ?? [];
  let n = 0;
  while (n < perTurn.length && (perTurn[n]?.steps.length ?? 0) > 0) n++;
  return n;
}

/** R_t / V for each reached turn: the un-normalised per-turn reward that turn level compares (§6.7). */
export function turnRewards(variants: ChecklistVariant[], verdicts: RolloutVerdicts): number[] {
  const numVariants = variants.length;
  if (numVariants === 0) return [];
  return Array.from({ length: reachedTurns(verdicts) }, (_, t) => {
    let sum = 0;
    variants.forEach((variant, v) => {
      sum += turnReward(variant[t] ?? [], verdicts[v]?.[t]?.steps ?? []);
    });
    return sum / numVariants;
  });
}

/** R = (1/L_ref) Σ_{reached t} R_t; 0 for a failed rollout. */
export function trajectoryReward(variants: ChecklistVariant[], verdicts: RolloutVerdicts, refTurns: number, failed: boolean): number {
  return scoreOf(variants, verdicts, refTurns, failed).reward;
}

/** The rewards of one finished rollout: computed once per batch, then shared by the batch summary and every estimator. */
export interface RolloutScore {
  /** A tool failed or a judge call failed (`rolloutFailed`): reward 0, left out at turn and step level. */
  failed: boolean;
  /** R = (1/L_ref) Σ_{reached t} R_t ∈ [0, 1]; 0 when failed. */
  reward: number;
  /** R_t / V of each reached turn; [] when failed. */
  turnRewards: number[];
}

/** A rollout's score (see RolloutScore): `trajectoryReward` and `turnRewards` in one pass over its verdicts. */
export function scoreRollout(variants: ChecklistVariant[], verdicts: RolloutVerdicts, refTurns: number, toolFailed: boolean): RolloutScore {
  return scoreOf(variants, verdicts, refTurns, rolloutFailed(toolFailed, verdicts));
}

/** The score of a rollout whose failure is already known. */
export function scoreOf(variants: ChecklistVariant[], verdicts: RolloutVerdicts, refTurns: number, failed: boolean): RolloutScore {
  if (failed) return { failed, reward: 0, turnRewards: [] };
  const perTurn = turnRewards(variants, verdicts);
  return { failed, reward: refTurns > 0 ? perTurn.reduce((a, b) => a + b, 0) / refTurns : 0, turnRewards: perTurn };
}

/**
 * Judge pass counts per `focus_on` over the reached turns of a rollout, added into `into` (for the report): an item
 * passes when some judged step of its turn passed it. Judge failures count as not passed.
 */
export function addPassByFocus(variants: ChecklistVariant[], verdicts: RolloutVerdicts, into: Record<string, { passed: number; total: number }>): void {
  variants.forEach((variant, v) => {
    for (const tv of verdicts[v] ?? []) {
      if (tv.steps.length === 0) continue;
      (variant[tv.turn] ?? []).forEach((item, c) => {
        const slot = (into[item.focus_on] ??= { passed: 0, total: 0 });
        slot.total++;
        if (tv.steps.some((step) => step[c]?.ok && step[c]?.pass)) slot.passed++;
      });
    }
  });
}
