/**
 * The activity registry: which activities each task queue serves, built from the stage folders' factories with what
 * they are handed (the object store; the demo world as the offline world, src/stages/world.ts).
 *
 * - `api` queue (`cm2-api`): LLM-bound and I/O-bound activities (prepare, checklist, the RL judge, advantages and
 *   metrics, the pipeline's markers and report, the merges of chunked SFT and BFCL evaluations, the experiment
 *   trackers' sync).
 * - `gpu` queue (`cm2-gpu`): model work (rollouts, the SFT base import, the SFT format check and BFCL in chunks).
 * - `train` queue (`temporal.taskQueues.train`, default: the gpu queue): the training activities, `rlTrain` and
 *   `sftTrain`, which another engine's workers can serve instead (issue 32).
 * - `workflows` queue: no activities (src/workflows/ is its bundle).
 */
import { createChecklistActivities } from '../stages/checklist/activities';
import { createEvalActivities } from '../stages/eval/activities';
import { createPipelineActivities } from '../stages/pipeline/activities';
import { createPrepareActivities } from '../stages/prepare/activities';
import { createRlActivities } from '../stages/rl/activities';
import { createSftActivities } from '../stages/sft/activities';
import { createTrackActivities } from '../stages/track/activities';
import type { OfflineWorld } from '../stages/world';
import type { ObjectStore } from '../storage/store';
import { demoWorld } from '../demo/world';

export interface ActivityRegistry {
  api: Record<string, (...args: never[]) => Promise<unknown>>;
  gpu: Record<string, (...args: never[]) => Promise<unknown>>;
  train: Record<string, (...args: never[]) => Promise<unknown>>;
}

export function activitiesByQueue(store: ObjectStore, world: OfflineWorld = demoWorld): ActivityRegistry {
  // RL: model work (rollouts, updates) on the gpu queue, LLM/S3 work (judge, advantages, metrics) on the api queue.
  const { rlRollout, rlTrain, rlEngineSync, ...rlApi } = createRlActivities({ store, world });
  // The SFT format check and BFCL run in chunks on the gpu queue; their merges (S3 only) on the api queue (and BFCL's
  // on the gpu queue too, for evaluation inputs that name no api queue).
  const { sftEvaluateMerge, sftTrain, ...sftGpu } = createSftActivities({ store });
  const evals = createEvalActivities({ store });
  return {
    api: {
      ...createPrepareActivities({ store, world }),
      ...createChecklistActivities({ store, world }),
      ...rlApi,
      ...createPipelineActivities({ store }),
      ...createTrackActivities({ store }),
      sftEvaluateMerge,
      evalBfclMerge: evals.evalBfclMerge,
    },
    // rlEngineSync: beside the rollouts (it loads the policy to probe the engine, and writes where the engine reads).
    gpu: { ...sftGpu, rlRollout, rlEngineSync, ...evals },
    // One RL activities object: a process serving both queues shares the policy cache between rollouts and updates.
    train: { rlTrain, sftTrain },
  };
}
