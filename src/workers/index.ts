/**
 * The workers: one per task queue served, on one connection.
 *
 * - `workflows` queue: every workflow (src/workflows/, the bundle's entry; light: no GPU, no LLM calls).
 * - `api` queue (`cm2-api`): LLM-bound and I/O-bound stage activities (src/activities/), many concurrent slots.
 * - `gpu` queue (`cm2-gpu`): model work (SFT, rollouts, training steps; src/activities/), one slot per accelerator.
 * - `train` queue (`temporal.taskQueues.train`): the training activities alone, when it is a queue of its own; by
 *   default it is the gpu queue, whose workers then train too.
 *
 * One process can serve any subset (`cm2 worker --queues api,gpu`), so users scale out by starting more
 * processes per queue.
 */
import path from 'node:path';
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { activitiesByQueue } from '../activities';
import type { Cm2Config } from '../run/config';
import { trainQueueOf } from '../run/temporalConfig';
import type { Tracing } from '../infra/telemetry';
import { ObjectStore } from '../storage/store';
import { connectionError, dataConverter, temporalConnectionOptions } from '../infra/temporal';

/** The workers' connection (the SDK core's), with the same TLS and API key as the client's. */
export async function connectWorkers(cfg: Cm2Config, env: NodeJS.ProcessEnv = process.env): Promise<NativeConnection> {
  const opts = temporalConnectionOptions(cfg.temporal, env);
  try {
    return await NativeConnection.connect(opts);
  } catch (e) {
    throw connectionError(cfg.temporal, opts, e);
  }
}

export type QueueKind = 'workflows' | 'api' | 'gpu' | 'train';
export const ALL_QUEUES: QueueKind[] = ['workflows', 'api', 'gpu', 'train'];

/** The queue name each kind polls (`train`: the gpu queue unless `temporal.taskQueues.train` names another). */
export function queueName(cfg: Cm2Config, kind: QueueKind): string {
  const q = cfg.temporal.taskQueues;
  return kind === 'train' ? trainQueueOf(q) : q[kind];
}

export interface RunningWorkers {
  workers: Worker[];
  /** Resolves when all workers have stopped after `shutdown()`; rejects (once all have stopped) when one failed. */
  done: Promise<void>;
  shutdown(): Promise<void>;
}

export interface WorkerOptionsOverride {
  /** Max concurrent activities on the api queue. */
  apiConcurrency?: number;
  /** Seconds in-flight activities get to finish on shutdown before they are cancelled. */
  shutdownGraceSeconds?: number;
  /** OpenTelemetry tracing (src/infra/telemetry.ts): its interceptors, workflow module and span sink on every worker. */
  tracing?: Pick<Tracing, 'workerOptions'>;
}

export async function startWorkers(cfg: Cm2Config, queues: QueueKind[] = ALL_QUEUES, opts: WorkerOptionsOverride = {}): Promise<RunningWorkers> {
  // Training on the gpu queue (the default) cannot be served alone: the gpu queue's other tasks would reach this worker.
  const trainOnGpu = queueName(cfg, 'train') === queueName(cfg, 'gpu');
  if (trainOnGpu && queues.includes('train') && !queues.includes('gpu')) {
    throw new Error(`--queues train: the training activities go to the gpu queue (${queueName(cfg, 'gpu')}) unless temporal.taskQueues.train names a queue of their own; set it (and start the gpu workers with the same config) to serve training alone`);
  }
  const connection = await connectWorkers(cfg);
  const store = ObjectStore.fromConfig(cfg.s3);
  await store.ensureBucket();
  const converter = dataConverter();
  const common: Partial<WorkerOptions> = {
    connection,
    namespace: cfg.temporal.namespace,
    ...(converter ? { dataConverter: converter } : {}),
    shutdownGraceTime: `${opts.shutdownGraceSeconds ?? 10}s`,
    shutdownForceTime: `${(opts.shutdownGraceSeconds ?? 10) + 20}s`,
    ...opts.tracing?.workerOptions(),
  };
  const workers: Worker[] = [];
  const activities = activitiesByQueue(store);
  if (queues.includes('workflows')) {
    workers.push(await Worker.create({
      ...common,
      connection,
      taskQueue: cfg.temporal.taskQueues.workflows,
      workflowsPath: path.join(__dirname, '..', 'workflows', 'index.ts'),
    }));
  }
  if (queues.includes('api')) {
    workers.push(await Worker.create({
      ...common,
      connection,
      taskQueue: cfg.temporal.taskQueues.api,
      activities: activities.api,
      maxConcurrentActivityTaskExecutions: opts.apiConcurrency ?? 8,
    }));
  }
  // Model work (SFT, rollouts, train steps) lands on the gpu queue, one slot per accelerator; the training activities
  // too unless the train queue is one of its own.
  const gpuActivities = trainOnGpu ? { ...activities.gpu, ...activities.train } : activities.gpu;
  if (queues.includes('gpu') && Object.keys(gpuActivities).length > 0) {
    workers.push(await Worker.create({
      ...common,
      connection,
      taskQueue: queueName(cfg, 'gpu'),
      activities: gpuActivities,
      maxConcurrentActivityTaskExecutions: 1,
    }));
  }
  if (queues.includes('train') && !trainOnGpu) {
    workers.push(await Worker.create({
      ...common,
      connection,
      taskQueue: queueName(cfg, 'train'),
      activities: activities.train,
      maxConcurrentActivityTaskExecutions: 1,
    }));
  }
  let stopping = false;
  const stopAll = () => {
    for (const w of workers) if (w.getState() === 'RUNNING') w.shutdown();
  };
  // The set stops as a whole: when one worker fails, the others are shut down, and `done` rejects with that failure
  // once all have stopped (so a supervisor can start the set again).
  const done = Promise.allSettled(workers.map((w) => w.run().catch((e: unknown) => {
    // After a requested shutdown, every task is done and polling has stopped; the SDK core's last step can still
    // report the worker "still in use" (a reference-count race in its finalization, seen in the .NET SDK too).
    // That is not a failure of the set: nothing was lost, and a shutdown must not throw for it.
    if (stopping && e instanceof Error && /Worker still in use/.test(e.message)) {
      console.warn(`worker ${w.options.taskQueue}: ${e.message} (at its final shutdown step; ignored)`);
      return;
    }
    stopAll();
    throw e;
  }))).then(async (results) => {
    await connection.close().catch(() => undefined);
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
  });
  return {
    workers,
    done,
    async shutdown() {
      stopping = true;
      stopAll();
      await done;
    },
  };
}
