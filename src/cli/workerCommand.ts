/**
 * `cm2 worker`: runs workers until Ctrl-C (SIGINT/SIGTERM shut them down gracefully), optionally serving Prometheus
 * metrics (`--metrics ADDR`) and sending OpenTelemetry traces (src/infra/telemetry.ts).
 *
 * Started by `cm2 demo` (with an IPC channel), it also shuts down when that parent dies without stopping it (a crash,
 * SIGKILL): the channel closes, so a worker never outlives the demo that started it.
 */
import { ConfigError, formatIssues, type Cm2Config } from '../run/config';
import { MetricsBindAddress } from '../run/telemetryConfig';
import { describeMetrics, installMetricsRuntime, processTracing, shutdownTracing } from '../infra/telemetry';
import { ALL_QUEUES, queueName, type QueueKind, startWorkers } from '../workers';
import { describeConnection, temporalConnectionOptions } from '../infra/temporal';
import { codecFromEnv } from '../infra/codec';

export interface WorkerCommandOptions {
  /** `--metrics ADDR`: serve Prometheus metrics there (overrides `temporal.metrics.prometheus` and CM2_METRICS_ADDR). */
  metrics?: string;
}

export async function workerCommand(cfg: Cm2Config, queueList: string, opts: WorkerCommandOptions = {}): Promise<void> {
  const queues = queueList.split(',').map((q) => q.trim()).filter(Boolean) as QueueKind[];
  const unknown = queues.filter((q) => !ALL_QUEUES.includes(q));
  if (unknown.length) throw new Error(`unknown queue(s) ${unknown.join(', ')}; expected ${ALL_QUEUES.join(', ')}`);
  if (opts.metrics !== undefined) {
    const parsed = MetricsBindAddress.safeParse(opts.metrics);
    if (!parsed.success) throw new ConfigError('--metrics', formatIssues(parsed.error).map((i) => ({ ...i, path: '--metrics' })));
  }
  // A closed stdout/stderr (a parent or pager gone) is a display problem: it must not take the workers down.
  process.stdout.on('error', () => undefined);
  process.stderr.on('error', () => undefined);
  // Before any worker or connection: the metrics endpoint belongs to the process's Temporal runtime.
  const metrics = installMetricsRuntime(opts.metrics ?? cfg.temporal.metrics.prometheus);
  const metricsLine = describeMetrics(metrics);
  if (metricsLine) (metrics.state === 'failed' ? console.error : console.log)(`cm2 worker: ${metricsLine}`);
  const tracing = processTracing(cfg, 'cm2-worker');
  if (tracing) console.log(`cm2 worker: tracing workflows and activities to ${tracing.url}`);
  let running;
  try {
    running = await startWorkers(cfg, queues, tracing ? { tracing } : {});
  } catch (e) {
    await shutdownTracing();
    throw e;
  }
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
  const names = [...new Set(queues.map((q) => queueName(cfg, q)))];
  const codec = codecFromEnv();
  const security = `${describeConnection(temporalConnectionOptions(cfg.temporal))}, payloads ${codec ? `encrypted with key ${codec.encryptingKeyId}` : 'not encrypted'}`;
  console.log(`cm2 worker polling ${names.join(', ')} on ${cfg.temporal.address} (namespace ${cfg.temporal.namespace}, ${security}, pid ${process.pid})`);
  try {
    await running.done;
  } finally {
    await shutdownTracing();
  }
}
