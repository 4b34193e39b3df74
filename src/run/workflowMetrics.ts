/**
 * Metrics set from workflow code, through the SDK's workflow meter: it emits nothing while the workflow replays (a
 * worker that takes the workflow over, a history re-read after a cache eviction), so each value is set once per step
 * as it happens. Gauges only: setting one again (a resumed run passing its finished steps) is harmless.
 *
 * Deterministic and side-effect free as far as the workflow is concerned (no commands). A metrics error is swallowed:
 * it must never fail a workflow task.
 */
import { metricMeter } from '@temporalio/workflow';
import { CM2_METRICS, type MetricSpec } from '../kernel/metricNames';

function setGauge(spec: MetricSpec, value: number, tags: Record<string, string>): void {
  // The SDK's gauges take non-negative values; anything else is not worth a failed workflow task.
  if (!Number.isFinite(value) || value < 0) return;
  try {
    metricMeter.createGauge(spec.name, spec.valueType, undefined, spec.help).set(value, tags);
  } catch {
    /* a metrics error must never fail the workflow */
  }
}

/** After an RL step is recorded: the step, the batch's mean reward at its granularity, |advantage| per granularity. */
export function recordRlStep(runId: string, step: number, granularity: string, rewardMean: number, advAbsMean: Record<string, number>): void {
  setGauge(CM2_METRICS.rlStep, step, { run_id: runId });
  setGauge(CM2_METRICS.rlRewardMean, rewardMean, { run_id: runId, granularity });
  for (const [g, v] of Object.entries(advAbsMean)) setGauge(CM2_METRICS.rlAdvantageAbsMean, v, { run_id: runId, granularity: g });
}

/** After a held-out evaluation of the policy at `step`. */
export function recordRlEval(runId: string, step: number, rewardMean: number): void {
  setGauge(CM2_METRICS.rlHeldOutReward, rewardMean, { run_id: runId });
  setGauge(CM2_METRICS.rlHeldOutStep, step, { run_id: runId });
}
