/**
 * `cm2 worker`: runs workers until Ctrl-C (SIGINT/SIGTERM shut them down gracefully).
 *
 * Started by `cm2 demo` (with an IPC channel), it also shuts down when that parent dies without stopping it (a crash,
 * SIGKILL): the channel closes, so a worker never outlives the demo that started it.
 */
import type { Cm2Config } from '../run/config';
import { ALL_QUEUES, type QueueKind, startWorkers } from '../worker';
import { describeConnection, temporalConnectionOptions } from '../infra/temporal';
import { codecFromEnv } from '../infra/codec';

export async function workerCommand(cfg: Cm2Config, queueList: string): Promise<void> {
  const queues = queueList.split(',').map((q) => q.trim()).filter(Boolean) as QueueKind[];
  const unknown = queues.filter((q) => !ALL_QUEUES.includes(q));
  if (unknown.length) throw new Error(`unknown queue(s) ${unknown.join(', ')}; expected ${ALL_QUEUES.join(', ')}`);
  // A closed stdout/stderr (a parent or pager gone) is a display problem: it must not take the workers down.
  process.stdout.on('error', () => undefined);
  process.stderr.on('error', () => undefined);
  const running = await startWorkers(cfg, queues);
  if (process.send) {
    // The channel must not keep this process alive once the workers have stopped.
    process.channel?.unref();
    process.once('disconnect', () => {
      console.log('cm2 worker: the parent process is gone; shutting down');
      void running.shutdown().catch(() => undefined);
      // Bounded: a shutdown stuck in a synchronous model step must not leave an orphan behind.
      setTimeout(() => process.exit(1), 30_000).unref();
    });
  }
  const names = queues.map((q) => (q === 'workflows' ? cfg.temporal.taskQueues.workflows : q === 'api' ? cfg.temporal.taskQueues.api : cfg.temporal.taskQueues.gpu));
  const codec = codecFromEnv();
  const security = `${describeConnection(temporalConnectionOptions(cfg.temporal))}, payloads ${codec ? `encrypted with key ${codec.encryptingKeyId}` : 'not encrypted'}`;
  console.log(`cm2 worker polling ${names.join(', ')} on ${cfg.temporal.address} (namespace ${cfg.temporal.namespace}, ${security}, pid ${process.pid})`);
  await running.done;
}
