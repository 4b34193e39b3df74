/**
 * Counters added from activities, through the running activity's metric meter (the SDK tags it with the namespace,
 * task queue and activity type; without a metrics endpoint it is the SDK's no-op meter). Names and meanings:
 * src/kernel/metricNames.ts.
 *
 * Where each is added, so that it is counted once:
 * - the RL judge and batch counters are added by `once`'s `onStored` hook, i.e. when the phase's result object is
 *   first written: never by an attempt that fails before it, never again by a retry, a replay or a resumed run that
 *   finds the result;
 * - the LLM counters are added by the LLM client's `onUsage` hook when an answer arrives: a paid call once, a call
 *   answered from the response cache (what a retry of a paid call gets) as a cache hit without tokens.
 *
 * A metrics error never reaches the activity: every function here swallows its own.
 */
import { Context } from '@temporalio/activity';
import type { MetricCounter, MetricMeter } from '@temporalio/common';
import { CM2_METRICS, type MetricSpec } from '../kernel/metricNames';
import type { JudgeTotals } from '../kernel/counts';
import type { Usage } from '../kernel/roleContracts';

/** The running activity's meter; undefined outside an activity (plain calls, tests, the CLI). */
function activityMeter(): MetricMeter | undefined {
  try {
    return Context.current().metricMeter;
  } catch {
    return undefined;
  }
}

/** Counters are created once per activity execution (its meter), not once per value. */
const created = new WeakMap<MetricMeter, Map<string, MetricCounter>>();

function add(spec: MetricSpec, value: number, tags: Record<string, string>): void {
  // 0 is added too: the series then exists from the first occurrence (a rate of 0 rather than no data).
  if (!Number.isFinite(value) || value < 0) return;
  try {
    const meter = activityMeter();
    if (!meter) return;
    let byName = created.get(meter);
    if (!byName) created.set(meter, (byName = new Map()));
    let counter = byName.get(spec.name);
    if (!counter) byName.set(spec.name, (counter = meter.createCounter(spec.name, undefined, spec.help)));
    counter.add(Math.round(value), tags);
  } catch {
    /* a metrics error must never fail the activity */
  }
}

/** Fractions of a micro-USD not yet counted, per role (this process): the counter's total stays exact. */
const costRemainder = new Map<string, number>();

/** One LLM answer (`LlmClientOptions.onUsage`). */
export function recordLlmUsage(role: string, usage: Usage, cached: boolean): void {
  if (cached) {
    add(CM2_METRICS.llmCacheHits, Math.max(1, usage.cacheHits), { role });
    return;
  }
  add(CM2_METRICS.llmCalls, usage.calls, { role });
  add(CM2_METRICS.llmTokens, usage.promptTokens, { role, kind: 'prompt' });
  add(CM2_METRICS.llmTokens, usage.completionTokens, { role, kind: 'completion' });
  add(CM2_METRICS.llmTokens, usage.cachedPromptTokens, { role, kind: 'cached_prompt' });
  if (usage.costUsd > 0 && Number.isFinite(usage.costUsd)) {
    const micro = (costRemainder.get(role) ?? 0) + usage.costUsd * 1e6;
    // Float sums land a hair under whole numbers (0.00013 × 1e6 = 129.99999999999997): count those as whole.
    const whole = Math.floor(micro + 1e-6);
    costRemainder.set(role, micro - whole);
    add(CM2_METRICS.llmCost, whole, { role });
  }
}

/** A stored judge phase of the RL stage. */
export function recordJudgePhase(runId: string, judge: JudgeTotals | undefined): void {
  if (!judge) return;
  const tags = { run_id: runId };
  add(CM2_METRICS.judgeCalls, judge.calls, tags);
  add(CM2_METRICS.judgeCacheHits, judge.cacheHits, tags);
  add(CM2_METRICS.judgeOffline, judge.offline + judge.shortcut, tags);
  add(CM2_METRICS.judgeFailed, judge.failed, tags);
}

/** A stored batch summary (rewards and advantages) of a training step or a held-out evaluation. */
export function recordRlBatch(runId: string, split: 'train' | 'heldout', rollouts: number, failed: number): void {
  add(CM2_METRICS.rlRollouts, rollouts, { run_id: runId, split });
  add(CM2_METRICS.rlFailedSamples, failed, { run_id: runId, split });
}
