/**
 * `trackWorkflow` (`cm2-<run>-track`): keeps a run's experiment trackers up to date (issue 35). Started by the
 * pipeline beside its stages when `tracking` lists trackers (a child the pipeline never waits for: neither its failure
 * nor a tracker's outage reaches the run), or by `cm2 track sync <run>` for a run after the fact.
 *
 * Every `every` (30 s) it runs `trackSync` on the api queue, which sends each tracker what it lacks from the run's S3
 * (src/tracking/sync.ts: exactly once, a cursor per tracker). A tracker that is down makes the activity fail; Temporal
 * retries it with backoff up to `temporal.activity.maxRetryInterval` apart, for as long as it takes, and the failures show in the api worker's
 * log (`cm2 logs`) and as the activity's last failure in the Web UI. When the pipeline ends it signals `trackDone`
 * with how it ended; the workflow syncs once more, marks the trackers' runs ended, and completes. A pipeline that
 * closes without the signal (`temporal workflow terminate`, a run timeout) cancels it through its parent-close policy
 * (REQUEST_CANCEL): the same last sync, the trackers' runs marked KILLED.
 */
import { CancellationScope, condition, continueAsNew, isCancellation, setCurrentDetails, setHandler, upsertSearchAttributes } from '@temporalio/workflow';
import { trackDoneSignal, trackStatusQuery, type RunEnd, type TrackStatus } from '../../run/control';
import type { ActivityTimeouts } from '../../run/workflowShapes';
import { stageActivities } from '../../run/workflowUtil';
import type { TrackActivities } from './activities';
import type { TrackerConfig } from '../../run/trackingConfig';
import { CM2_RUN_ID, CM2_STAGE, CM2_STATE } from '../../run/layout';

export interface TrackWorkflowInput {
  runId: string;
  trackers: TrackerConfig[];
  /** the api queue */
  taskQueue: string;
  /** The run's activity timeouts (`temporal.activity`): a tracker outage is retried at most `maxRetryInterval` apart. */
  activity: ActivityTimeouts;
  /** Time between syncs (a Temporal duration). Default 30s. */
  every?: string;
  /** Set when the run had ended before a continue-as-new. */
  end?: RunEnd;
}

/** Syncs before the workflow continues as new (keeps its history short over a days-long run). */
const SYNCS_PER_RUN = 400;

export async function trackWorkflow(input: TrackWorkflowInput): Promise<TrackStatus> {
  let end = input.end;
  const status: TrackStatus = { runId: input.runId, syncs: 0, points: 0 };
  setHandler(trackDoneSignal, (s) => {
    end ??= s.end;
  });
  setHandler(trackStatusQuery, () => ({ ...status, ...(end ? { end } : {}) }));
  upsertSearchAttributes([
    { key: CM2_RUN_ID, value: input.runId },
    { key: CM2_STAGE, value: 'track' },
    { key: CM2_STATE, value: 'running' },
  ]);
  // A tracker outage: retried for as long as it lasts, at most `maxRetryInterval` apart.
  const acts = stageActivities<TrackActivities>(input.taskQueue, input.activity, '10m');
  const sync = async (ending?: RunEnd) => {
    // Never cancelled midway: a sync abandoned while its activity still runs would race the last one for the cursors.
    const r = await CancellationScope.nonCancellable(() => acts.trackSync({ runId: input.runId, trackers: input.trackers, ...(ending ? { end: ending } : {}) }));
    status.syncs++;
    status.points += r.trackers.reduce((n, t) => n + t.points, 0);
    status.lastSyncAt = Date.now();
    setCurrentDetails(`**tracking run ${input.runId}** to ${input.trackers.map((t) => t.kind).join(', ')}: ${status.points} points in ${status.syncs} syncs${ending ? `; run ${ending}` : ''}`);
  };
  const finish = async (ending: RunEnd): Promise<TrackStatus> => {
    await sync(ending);
    upsertSearchAttributes([{ key: CM2_STATE, value: 'completed' }]);
    return { ...status, end: ending };
  };
  try {
    for (let i = 0; i < SYNCS_PER_RUN; i++) {
      if (end) return await finish(end);
      await sync();
      await condition(() => end !== undefined, input.every ?? '30s');
    }
  } catch (e) {
    // The pipeline closed without `trackDone` (terminated, timed out: its parent-close policy asks this workflow to
    // cancel), or the workflow itself was cancelled: the trackers get what the run wrote, and the run ends KILLED.
    if (!isCancellation(e)) throw e;
    return await finish(end ?? 'KILLED');
  }
  return continueAsNew<typeof trackWorkflow>({ ...input, ...(end ? { end } : {}) });
}
