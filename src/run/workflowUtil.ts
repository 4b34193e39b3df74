/** Small deterministic helpers for workflow code (no I/O, no Node imports). */
import { defineQuery, proxyActivities, setCurrentDetails, setHandler, upsertSearchAttributes, type ActivityInterfaceFor } from '@temporalio/workflow';
import { CM2_RUN_ID, CM2_STAGE, CM2_STATE } from './layout';
import type { ActivityTimeouts, PhaseProgress, StageProgress } from './workflowShapes';

/** Every stage workflow answers this query (`temporal workflow query --name progress`). */
export const stageProgressQuery = defineQuery<StageProgress>('progress');

/** Registers the progress query and marks the run, stage and state in the search attributes (Web UI filters). */
export function beginStage(stage: string, runId: string): StageProgress {
  const progress: StageProgress = { stage, phase: 'starting', done: 0, total: 0, counts: {} };
  setHandler(stageProgressQuery, () => progress);
  upsertSearchAttributes([
    { key: CM2_RUN_ID, value: runId },
    { key: CM2_STAGE, value: stage },
    { key: CM2_STATE, value: 'running' },
  ]);
  return progress;
}

/** A running phase of a `phaseTracker`: count its units, end it when it is done. */
export interface PhaseHandle {
  tick(): void;
  end(): void;
}

/**
 * Progress per phase: each phase counts against its own total, so phases that run at the same time (compression ∥
 * selection) never push one counter past its total. `progress.phase`/`done`/`total` show the running phases summed,
 * `progress.phases` each of them; the Web UI's current details follow.
 */
export function phaseTracker(
  progress: StageProgress,
  unit = 'shards',
  details: (text: string) => void = setCurrentDetails,
): { only(name: string, total: number): PhaseHandle; add(name: string, total: number): PhaseHandle } {
  const running: PhaseProgress[] = [];
  const show = () => {
    progress.phases = running.map((p) => ({ ...p }));
    if (running.length > 0) progress.phase = running.map((p) => p.name).join(' + ');
    progress.done = running.reduce((n, p) => n + p.done, 0);
    progress.total = running.reduce((n, p) => n + p.total, 0);
    details(running.map((p) => `**${p.name}**: ${p.done}/${p.total} ${unit}`).join(', ') || `**${progress.phase}**`);
  };
  const add = (name: string, total: number): PhaseHandle => {
    const p: PhaseProgress = { name, done: 0, total: Math.max(0, total) };
    running.push(p);
    show();
    return {
      tick: () => {
        p.done = Math.min(p.total, p.done + 1);
        show();
      },
      end: () => {
        const i = running.indexOf(p);
        if (i >= 0) running.splice(i, 1);
        if (running.length > 0) show();
        else progress.phases = [];
      },
    };
  };
  return {
    /** Starts a phase that replaces every running one (sequential phases). */
    only: (name, total) => {
      running.length = 0;
      return add(name, total);
    },
    /** Starts a phase beside the running ones (parallel phases). */
    add,
  };
}

export function endStage(): void {
  upsertSearchAttributes([{ key: CM2_STATE, value: 'completed' }]);
}

/**
 * ApplicationFailure types that fail a stage activity at once instead of being retried: bad input, bad config and fatal
 * LLM errors. A worker in another language raises these types too (src/activities/contracts.ts exports them).
 */
export const NON_RETRYABLE_TYPES = ['BadInput', 'BadShard', 'BadConfig', 'ConfigError', 'LlmFatalError', 'BackendUnavailableError', 'StaleEngineWeights'] as const;

/**
 * The activities of a stage on one task queue. Endpoint outages are waited out (unlimited attempts, backoff capped
 * by `maxRetryInterval`); bad input, bad config and fatal LLM errors fail at once.
 */
export function stageActivities<A extends object>(taskQueue: string, timeouts: ActivityTimeouts, startToCloseTimeout = timeouts.startToCloseTimeout): ActivityInterfaceFor<A> {
  return proxyActivities<A>({
    taskQueue,
    startToCloseTimeout,
    heartbeatTimeout: timeouts.heartbeatTimeout,
    retry: {
      initialInterval: '1s',
      backoffCoefficient: 2,
      maximumInterval: timeouts.maxRetryInterval,
      nonRetryableErrorTypes: [...NON_RETRYABLE_TYPES],
    },
  });
}

/** Runs `fn` over `items` with at most `limit` in flight; results keep the input order. */
export async function boundedAll<T, R>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const lane = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i] as T, i);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, lane));
  return results;
}
