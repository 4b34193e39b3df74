/**
 * The checklist-annotation stage (CM2 stage 4) as a workflow: orchestration only.
 *
 * input shards → annotate every shard (bounded fan-out) → report. Only shard references and counts pass through
 * history (a few events per shard), so thousands of examples stay far below the history limits. Every activity is
 * idempotent per example (src/stages/checklist/activities.ts): re-running the workflow with the same run id, a retried
 * activity, or a worker killed mid-shard never sends an annotated example to the annotator again.
 */
import { setCurrentDetails } from '@temporalio/workflow';
import type { ChecklistActivities } from './activities';
import type { ChecklistReport } from './shapes';
import type { ChecklistWorkflowInput } from '../../run/workflowShapes';
import { beginStage, boundedAll, endStage, stageActivities, stageProgressQuery } from '../../run/workflowUtil';

/** The stage's progress query (`progress`, shared by every stage). */
export const checklistProgressQuery = stageProgressQuery;

export async function checklistWorkflow(input: ChecklistWorkflowInput): Promise<ChecklistReport> {
  const progress = beginStage('checklist', input.runId);
  const acts = stageActivities<ChecklistActivities>(input.taskQueues.api, input.activity);

  progress.phase = 'input';
  progress.total = 1;
  setCurrentDetails('**input**: reading the examples to annotate');
  const source = await acts.checklistInput({ runId: input.runId, sourceKey: input.sourceKey, shardSize: input.checklist.shardSize });
  progress.counts['input'] = source.total;

  progress.phase = 'annotate';
  progress.done = 0;
  progress.total = source.shards.length;
  progress.counts['annotated'] = 0;
  progress.counts['failed'] = 0;
  const details = () =>
    setCurrentDetails(`**annotate**: ${progress.done}/${progress.total} shards · ${progress.counts['annotated']} annotated · ${progress.counts['failed']} failed`);
  details();
  // Only the annotator's role config travels with each shard (the others default to offline): history per shard
  // stays a few KiB.
  const llm = { roles: { annotator: input.llm.roles.annotator } };
  await boundedAll(source.shards, input.checklist.shardConcurrency, async (shard) => {
    const r = await acts.annotateShard({
      runId: input.runId,
      shard,
      llm,
      variants: input.checklist.variants,
      maxAttempts: input.checklist.maxAttempts,
      retryFailed: input.checklist.retryFailed,
    });
    progress.done++;
    progress.counts['annotated'] = (progress.counts['annotated'] ?? 0) + r.annotated + r.alreadyAnnotated;
    progress.counts['failed'] = (progress.counts['failed'] ?? 0) + r.failed + r.previouslyFailed;
    details();
    return r;
  });

  progress.phase = 'report';
  progress.done = 0;
  progress.total = 1;
  // Fails the stage (not retried) when fewer than `minAnnotated` examples got a checklist; older inputs have no field
  // and get the activity's default.
  const report = await acts.writeChecklistReport({ runId: input.runId, shards: source.shards, inputErrors: source.inputErrors, minAnnotated: input.checklist.minAnnotated });
  progress.phase = 'done';
  progress.done = 1;
  progress.counts['annotated'] = report.annotated;
  progress.counts['failed'] = report.failed;
  setCurrentDetails(`**done**: ${report.annotated} annotated, ${report.failed} failed, $${report.usage.costUsd.toFixed(4)}`);
  endStage();
  return report;
}
