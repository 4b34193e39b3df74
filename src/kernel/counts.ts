/**
 * Totals kept as flat records of numbers (usage, judge counts), added key by key. Pure, no imports: workflow code
 * uses it too.
 */

/** `a + b` for every key of `a` (a key `b` lacks adds 0). */
export function addCounts<T extends { [K in keyof T]: number }>(a: T, b: Partial<T> | undefined): T {
  const out = { ...a };
  for (const k of Object.keys(a) as (keyof T)[]) out[k] = (a[k] + (b?.[k] ?? 0)) as T[keyof T];
  return out;
}

/**
 * What judging took and how the verdicts were reached: of one judged step (the judge's answer), of a phase of rollouts
 * (summed), of a run (workflow history, metrics rows). The one shape of judge counts.
 */
export interface JudgeTotals {
  /** LLM calls made (answers replayed from the client's response cache included). */
  calls: number;
  /** Items answered from the verdict cache (or by identical work in flight). */
  cacheHits: number;
  /** Items decided by their `check`, without an LLM. */
  offline: number;
  /** Items decided false by the `error_tool_call` shortcut. */
  shortcut: number;
  /** Items whose verdict is `{pass: false, ok: false}` (no usable answer). */
  failed: number;
  /** LLM tokens of the judge calls (0 offline). */
  promptTokens: number;
  completionTokens: number;
  costUsd: number;
}

export const zeroJudgeTotals = (): JudgeTotals => ({ calls: 0, cacheHits: 0, offline: 0, shortcut: 0, failed: 0, promptTokens: 0, completionTokens: 0, costUsd: 0 });
