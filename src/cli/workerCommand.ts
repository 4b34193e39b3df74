/** `cm2 worker`: runs workers until Ctrl-C (SIGINT/SIGTERM shut them down gracefully). */
import type { Cm2Config } from '../infra/config';
import { ALL_QUEUES, type QueueKind, startWorkers } from '../workers';

export async function workerCommand(cfg: Cm2Config, queueList: string): Promise<void> {
  const queues = queueList.split(',').map((q) => q.trim()).filter(Boolean) as QueueKind[];
  const unknown = queues.filter((q) => !ALL_QUEUES.includes(q));
  if (unknown.length) throw new Error(`unknown queue(s) ${unknown.join(', ')}; expected ${ALL_QUEUES.join(', ')}`);
  const running = await startWorkers(cfg, queues);
  const names = queues.map((q) => (q === 'workflows' ? cfg.temporal.taskQueues.workflows : q === 'api' ? cfg.temporal.taskQueues.api : cfg.temporal.taskQueues.gpu));
  console.log(`cm2 worker polling ${names.join(', ')} on ${cfg.temporal.address} (namespace ${cfg.temporal.namespace})`);
  await running.done;
}
