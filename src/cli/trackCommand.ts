/**
 * `cm2 track RUN`: the run's experiment trackers (`tracking`) brought up to date now, from this process (a run that
 * ended before its trackers were configured, or a backfill into a new tracker); `--end` marks the trackers' runs ended.
 * `--workflow` starts (or joins) the run's tracking workflow instead, which keeps them up to date while the run goes.
 */
import { WorkflowIdConflictPolicy } from '@temporalio/client';
import { ObjectStore } from '../storage/store';
import type { Cm2Config } from '../run/config';
import { CM2_RUN_ID, CM2_STAGE, trackWorkflowId } from '../run/layout';
import { trackerId } from '../run/trackingConfig';
import { sinkFor } from '../tracking/sinks';
import { syncTracker, type RunEnd } from '../tracking/sync';
import { trackWorkflow } from '../stages/track/workflow';
import { connect } from './pipelineCommand';

export async function trackCommand(cfg: Cm2Config, runId: string, opts: { end?: string; workflow?: boolean }): Promise<void> {
  if (cfg.tracking.length === 0) throw new Error(`the config lists no trackers (\`tracking\`): nothing to send run ${runId} to`);
  const end = opts.end ? (opts.end.toUpperCase() as RunEnd) : undefined;
  if (end && !['FINISHED', 'FAILED', 'KILLED'].includes(end)) throw new Error(`--end ${opts.end}: expected finished, failed or killed`);
  if (opts.workflow) {
    const { client } = await connect(cfg);
    const handle = await client.workflow.start(trackWorkflow, {
      taskQueue: cfg.temporal.taskQueues.workflows,
      workflowId: trackWorkflowId(runId),
      workflowIdConflictPolicy: WorkflowIdConflictPolicy.USE_EXISTING,
      args: [{ runId, trackers: cfg.tracking, taskQueue: cfg.temporal.taskQueues.api, activity: cfg.temporal.activity, ...(end ? { end } : {}) }],
      typedSearchAttributes: [{ key: CM2_RUN_ID, value: runId }, { key: CM2_STAGE, value: 'track' }],
      staticSummary: `CM2 tracking of run ${runId}`,
    });
    console.log(`tracking workflow ${handle.workflowId} (run ${handle.firstExecutionRunId}): ${cfg.tracking.map((t) => t.kind).join(', ')}`);
    return;
  }
  const store = ObjectStore.fromConfig(cfg.s3);
  let failed = 0;
  for (const tracker of cfg.tracking) {
    try {
      const r = await syncTracker(store, runId, tracker, sinkFor(tracker, runId), { ...(end ? { end } : {}), log: (l) => console.log(l) });
      console.log(`${r.tracker} (${tracker.kind}): ${r.points} points, ${r.params} parameters${r.redelivered ? ' (a batch of an earlier attempt delivered again)' : ''}${r.finished ? `, run ${end}` : ''}`);
    } catch (e) {
      failed++;
      console.error(`${trackerId(tracker)} (${tracker.kind}): ${e instanceof Error ? e.message : String(e)}`);
    }
  }
  if (failed) process.exitCode = 1;
}
