/**
 * The tracking workflow's activity (api queue): brings every configured experiment tracker up to date with the run's
 * S3 (src/tracking/sync.ts). Each tracker has its own cursor, so one that is down does not hold the others back: the
 * activity syncs them all, then fails naming those that failed, and Temporal retries it (the run never waits for it).
 */
import { z } from 'zod';
import { ApplicationFailure } from '@temporalio/common';
import { sinkFor } from '../../tracking/sinks';
import { syncTracker } from '../../tracking/sync';
import { trackerId } from '../../run/trackingConfig';
import { type ActivityDeps, heartbeat, parseInput, stageLog } from '../activityKit';
import { TrackSyncInput, type TrackSyncResult } from './shapes';

export function createTrackActivities(deps: ActivityDeps) {
  const { store } = deps;
  const log = stageLog(deps, 'track');
  return {
    async trackSync(raw: z.input<typeof TrackSyncInput>): Promise<TrackSyncResult> {
      const input = parseInput(TrackSyncInput, raw, 'trackSync');
      const results: TrackSyncResult['trackers'] = [];
      const failed: string[] = [];
      for (const tracker of input.trackers) {
        heartbeat({ tracker: trackerId(tracker) });
        try {
          results.push(await syncTracker(store, input.runId, tracker, sinkFor(tracker, input.runId), { ...(input.end ? { end: input.end } : {}), log }));
        } catch (e) {
          const message = `${trackerId(tracker)} (${tracker.kind}${tracker.kind === 'mlflow' ? ` ${tracker.uri}` : ''}): ${e instanceof Error ? e.message : String(e)}`;
          log(`tracking of run ${input.runId} failed: ${message}; retried, the run goes on`);
          failed.push(message);
        }
      }
      if (failed.length) throw ApplicationFailure.retryable(`tracking: ${failed.length} of ${input.trackers.length} tracker(s) not synced: ${failed.join('; ')}`, 'TrackerUnavailable');
      return { trackers: results };
    },
  };
}

export type TrackActivities = ReturnType<typeof createTrackActivities>;
