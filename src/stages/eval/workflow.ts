/**
 * The evaluation stage: BFCL accuracy of each given policy (the run's SFT policy and its final RL policy). Each policy
 * is evaluated in chunks of `eval.bfcl.chunkSize` examples (`evalBfclPlan` cuts them, an `evalBfclChunk` activity per
 * chunk on the gpu queue, so every gpu worker takes a share; `evalBfclMerge` writes the results), or, for inputs from
 * before chunks, in one `evalBfcl` activity. Results (full and summary) are in S3 under
 * `runs/<id>/eval/bfcl/<label>.json`; chunks and results are idempotent, so a re-run redoes nothing finished.
 *
 * Then, with `eval.tau2.enabled`, τ²-Bench of each policy (`evalTau2`, one activity per policy on the gpu queue: tau2's
 * episodes, each finished one stored at once), results under `runs/<id>/eval/tau2/<label>.json`.
 *
 * With `engine` (the run's `rl.engine`, issue 33) each stored policy is first loaded into the serving engine
 * (`rlEngineSync`, as before an RL batch: full weights, or a LoRA checkpoint as its adapter) and its examples are
 * generated there, greedily, from the same prompt ids.
 */
import { setCurrentDetails } from '@temporalio/workflow';
import type { EvalActivities } from './activities';
import type { RlActivities } from '../rl/activities';
import type { RlSettings } from '../../run/config';
import type { EvalBfclSummary, EvalPolicy, EvalTau2Summary } from './shapes';
import type { EvalConfig, Tau2EvalConfig } from '../../run/config';
import type { LlmRoleConfig } from '../../llm/llmConfig';
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
  /** τ²-Bench (`eval.tau2`, when enabled) and its user simulator (`llm.roles.user`); absent in inputs from before it. */
  tau2?: { config: Tau2EvalConfig; user: LlmRoleConfig };
}

export interface EvalResult {
  runId: string;
  bfcl: EvalBfclSummary[];
  tau2?: EvalTau2Summary[];
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
  /** With the run's serving engine: the policy loaded into it first (`rlEngineSync`), and the target to generate on. */
  const engineFor = async (policy: EvalPolicy): Promise<object> => {
    if (!input.engine || policy.kind === 'endpoint') return {};
    const e = input.engine.rl.engine;
    const synced = await engineActs.rlEngineSync({ runId: input.runId, policy, rl: input.engine.rl as RlSettings });
    return { engine: { kind: e.kind, url: e.url, model: e.model, apiKeyEnv: e.apiKeyEnv, concurrency: e.concurrency, maxModelLen: input.engine.maxModelLen, ...(synced.adapter ? { adapter: synced.adapter } : {}) } };
  };
  for (const { label, policy } of input.policies) {
    setCurrentDetails(`**BFCL**: ${label} (${input.bfcl.categories.join(', ')}${input.bfcl.limit ? `, first ${input.bfcl.limit} each` : ''})`);
    const engine = await engineFor(policy);
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
  const tau2: EvalTau2Summary[] = [];
  if (input.tau2?.config.enabled) {
    progress.phase = 'tau2';
    progress.done = 0;
    const c = input.tau2.config;
    for (const { label, policy } of input.policies) {
      setCurrentDetails(`**τ²-Bench**: ${label} (${c.domains.join(', ')}, ${c.split}${c.limit ? `, first ${c.limit} tasks each` : ''}, ${c.trials} trial(s))`);
      const engine = await engineFor(policy);
      const r = await acts.evalTau2({ runId: input.runId, policy, label, tokenizerDir: input.tokenizerDir, tau2: c, user: input.tau2.user, generation: { ...engine } });
      tau2.push(r);
      progress.done++;
      progress.counts[`${label}_tau2_avg`] = Math.round(r.average * 100) / 100;
    }
  }
  progress.phase = 'done';
  setCurrentDetails([`**BFCL**: ${bfcl.map((r) => `${r.label} ${(r.overall.accuracy * 100).toFixed(1)}%`).join(', ')}`, ...(tau2.length ? [`**τ²-Bench** (average of the domains): ${tau2.map((r) => `${r.label} ${r.average.toFixed(2)}`).join(', ')}`] : [])].join('\n'));
  endStage();
  return { runId: input.runId, bfcl, ...(tau2.length ? { tau2 } : {}) };
}
