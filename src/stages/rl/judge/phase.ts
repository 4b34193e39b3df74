/**
 * The judge phase between rollout turns (spec §6.5): for every episode waiting for the judge, judge each assistant
 * step of its current turn against every item of that turn's checklist (each variant), on the turn prefix through
 * that step, and record the verdicts. Orchestration only; the verdicts come from a `StepJudge` (src/stages/rl/judge/judge.ts).
 */
import type { ChecklistVariant, StoredItem } from '../../checklist/schema';
import { judgeViewAt, type JudgeView } from '../../checklist/check';
import { turnSpans } from '../../checklist/steps';
import type { Rollout, TurnVerdicts, Verdict } from '../rolloutSchema';
import { addCounts, type JudgeTotals, zeroJudgeTotals } from '../../../kernel/counts';

export interface StepJudge {
  judgeStep(view: JudgeView, items: StoredItem[], ctx: { salt: string }): Promise<{ verdicts: Verdict[]; stats: JudgeTotals }>;
}

export interface JudgeTask {
  rollout: Rollout;
  variant: number;
  turn: number;
  /** Assistant step index inside the turn (0, 1, …) and its message offset from the user message. */
  step: number;
  offset: number;
  items: StoredItem[];
}

/** The (rollout, variant, turn, step) judgements this phase owes, in a stable order. */
export function pendingJudgements(rollouts: readonly Rollout[], checklists: ReadonlyMap<string, ChecklistVariant[]>): JudgeTask[] {
  const tasks: JudgeTask[] = [];
  for (const r of rollouts) {
    if (r.status !== 'judge') continue;
    const turn = r.turns - 1;
    const span = turnSpans(r.messages)[turn]!;
    const steps = r.segments.filter((s) => s.turn === turn);
    const variants = checklists.get(r.uuid) ?? [];
    variants.forEach((variant, v) => {
      const items = variant[turn] ?? [];
      steps.forEach((seg, step) => tasks.push({ rollout: r, variant: v, turn, step, offset: seg.message - span.start, items }));
    });
  }
  return tasks;
}

/** Run `fn` over `items` with at most `limit` in flight. */
async function pool<T>(items: readonly T[], limit: number, fn: (item: T, i: number) => Promise<void>): Promise<void> {
  let next = 0;
  const lane = async () => {
    while (next < items.length) {
      const i = next++;
      await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, lane));
}

/**
 * Judge every pending step and store the verdicts in `rollout.verdicts[variant][turn]`. Returns summed stats.
 * Throws what the judge throws (an outage): the caller's activity is retried, and the judge's cache makes the
 * retry pay only for what was not judged yet.
 */
export async function judgePending(
  rollouts: Rollout[],
  checklists: ReadonlyMap<string, ChecklistVariant[]>,
  judge: StepJudge,
  opts: { concurrency: number; salt: string; onProgress?: (done: number, total: number) => void },
): Promise<JudgeTotals> {
  const tasks = pendingJudgements(rollouts, checklists);
  const results = new Array<Verdict[]>(tasks.length);
  let stats: JudgeTotals = zeroJudgeTotals();
  let done = 0;
  await pool(tasks, opts.concurrency, async (t, i) => {
    const view = judgeViewAt(t.rollout.messages, t.turn, t.offset);
    const out = await judge.judgeStep(view, t.items, { salt: `${opts.salt}/${t.rollout.id}/v${t.variant}/t${t.turn}/s${t.step}` });
    results[i] = out.verdicts;
    stats = addCounts(stats, out.stats);
    opts.onProgress?.(++done, tasks.length);
  });
  // Assemble in task order (deterministic regardless of completion order).
  tasks.forEach((t, i) => {
    const r = t.rollout;
    const nVariants = (checklists.get(r.uuid) ?? []).length;
    r.verdicts ??= Array.from({ length: nVariants }, () => []);
    const perTurn: TurnVerdicts[] = r.verdicts[t.variant]!;
    perTurn[t.turn] ??= { turn: t.turn, steps: [] };
    perTurn[t.turn]!.steps[t.step] = results[i]!;
  });
  // A turn with no assistant step (cannot happen in the loop, but keep the shape total): empty verdict lists.
  for (const r of rollouts) {
    if (r.status !== 'judge') continue;
    const nVariants = (checklists.get(r.uuid) ?? []).length;
    r.verdicts ??= Array.from({ length: nVariants }, () => []);
    for (const perTurn of r.verdicts) perTurn[r.turns - 1] ??= { turn: r.turns - 1, steps: [] };
  }
  return stats;
}
