/**
 * Cold-start SFT (CM2 stage 3) as a workflow: the base checkpoint imported on the gpu worker if the config says where
 * from and the worker lacks it → format check of the base policy → training → format check of the SFT policy → report. The training activity is one long heartbeating activity on the gpu queue that checkpoints to S3;
 * a new attempt resumes from its last checkpoint, so a killed worker costs at most `checkpointEvery` steps.
 */
import { patched, setCurrentDetails } from '@temporalio/workflow';
import type { SftActivities } from './activities';
import type { SftEvalResult, SftReport } from './shapes';
import type { SftWorkflowInput } from '../../run/workflowShapes';
import { chunkCount } from '../../kernel/chunks';
import { beginStage, endStage, stageActivities, stageProgressQuery } from '../../run/workflowUtil';
import { PATCH } from '../../run/patches';

/** The stage's progress query (`progress`, shared by every stage). */
export const sftProgressQuery = stageProgressQuery;

export async function sftWorkflow(input: SftWorkflowInput): Promise<SftReport> {
  const progress = beginStage('sft', input.runId);
  const acts = stageActivities<SftActivities>(input.taskQueues.gpu, input.activity, input.sft.startToCloseTimeout);
  const apiActs = stageActivities<SftActivities>(input.taskQueues.api, input.activity);
  const trainer = stageActivities<SftActivities>(input.taskQueues.train ?? input.taskQueues.gpu, input.activity, input.sft.startToCloseTimeout);
  const phase = (name: string, details: string) => {
    progress.phase = name;
    setCurrentDetails(`**${name}**: ${details}`);
  };
  const evaluate = async (which: 'base' | 'sft', finalPrefix?: string): Promise<SftEvalResult | undefined> => {
    const { prompts, chunkSize } = input.sft.eval;
    if (prompts === 0) return undefined;
    const args = { runId: input.runId, sft: input.sft, evalSourceKey: input.evalSourceKey, which, ...(finalPrefix ? { finalPrefix } : {}) };
    // No `chunkSize` (an input recorded before it existed, run/patches.ts): the one-activity check.
    if (chunkSize === undefined) {
      phase(`eval_${which}`, `greedy generations on ${prompts} held-out prompts`);
      return record(which, await acts.sftEvaluate(args));
    }
    // In chunks, spread over every gpu worker; the merge (S3 only) runs on the api queue.
    const chunks = chunkCount(prompts, chunkSize);
    phase(`eval_${which}`, `greedy generations on ${prompts} held-out prompts, ${chunks} chunk(s) of ${chunkSize} over the gpu workers`);
    let done = 0;
    await Promise.all(Array.from({ length: chunks }, async (_, chunk) => {
      await acts.sftEvaluateChunk({ ...args, chunk });
      progress.counts[`${which}_chunks_done`] = ++done;
    }));
    return record(which, await apiActs.sftEvaluateMerge({ runId: input.runId, which, chunks }));
  };
  const record = (which: 'base' | 'sft', r: SftEvalResult): SftEvalResult => {
    progress.counts[`${which}_well_formed_pct`] = Math.round(r.wellFormedShare * 100);
    progress.counts[`${which}_correct_name_pct`] = Math.round(r.correctNameShare * 100);
    return r;
  };

  // A base checkpoint the gpu worker may lack is imported there first (a patch: runs started before this step replay without it).
  if (input.sft.base.kind === 'hf' && input.sft.base.importFrom && patched(PATCH.sftImportBase)) {
    phase('import', `the base model from ${input.sft.base.importFrom} into ${input.sft.base.dir} (skipped when the worker has it)`);
    const imported = await acts.sftImportBase({ runId: input.runId, sft: input.sft });
    if (imported.imported) progress.counts['imported_base'] = 1;
  }
  const base = await evaluate('base');
  // Training on a queue of its own may be served by another engine (a PyTorch worker): it runs from prepared files
  // (the data tokenised, the plan, the initial policy), written on a gpu worker first. A patch: older runs replay without it.
  let prepared: string | undefined;
  if (input.taskQueues.train && patched(PATCH.sftPrepare)) {
    phase('prepare', `the tokenised data, the step plan and the initial policy for the ${input.taskQueues.train} queue`);
    prepared = (await acts.sftPrepare({ runId: input.runId, sft: input.sft, sourceKey: input.sourceKey })).prefix;
  }
  phase('train', `cold-start SFT on the ${input.taskQueues.train ?? input.taskQueues.gpu} queue (progress in the activity heartbeat)`);
  const train = await trainer.sftTrain({ runId: input.runId, sft: input.sft, sourceKey: input.sourceKey, ...(prepared ? { prepared } : {}) });
  progress.counts['steps'] = train.steps;
  const sft = await evaluate('sft', train.finalPrefix);
  phase('report', 'writing the report');
  const report = await acts.writeSftReport({ runId: input.runId, train, ...(base ? { base } : {}), ...(sft ? { sft } : {}) });
  phase('done', `${train.steps} steps, loss ${train.losses[0]?.toFixed(3)} → ${train.losses[train.losses.length - 1]?.toFixed(3)}`);
  endStage();
  return report;
}
