/**
 * A finished batch of rollouts, summarised (pure): trajectory rewards, advantages at every granularity (grouped by
 * prompt, spec section 6.5), the advantage rows the trainer joins on by rollout id, and the batch's metrics.
 */
import { z } from 'zod';
import type { RlSettings } from '../../../run/config';
import type { ChecklistVariant } from '../../checklist/schema';
import { computeAdvantages } from './advantages';
import { promptMeanStats } from '../../../kernel/heldOut';
import { addPassByFocus, scoreRollout } from './rewards';
import { type Rollout } from '../rolloutSchema';
import { Granularity } from '../../../run/config';

/** Rollouts by status. */
export const Counts = z.object({ generate: z.number().int(), judge: z.number().int(), done: z.number().int() });
export type Counts = z.infer<typeof Counts>;

export const countsOf = (rollouts: readonly Rollout[]): Counts => ({
  generate: rollouts.filter((r) => r.status === 'generate').length,
  judge: rollouts.filter((r) => r.status === 'judge').length,
  done: rollouts.filter((r) => r.status === 'done').length,
});

export const mean = (xs: readonly number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
export const std = (xs: readonly number[]) => {
  const m = mean(xs);
  return Math.sqrt(mean(xs.map((x) => (x - m) ** 2)));
};
export const tally = (xs: readonly string[]) => xs.reduce<Record<string, number>>((acc, x) => ((acc[x] = (acc[x] ?? 0) + 1), acc), {});

/** Trajectory rewards of every rollout and the advantages at every granularity (grouped by prompt). */
export function summarise(rollouts: readonly Rollout[], checklists: ReadonlyMap<string, ChecklistVariant[]>, rl: RlSettings) {
  // Each rollout's rewards once; the estimators of every granularity take them from here.
  const scores = rollouts.map((r) => scoreRollout(checklists.get(r.uuid)!, r.verdicts ?? [], r.refTurns, r.toolFailed));
  const rewards = scores.map((s) => s.reward);
  const failed = scores.filter((s) => s.failed).length;
  const groups = new Map<number, number[]>();
  rollouts.forEach((r, i) => groups.set(r.group, [...(groups.get(r.group) ?? []), i]));
  const byGranularity: Record<string, { perRollout: number[][]; absMean: number; nonzero: number }> = {};
  for (const g of Granularity.options) {
    const perRollout: number[][] = rollouts.map(() => []);
    for (const members of groups.values()) {
      const first = rollouts[members[0]!]!;
      const variants = checklists.get(first.uuid)!;
      const group = members.map((i) => {
        const r = rollouts[i]!;
        return { failed: scores[i]!.failed, segmentTurns: r.segments.map((s) => s.turn), verdicts: r.verdicts ?? [], refTurns: r.refTurns, score: scores[i]! };
      });
      const out = computeAdvantages(g, group, variants, { normByStd: rl.normAdvByStd, eta: rl.eta, minHolders: rl.minGroupCount, minCount: rl.minGroupCount });
      members.forEach((i, k) => (perRollout[i] = out.advantages[k]!));
    }
    const flat = perRollout.flat();
    byGranularity[g] = {
      perRollout,
      absMean: mean(flat.map(Math.abs)),
      nonzero: perRollout.filter((a) => a.some((x) => x !== 0)).length / Math.max(1, perRollout.length),
    };
  }
  return { rewards, failed, byGranularity };
}

/**
 * What `rlAdvantages` records of a batch: its advantage rows at `granularity`, keyed by rollout id (the trainer joins
 * on the id, never by position), and its metrics.
 */
export function summariseBatch(rollouts: readonly Rollout[], checklists: ReadonlyMap<string, ChecklistVariant[]>, rl: RlSettings, granularity: Granularity) {
  const summary = summarise(rollouts, checklists, rl);
  const chosen = summary.byGranularity[granularity]!;
  const rows = rollouts.map((r, i) => ({ id: r.id, advantages: chosen.perRollout[i]!, reward: summary.rewards[i]! }));
  return {
    rows,
    metrics: {
      rollouts: rollouts.length,
      rewardMean: mean(summary.rewards),
      rewardStd: std(summary.rewards),
      failed: summary.failed,
      advAbsMean: Object.fromEntries(Object.entries(summary.byGranularity).map(([g, v]) => [g, v.absMean])),
      advNonzero: Object.fromEntries(Object.entries(summary.byGranularity).map(([g, v]) => [g, v.nonzero])),
      endReasons: tally(rollouts.map((r) => r.ended ?? 'unfinished')),
      toolSources: rollouts.reduce<Record<string, number>>((acc, r) => {
        for (const [k, v] of Object.entries(r.toolSources)) acc[k] = (acc[k] ?? 0) + v;
        return acc;
      }, {}),
      policyTokens: rollouts.reduce((n, r) => n + r.segments.reduce((m, s) => m + s.end - s.start, 0), 0),
      meanTurns: mean(rollouts.map((r) => r.turns)),
      passByFocus: rollouts.reduce<Record<string, { passed: number; total: number }>>((acc, r) => {
        addPassByFocus(checklists.get(r.uuid) ?? [], r.verdicts ?? [], acc);
        return acc;
      }, {}),
      byPrompt: promptMeanStats(summary.rewards, rollouts.map((r) => r.group)),
    },
  };
}
