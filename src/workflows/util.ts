/** Small deterministic helpers for workflow code (no I/O, no Node imports). */
import { defineQuery, proxyActivities, setHandler, upsertSearchAttributes, type ActivityInterfaceFor } from '@temporalio/workflow';
import { CM2_RUN_ID, CM2_STAGE, CM2_STATE } from '../common/searchAttributes';
import type { ActivityTimeouts, StageProgress } from './types';

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

export function endStage(): void {
  upsertSearchAttributes([{ key: CM2_STATE, value: 'completed' }]);
}

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
      nonRetryableErrorTypes: ['BadInput', 'BadShard', 'BadConfig', 'ConfigError', 'LlmFatalError', 'BackendUnavailableError'],
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
