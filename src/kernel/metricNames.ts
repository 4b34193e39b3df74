/**
 * The project's own metrics: names, kinds, labels and meanings, in one place (the recorders in src/run/workflowMetrics.ts and
 * src/stages/activityMetrics.ts, and docs/observability.md, follow this list). They are emitted through
 * the Temporal SDK's metric meter, so they appear on the worker's Prometheus endpoint (`cm2 worker --metrics ADDR`)
 * next to the SDK's own `temporal_*` metrics; without an endpoint the SDK's meter is a no-op.
 *
 * Counted exactly once:
 * - gauges are set by the RL workflow (the SDK's workflow meter emits nothing while a workflow replays);
 * - stage counters are added by the activity when its result object is first stored (`once` in activityKit): an
 *   attempt that fails before that adds nothing, and a retry, a replay or a resumed run that finds the result adds
 *   nothing again;
 * - LLM counters are added by the LLM client when an answer arrives: a call paid for is counted once, and a retry that
 *   gets the same answer from the response cache counts as a cache hit, with no tokens.
 *
 * Pure, no imports: workflow code uses it.
 */

export type MetricKind = 'gauge' | 'counter';

export interface MetricSpec {
  readonly name: string;
  readonly kind: MetricKind;
  readonly valueType: 'int' | 'float';
  readonly labels: readonly string[];
  readonly help: string;
}

const gauge = (name: string, valueType: 'int' | 'float', labels: readonly string[], help: string): MetricSpec => ({ name, kind: 'gauge', valueType, labels, help });
const counter = (name: string, labels: readonly string[], help: string): MetricSpec => ({ name, kind: 'counter', valueType: 'int', labels, help });

export const CM2_METRICS = {
  // RL workflow (workflows worker): gauges.
  rlStep: gauge('cm2_rl_step', 'int', ['run_id'], 'Last completed RL step of the run.'),
  rlRewardMean: gauge('cm2_rl_reward_mean', 'float', ['run_id', 'granularity'],
    'Mean checklist reward of the last RL step\'s rollouts, labelled with the reward granularity the step trained at (trajectory, turn or step).'),
  rlAdvantageAbsMean: gauge('cm2_rl_advantage_abs_mean', 'float', ['run_id', 'granularity'],
    'Mean |advantage| of the last RL step\'s batch at each granularity (all three are computed; the trained one is in cm2_rl_reward_mean).'),
  rlHeldOutReward: gauge('cm2_rl_heldout_reward_mean', 'float', ['run_id'], 'Mean held-out checklist reward at the last evaluation.'),
  rlHeldOutStep: gauge('cm2_rl_heldout_step', 'int', ['run_id'], 'RL step of the policy evaluated last (the step of cm2_rl_heldout_reward_mean).'),

  // RL activities (api worker): counters, added when the phase's result is stored.
  judgeCalls: counter('cm2_judge_calls_total', ['run_id'], 'LLM judge calls of completed judge phases (as metrics.jsonl\'s judge.calls).'),
  judgeCacheHits: counter('cm2_judge_cache_hits_total', ['run_id'], 'Checklist items whose verdict came from the S3 verdict cache.'),
  judgeOffline: counter('cm2_judge_offline_items_total', ['run_id'], 'Checklist items decided offline (machine checks, the error_tool_call shortcut).'),
  judgeFailed: counter('cm2_judge_failed_items_total', ['run_id'], 'Checklist items without a usable verdict (the sample fails).'),
  rlRollouts: counter('cm2_rl_rollouts_total', ['run_id', 'split'], 'Rollouts whose rewards were computed; split = train or heldout.'),
  rlFailedSamples: counter('cm2_rl_failed_samples_total', ['run_id', 'split'], 'Failed rollouts (a failed tool call or judge verdict); split = train or heldout.'),

  // LLM client (api and gpu workers): counters per role, added per answer.
  llmCalls: counter('cm2_llm_calls_total', ['role'], 'LLM calls answered by the endpoint (paid).'),
  llmCacheHits: counter('cm2_llm_cache_hits_total', ['role'], 'LLM calls answered from the S3 response cache (free).'),
  llmTokens: counter('cm2_llm_tokens_total', ['role', 'kind'], 'LLM tokens by kind: prompt, completion, cached_prompt (the part of prompt billed at the cached rate).'),
  llmCost: counter('cm2_llm_cost_microusd_total', ['role'], 'LLM cost in millionths of a USD under the role\'s pricing (divide by 1e6 for USD).'),
} as const satisfies Record<string, MetricSpec>;

export type Cm2MetricId = keyof typeof CM2_METRICS;
