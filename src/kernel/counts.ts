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

/** What judging a phase of rollouts took (plain numbers: workflow history, metrics rows). */
export interface JudgeTotals {
  calls: number;
  cacheHits: number;
  offline: number;
  shortcut: number;
  failed: number;
  /** LLM tokens of the judge calls (0 offline). */
  promptTokens: number;
  completionTokens: number;
  costUsd: number;
}

export const zeroJudgeTotals = (): JudgeTotals => ({ calls: 0, cacheHits: 0, offline: 0, shortcut: 0, failed: 0, promptTokens: 0, completionTokens: 0, costUsd: 0 });
