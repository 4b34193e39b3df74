/**
 * How each shard step of the prepare stage sorts a shard's examples into kept and dropped (pure): the rule filters,
 * one pass of the LLM filter, CoT compression and harder-sample selection. Every dropped example carries its reasons;
 * the LLM steps also report their usage, their failed calls and a ledger line per example.
 */
import { addUsage, type Effort, type FilterVerdict, type RoleOutcome, type Usage, zeroUsage } from '../../kernel/roleContracts';
import type { DroppedRecord, Example } from '../../kernel/schema';
import { reassembleCompressed } from './compression';
import { applyRuleFilters } from './filters';
import { harderSampleDrop } from './split';
import { computeStats } from './stats';

/** A shard sorted by one step. */
export interface Sorted {
  kept: Example[];
  dropped: DroppedRecord[];
  /** Examples whose LLM call failed (dropped with the failure as the reason). */
  failed: number;
  usage: Usage;
  /** One line per example of an LLM step (`runs/<id>/llm/ledger/`). */
  ledger?: unknown[];
}

/** How many dropped records carry each reason code (once per record). */
export function countReasons(records: readonly DroppedRecord[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of records) for (const code of new Set(r.reasons.map((x) => x.code))) out[code] = (out[code] ?? 0) + 1;
  return out;
}

/** The eight rule-based filters. */
export function sortByRules(examples: readonly Example[], enabled: readonly string[]): Sorted {
  const kept: Example[] = [];
  const dropped: DroppedRecord[] = [];
  for (const ex of examples) {
    const verdict = applyRuleFilters(ex, enabled);
    if (verdict.kept) kept.push(ex);
    else dropped.push({ uuid: ex.uuid, stage: 'rule_filter', reasons: verdict.reasons });
  }
  return { kept, dropped, failed: 0, usage: zeroUsage() };
}

/** One pass of the LLM filter (`step` = llm_filter_pass<N>), from the filter role's outcome for each example. */
export function sortByFilter(examples: readonly Example[], outcomes: readonly RoleOutcome<FilterVerdict>[], step: string, pass: number, effort: Effort): Sorted {
  const kept: Example[] = [];
  const dropped: DroppedRecord[] = [];
  let failed = 0;
  let usage: Usage = zeroUsage();
  const ledger: unknown[] = [];
  for (const [i, ex] of examples.entries()) {
    const out = outcomes[i]!;
    usage = addUsage(usage, out.usage);
    ledger.push({ uuid: ex.uuid, role: 'filter', pass, effort, attempts: out.attempts, usage: out.usage });
    if (!out.ok) {
      failed++;
      dropped.push({ uuid: ex.uuid, stage: step, reasons: [{ code: 'llm_filter_failed', detail: out.reason }] });
    } else if (out.value.noError) kept.push(ex);
    else dropped.push({ uuid: ex.uuid, stage: step, reasons: [{ code: 'llm_filter', detail: out.value.reasoning }] });
  }
  return { kept, dropped, failed, usage, ledger };
}

/** CoT compression, from the compressor role's outcome for each example: a failed compression drops its example. */
export function sortByCompression(examples: readonly Example[], outcomes: readonly RoleOutcome<string[]>[]): Sorted {
  const kept: Example[] = [];
  const dropped: DroppedRecord[] = [];
  let usage: Usage = zeroUsage();
  const ledger: unknown[] = [];
  for (const [i, ex] of examples.entries()) {
    const out = outcomes[i]!;
    usage = addUsage(usage, out.usage);
    ledger.push({ uuid: ex.uuid, role: 'compressor', attempts: out.attempts, usage: out.usage });
    if (out.ok) kept.push(reassembleCompressed(ex, out.value));
    else dropped.push({ uuid: ex.uuid, stage: 'compression', reasons: [{ code: 'cot_compression_failed', detail: out.reason }] });
  }
  return { kept, dropped, failed: dropped.length, usage, ledger };
}

/** Harder-sample selection (spec §5.1), the draw seeded per shard (`stream`) and example. */
export function sortBySelection(examples: readonly Example[], seed: number, stream: number): Sorted {
  const kept: Example[] = [];
  const dropped: DroppedRecord[] = [];
  for (const [i, ex] of examples.entries()) {
    const decision = harderSampleDrop(computeStats(ex), { seed, stream, position: i });
    if (decision.drop) dropped.push({ uuid: ex.uuid, stage: 'selection', reasons: [{ code: 'harder_selection', detail: decision.detail }] });
    else kept.push(ex);
  }
  return { kept, dropped, failed: 0, usage: zeroUsage() };
}

/** The report's line of each step: its shards' results summed (in, kept, dropped, failed, reasons, usage), and the usage of all steps. */
export function stepSummaries(steps: readonly { name: string; results: readonly { kept: { count: number }; dropped: number; failed: number; reasons: Record<string, number>; usage: Usage }[] }[]) {
  let usage = zeroUsage();
  const lines = steps.map((s) => {
    const reasons: Record<string, number> = {};
    let stepUsage = zeroUsage();
    for (const r of s.results) {
      for (const [code, n] of Object.entries(r.reasons)) reasons[code] = (reasons[code] ?? 0) + n;
      stepUsage = addUsage(stepUsage, r.usage);
    }
    usage = addUsage(usage, stepUsage);
    const kept = s.results.reduce((n, r) => n + r.kept.count, 0);
    const dropped = s.results.reduce((n, r) => n + r.dropped, 0);
    return { name: s.name, in: kept + dropped, kept, dropped, failed: s.results.reduce((n, r) => n + r.failed, 0), reasons, usage: stepUsage };
  });
  return { steps: lines, usage };
}
