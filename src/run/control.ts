/**
 * The signals a user steers a run with (`cm2 rl pause|resume|stop`, `temporal workflow signal --name pause`): the
 * RL workflow and the pipeline (which forwards them to its RL child) both handle them. Pure: workflow code imports it.
 */
import { defineQuery, defineSignal } from '@temporalio/workflow';

export const pauseSignal = defineSignal('pause');
export const resumeSignal = defineSignal('resume');
export const stopSignal = defineSignal('stop');

/** How a run ended, as the experiment trackers record it (MLflow's run status). */
export type RunEnd = 'FINISHED' | 'FAILED' | 'KILLED';

/** What the run's tracking workflow (`cm2-<run>-track`) has sent so far. */
export interface TrackStatus {
  runId: string;
  syncs: number;
  points: number;
  lastSyncAt?: number;
  end?: RunEnd;
}

/** The pipeline tells the run's tracking workflow that the run ended, and how: it syncs a last time and completes. */
export const trackDoneSignal = defineSignal<[{ end: RunEnd }]>('trackDone');
export const trackStatusQuery = defineQuery<TrackStatus>('trackStatus');
