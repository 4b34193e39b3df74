/**
 * The evaluation stage: BFCL accuracy of each given policy (the run's SFT policy and its final RL policy). Each policy
 * is evaluated in chunks of `eval.bfcl.chunkSize` examples (`evalBfclPlan` cuts them, an `evalBfclChunk` activity per
 * chunk on the gpu queue, so every gpu worker takes a share; `evalBfclMerge` writes the results), or, for inputs from
 * before chunks, in one `evalBfcl` activity. Results (full and summary) are in S3 under
 * `runs/<id>/eval/bfcl/<label>.json`; chunks and results are idempotent, so a re-run redoes nothing finished.
 *
 * With `engine` (the run's `rl.engine`, issue 33) each stored policy is first loaded into the serving engine
 * (`rlEngineSync`, as before an RL batch: full weights, or a LoRA checkpoint as its adapter) and its examples are
 * generated there, greedily, from the same prompt ids.
 */
import { setCurrentDetails } from '@temporalio/workflow';
import type { EvalActivities } from './activities';
import type { RlActivities } from '../rl/activities';
import type { RlSettings } from '../../run/config';
import type { EvalBfclSummary, EvalPolicy } from './shapes';
import type { EvalConfig } from '../../run/config';
import type { ActivityTimeouts } from '../../run/workflowShapes';
import { beginStage, endStage, stageActivities } from '../../run/workflowUtil';

export interface EvalWorkflowInput {
  runId: string;
  policies: Array<{ label: string; policy: EvalPolicy }>;
  bfcl: EvalConfig['bfcl'];
  startToCloseTimeout: string;
  tokenizerDir: string;
  /** `api` (optional: inputs from before it) runs the merge of a chunked evaluation; without it, the gpu queue does. */
  taskQueues: { gpu: string; api?: string };
  activity: ActivityTimeouts;
  /** Generate on the run's serving engine: its settings (`rl.engine`, and `rl.lora` for adapters) and context cap. */
  engine?: { rl: Pick<RlSettings, 'engine' | 'lora'>; maxModelLen: number };
}

export interface EvalResult {
  runId: string;
  bfcl: EvalBfclSummary[];
}

export async function evalWorkflow(input: EvalWorkflowInput): Promise<EvalResult> {
  const progress = beginStage('eval', input.runId);
  const acts = stageActivities<EvalActivities>(input.taskQueues.gpu, input.activity, input.startToCloseTimeout);
  const mergeActs = stageActivities<EvalActivities>(input.taskQueues.api ?? input.taskQueues.gpu, input.activity);
  const engineActs = stageActivities<RlActivities>(input.taskQueues.gpu, input.activity);
  progress.phase = 'bfcl';
  progress.total = input.policies.length;
  const bfcl: EvalBfclSummary[] = [];
  const { chunkSize } = input.bfcl;
  for (const { label, policy } of input.policies) {
    setCurrentDetails(`**BFCL**: ${label} (${input.bfcl.categories.join(', ')}${input.bfcl.limit ? `, first ${input.bfcl.limit} each` : ''})`);
    let engine = {};
    if (input.engine && policy.kind !== 'endpoint') {
      const e = input.engine.rl.engine;
      const synced = await engineActs.rlEngineSync({ runId: input.runId, policy, rl: input.engine.rl as RlSettings });
      engine = { engine: { kind: e.kind, url: e.url, model: e.model, apiKeyEnv: e.apiKeyEnv, concurrency: e.concurrency, maxModelLen: input.engine.maxModelLen, ...(synced.adapter ? { adapter: synced.adapter } : {}) } };
    }
    const args = {
      runId: input.runId,
      policy,
      label,
      tokenizerDir: input.tokenizerDir,
      categories: input.bfcl.categories,
      ...(input.bfcl.limit !== undefined ? { limit: input.bfcl.limit } : {}),
      ...(input.bfcl.dataDir !== undefined ? { dataDir: input.bfcl.dataDir } : {}),
      generation: { maxNewTokens: input.bfcl.maxNewTokens, batchSize: input.bfcl.batchSize, ...engine },
    };
    let r: EvalBfclSummary;
    // No `chunkSize` (an input recorded before it existed, run/patches.ts): one activity per policy.
    if (chunkSize === undefined) r = await acts.evalBfcl(args);
    else {
      // In chunks of `chunkSize` examples, spread over every gpu worker; one policy at a time, so that a worker
      // loads each policy once. The merge (S3 only) writes the same results file as one activity would.
      const plan = await acts.evalBfclPlan({ ...args, chunkSize });
      let done = 0;
      await Promise.all(plan.chunks.map(async (chunk) => {
        await acts.evalBfclChunk({ ...args, chunk });
        progress.counts[`${label}_chunks_done`] = ++done;
      }));
      r = await mergeActs.evalBfclMerge({ ...args, chunks: plan.chunks.length, dataDir: plan.dataDir, ...(plan.multiTurn ? { multiTurn: plan.multiTurn } : {}) });
    }
    bfcl.push(r);
    progress.done++;
    progress.counts[`${label}_accuracy_pct`] = Math.round(r.overall.accuracy * 100);
  }
  progress.phase = 'done';
  setCurrentDetails(`**BFCL**: ${bfcl.map((r) => `${r.label} ${(r.overall.accuracy * 100).toFixed(1)}%`).join(', ')}`);
  endStage();
  return { runId: input.runId, bfcl };
}
