/**
 * Advantages at the three assignment granularities (spec §6.7, §8.3). Pure: no I/O, no tensors.
 *
 * Input is one group: the G rollouts of one prompt, which share the checklist variants. Output is one advantage per
 * segment (assistant generation) of each member; every policy token of a segment gets its segment's value.
 *
 * Trajectory (stock VeRL GRPO, the final CM2 model):
 *   A_i = R_i − mean_G(R)            (÷ (std_G(R) + ε) when normByStd; a group of one has mean 0 and std 1)
 * Turn (reward_level=turn with the checklist estimator), per turn position k over the successful members holding a
 * k-th turn end (H_k):
 *   A_{i,k} = R_{i,k} − mean_{H_k}(R_{·,k})  if |H_k| > minHolders, else 0      (R_{i,k} = R_k / V, §6.6)
 * Step (reward_level=step), per segment s of turn t of member i:
 *   A_{i,s} = Σ_v Σ_{c ∈ E_v(s)} w_c (r̃_c − b_c)   (÷ Σ_v Σ_{c∈E} w_c when normInAdv)
 *   E_v(s) = items whose dependencies all completed in earlier steps of the turn and which did not;
 *   r̃_c = eta^delay_c if c completes at s or later in the turn (backfill), else 0; r̃_c = b_c when n_c ≤ minCount;
 *   b_c, n_c = mean and count of the per-(variant, turn, item) values over the successful members.
 *
 * Decisions (the lead copies these to docs/decisions.md):
 * - Trajectory level: failed members keep R = 0, count in the group mean and get A = −mean on their segments (VeRL
 *   does not zero their response mask). std is the unbiased sample std (torch.std); a group of one: mean 0, std 1.
 * - Turn level: a member's turn ends are its reached turns (leading turns with ≥ 1 judged step, the partial final
 *   turn included); the k-th turn end is turn k, and A_{i,k} goes on the segments whose turn is k. The reference
 *   writes A to tokens (previous turn end, this turn end], which are the same segments. Segments of a turn without a
 *   turn end get 0. std as above; with minHolders 0 a single holder has std 1.
 * - Step level, per-variant sums are ADDED, not averaged, over variants (the reference accumulates Σ w·r̃, Σ w·b and
 *   Σ w across variants before one difference). With V = 1 (the released setup) both are the same.
 * - Step level, delay: the value of an item completed at step s is eta^(s − s_dep − 1), s_dep = latest completion step
 *   of its dependencies (−1 without dependencies), in both the statistics pass and the backfill. The reference's
 *   backfill pass records the LAST step where the item is true and, for items with dependencies, mixes the stored
 *   delays of the dependencies with step indices; we use the first completion and the same step-based delay as the
 *   statistics pass, so a member's r̃ equals the value it contributed to b. Identical for eta = 1 (the only value the
 *   reference runs). Reproduced quirk: an item completed in the same step as its dependency (earlier item index) has
 *   delay −1, i.e. value eta^−1.
 * - Step level, reproduced asymmetry: in the statistics pass an item becomes eligible in the step where an
 *   earlier-index dependency completes, but the advantage pass's E uses only earlier steps, so such an item is in no
 *   E when it completes in that same step.
 * - Step level: a dependency id that is not an item of the turn (the validator forbids it; the reference would raise)
 *   never completes, so its dependant is never eligible. Verdicts beyond a turn's item count are ignored.
 * - Step level: segments are matched to verdicts by (turn, index of the generation inside the turn), not by the flat
 *   position, so a segment without verdicts gets 0 rather than shifting later ones.
 */
import type { ChecklistVariant, StoredItem } from '../../checklist/schema';
import { scoreOf, type RolloutScore } from './rewards';
import type { RolloutVerdicts, Verdict } from '../rolloutSchema';
import { type Granularity } from '../../../run/config';

/** One group member as the estimators need it. */
export interface GroupMember {
  /** Tool failure or a failed judge call (`rolloutFailed`). */
  failed: boolean;
  /** Turn index of each assistant generation (segment), in order. */
  segmentTurns: number[];
  verdicts: RolloutVerdicts;
  /** L_ref: number of reference turns. */
  refTurns: number;
  /** Its rewards, computed once per batch by the caller (`scoreRollout`); computed from the fields above when absent. */
  score?: RolloutScore;
}

export interface TrajectoryOptions {
  /** Divide by std + eps (VeRL `norm_adv_by_std_in_grpo`; false in every CM2 run). */
  normByStd?: boolean;
  eps?: number;
}

export interface TurnOptions extends TrajectoryOptions {
  /** A turn position with this many holders or fewer gets advantage 0 (hard-coded 4 in the reference). */
  minHolders?: number;
}

export interface StepOptions {
  /** Delay discount (reference `eta`, 1.0). */
  eta?: number;
  /** Items with this many contributing members or fewer use r̃ = b, i.e. contribute 0 (`threthod_num`, 4). */
  minCount?: number;
  /** Divide by the summed weight of the eligible items (`do_norm_in_adv`, false in the script). */
  normInAdv?: boolean;
}

export type AdvantageOptions = TurnOptions & StepOptions;

export interface AdvantageResult {
  /** [member][segment]. */
  advantages: number[][];
  /** Trajectory rewards R_i (0 for failed members), for metrics at every granularity. */
  rewards: number[];
}

const sum = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0);

/** VeRL group statistics: mean and unbiased std; a single score has mean 0 and std 1. */
function groupStats(scores: readonly number[]): { mean: number; std: number } {
  if (scores.length <= 1) return { mean: 0, std: 1 };
  const mean = sum(scores) / scores.length;
  const variance = scores.reduce((a, x) => a + (x - mean) ** 2, 0) / (scores.length - 1);
  return { mean, std: Math.sqrt(variance) };
}

function scoresOf(group: readonly GroupMember[], variants: ChecklistVariant[]): RolloutScore[] {
  return group.map((m) => m.score ?? scoreOf(variants, m.verdicts, m.refTurns, m.failed));
}

/** Stock GRPO outcome advantage: the same A_i on every segment of member i. */
export function trajectoryAdvantages(group: readonly GroupMember[], variants: ChecklistVariant[], opts: TrajectoryOptions = {}): AdvantageResult {
  const { normByStd = false, eps = 1e-6 } = opts;
  const rewards = scoresOf(group, variants).map((s) => s.reward);
  const { mean, std } = groupStats(rewards);
  const advantages = group.map((m, i) => {
    const a = normByStd ? (rewards[i]! - mean) / (std + eps) : rewards[i]! - mean;
    return m.segmentTurns.map(() => a);
  });
  return { advantages, rewards };
}

/** Turn-level advantage: per turn position, centred over the successful members that reached it. */
export function turnAdvantages(group: readonly GroupMember[], variants: ChecklistVariant[], opts: TurnOptions = {}): AdvantageResult {
  const { normByStd = false, eps = 1e-6, minHolders = 4 } = opts;
  const scores = scoresOf(group, variants);
  const perTurn = scores.map((s) => s.turnRewards);
  const positions = Math.max(0, ...perTurn.map((r) => r.length));
  const perTurnAdv = perTurn.map((r) => r.map(() => 0));
  for (let k = 0; k < positions; k++) {
    const holders = perTurn.flatMap((r, i) => (r.length > k ? [i] : []));
    if (holders.length <= minHolders) continue;
    const { mean, std } = groupStats(holders.map((i) => perTurn[i]![k]!));
    for (const i of holders) {
      const d = perTurn[i]![k]! - mean;
      perTurnAdv[i]![k] = normByStd ? d / (std + eps) : d;
    }
  }
  const advantages = group.map((m, i) => m.segmentTurns.map((t) => perTurnAdv[i]![t] ?? 0));
  return { advantages, rewards: scores.map((s) => s.reward) };
}

/** Index of each item's dependencies inside its turn; an unknown id maps to −1 (never completed). */
function dependencyIndices(items: readonly StoredItem[]): number[][] {
  const index = new Map(items.map((item, c) => [item.id, c]));
  return items.map((item) => item.dependence.map((id) => index.get(id) ?? -1));
}

/** One walk over the steps of a turn: when each item completes (with its delay) and which items were ever eligible. */
interface TurnWalk {
  /** Item → step of its first completion (all dependencies completed before it, or earlier in the same step). */
  completedAt: Map<number, number>;
  /** Item → delay s − s_dep − 1 at completion. */
  delay: Map<number, number>;
  /** Items eligible at some step (dependencies completed, item not yet). */
  eligible: Set<number>;
}

function walkTurn(steps: readonly Verdict[][], deps: readonly number[][]): TurnWalk {
  const completedAt = new Map<number, number>();
  const delay = new Map<number, number>();
  const eligible = new Set<number>();
  steps.forEach((verdicts, s) => {
    const n = Math.min(verdicts.length, deps.length);
    for (let c = 0; c < n; c++) {
      if (completedAt.has(c)) continue;
      const ds = deps[c]!;
      if (!ds.every((d) => completedAt.has(d))) continue;
      eligible.add(c);
      if (!verdicts[c]!.pass) continue;
      const sDep = ds.length === 0 ? -1 : Math.max(...ds.map((d) => completedAt.get(d)!));
      completedAt.set(c, s);
      delay.set(c, s - sDep - 1);
    }
  });
  return { completedAt, delay, eligible };
}

/** Per-(variant, turn, item) baseline over the successful members: b = mean of the set values, n = their count. */
type ItemStats = Map<string, { b: number; n: number }>;
const statKey = (v: number, t: number, c: number): string => `${v}/${t}/${c}`;

/** Step-level advantage (computed in the reference's reward manager, `adv_tensor`). */
export function stepAdvantages(group: readonly GroupMember[], variants: ChecklistVariant[], opts: StepOptions = {}): AdvantageResult {
  const { eta = 1.0, minCount = 4, normInAdv = false } = opts;
  const deps = variants.map((variant) => variant.map(dependencyIndices));
  const walks = group.map((m) =>
    m.failed ? [] : variants.map((_, v) => (m.verdicts[v] ?? []).map((tv, t) => walkTurn(tv.steps, deps[v]![t] ?? []))),
  );

  // Statistics: value = eta^delay if completed, 0 if eligible but never completed, unset otherwise.
  const values = new Map<string, number[]>();
  walks.forEach((perVariant) =>
    perVariant.forEach((perTurn, v) =>
      perTurn.forEach((walk, t) => {
        for (const c of walk.eligible) {
          const key = statKey(v, t, c);
          const value = walk.completedAt.has(c) ? eta ** walk.delay.get(c)! : 0;
          values.set(key, [...(values.get(key) ?? []), value]);
        }
      }),
    ),
  );
  const stats: ItemStats = new Map([...values].map(([key, xs]) => [key, { b: sum(xs) / xs.length, n: xs.length }]));

  const advantages = group.map((m, i) => {
    if (m.failed) return m.segmentTurns.map(() => 0);
    const seen = new Map<number, number>();
    return m.segmentTurns.map((t) => {
      const s = seen.get(t) ?? 0;
      seen.set(t, s + 1);
      let actual = 0;
      let baseline = 0;
      let weight = 0;
      let count = 0;
      variants.forEach((variant, v) => {
        const steps = m.verdicts[v]?.[t]?.steps;
        const walk = walks[i]![v]?.[t];
        if (!steps || !walk || s >= steps.length) return;
        const items = variant[t] ?? [];
        const turnDeps = deps[v]![t] ?? [];
        const doneBefore = (c: number): boolean => (walk.completedAt.get(c) ?? Infinity) < s;
        const n = Math.min(steps[s]!.length, items.length);
        for (let c = 0; c < n; c++) {
          const stat = stats.get(statKey(v, t, c));
          if (!stat || doneBefore(c) || !turnDeps[c]!.every(doneBefore)) continue;
          const completed = walk.completedAt.has(c);
          const r = stat.n > minCount ? (completed ? eta ** walk.delay.get(c)! : 0) : stat.b;
          const w = items[c]!.weight;
          actual += w * r;
          baseline += w * stat.b;
          weight += w;
          count++;
        }
      });
      if (count === 0) return 0;
      return (actual - baseline) / (normInAdv && weight !== 0 ? weight : 1);
    });
  });
  return { advantages, rewards: scoresOf(group, variants).map((s) => s.reward) };
}

/** Dispatch on the granularity; `rewards` are the trajectory rewards in every case. */
export function computeAdvantages(granularity: Granularity, group: readonly GroupMember[], variants: ChecklistVariant[], opts: AdvantageOptions = {}): AdvantageResult {
  switch (granularity) {
    case 'trajectory':
      return trajectoryAdvantages(group, variants, opts);
    case 'turn':
      return turnAdvantages(group, variants, opts);
    case 'step':
      return stepAdvantages(group, variants, opts);
  }
}

/** A rollout's advantages as stored for training: one per segment, keyed by the rollout's id. */
export interface RolloutAdvantages {
  id: string;
  advantages: number[];
}

/**
 * The advantage of every segment of every rollout, joined by rollout id (never by position). Each rollout needs
 * exactly one row, with one finite advantage per segment, and every row a rollout; anything else throws, naming
 * `where` and the rollout, because a silent 0 would train on a misaligned batch.
 */
export function joinAdvantages<S extends { start: number; end: number }>(
  rollouts: ReadonlyArray<{ id: string; segments: readonly S[] }>,
  rows: readonly RolloutAdvantages[],
  where: string,
): Array<Array<S & { advantage: number }>> {
  const byId = new Map<string, number[]>();
  for (const row of rows) {
    if (byId.has(row.id)) throw new Error(`${where}: two advantage rows for rollout ${row.id}`);
    byId.set(row.id, row.advantages);
  }
  const out = rollouts.map((r) => {
    const adv = byId.get(r.id);
    if (!adv) throw new Error(`${where}: no advantages for rollout ${r.id}`);
    byId.delete(r.id);
    if (adv.length !== r.segments.length) throw new Error(`${where}: rollout ${r.id} has ${r.segments.length} segments but ${adv.length} advantages`);
    return r.segments.map((s, k) => {
      const a = adv[k]!;
      if (!Number.isFinite(a)) throw new Error(`${where}: rollout ${r.id}, segment ${k}: advantage ${a} is not a finite number`);
      return { ...s, advantage: a };
    });
  });
  if (byId.size) throw new Error(`${where}: advantages for ${byId.size} rollout(s) not in the batch (${[...byId.keys()].slice(0, 3).join(', ')})`);
  return out;
}
