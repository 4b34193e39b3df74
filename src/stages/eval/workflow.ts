/**
 * The evaluation stage: BFCL accuracy of each given policy (the run's SFT policy and its final RL policy), one
 * `evalBfcl` activity per policy on the gpu queue. Results (full and summary) are in S3 under
 * `runs/<id>/eval/bfcl/<label>.json`; the activity is idempotent per label, so a re-run redoes nothing finished.
 */
import { setCurrentDetails } from '@temporalio/workflow';
import type { EvalActivities, EvalBfclSummary, EvalPolicy } from './activities';
import type { EvalConfig } from '../../run/config';
import type { ActivityTimeouts } from '../../run/types';
import { beginStage, endStage, stageActivities } from '../../run/workflowUtil';

export interface EvalWorkflowInput {
  runId: string;
  policies: Array<{ label: string; policy: EvalPolicy }>;
  bfcl: EvalConfig['bfcl'];
  startToCloseTimeout: string;
  tokenizerDir: string;
  taskQueues: { gpu: string };
  activity: ActivityTimeouts;
}

export interface EvalResult {
  runId: string;
  bfcl: EvalBfclSummary[];
}

export async function evalWorkflow(input: EvalWorkflowInput): Promise<EvalResult> {
  const progress = beginStage('eval', input.runId);
  const acts = stageActivities<EvalActivities>(input.taskQueues.gpu, input.activity, input.startToCloseTimeout);
  progress.phase = 'bfcl';
  progress.total = input.policies.length;
  const bfcl: EvalBfclSummary[] = [];
  for (const { label, policy } of input.policies) {
    setCurrentDetails(`**BFCL**: ${label} (${input.bfcl.categories.join(', ')}${input.bfcl.limit ? `, first ${input.bfcl.limit} each` : ''})`);
    const r = await acts.evalBfcl({
      runId: input.runId,
      policy,
      label,
      tokenizerDir: input.tokenizerDir,
      categories: input.bfcl.categories,
      ...(input.bfcl.limit !== undefined ? { limit: input.bfcl.limit } : {}),
      ...(input.bfcl.dataDir !== undefined ? { dataDir: input.bfcl.dataDir } : {}),
      generation: { maxNewTokens: input.bfcl.maxNewTokens, batchSize: input.bfcl.batchSize },
    });
    bfcl.push(r);
    progress.done++;
    progress.counts[`${label}_accuracy_pct`] = Math.round(r.overall.accuracy * 100);
  }
  progress.phase = 'done';
  setCurrentDetails(`**BFCL**: ${bfcl.map((r) => `${r.label} ${(r.overall.accuracy * 100).toFixed(1)}%`).join(', ')}`);
  endStage();
  return { runId: input.runId, bfcl };
}
