/**
 * Observability of workers and the CLI (docs/observability.md):
 *
 * - Prometheus metrics: the Temporal runtime of a `cm2 worker` process serves the SDK's worker metrics
 *   (`temporal_*`) and the project's own (`cm2_*`, src/kernel/metricNames.ts: recorded through the SDK's workflow and
 *   activity meters) on `http://ADDR/metrics`. The runtime is process-wide and must be installed before the first
 *   worker or native connection exists; a port that cannot be bound is reported and the worker runs without metrics.
 * - OpenTelemetry traces: the SDK's interceptors (@temporalio/interceptors-opentelemetry) on workers (activity
 *   inbound/outbound, the workflow interceptor module in the workflow bundle, the workflow span sink) and on the CLI's
 *   client, exported as OTLP/HTTP JSON to `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT` +
 *   `/v1/traces`, or `temporal.tracing.otlpEndpoint` + `/v1/traces`. Without one nothing is loaded or added.
 *
 * The OpenTelemetry packages are required only when tracing is on, so importing this module costs nothing.
 */
import type { ClientInterceptors } from '@temporalio/client';
import type { WorkerOptions } from '@temporalio/worker';
import type { Tracer } from '@opentelemetry/api';
import type { BasicTracerProvider, SpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { Resource } from '@opentelemetry/resources';
import { MetricsBindAddress } from '../run/telemetryConfig';
import { ConfigError, type Cm2Config } from '../run/config';

// ---------------------------------------------------------------------------------------------------------------
// Metrics

export type MetricsOutcome =
  | { state: 'off' }
  | { state: 'serving'; address: string; url: string }
  | { state: 'failed'; address: string; reason: string };

/**
 * Installs the process's Temporal runtime with a Prometheus endpoint on `address` (IP:PORT or localhost:PORT); no
 * address leaves the SDK's default runtime (no metrics, the no-op meter). Call it before any worker or native
 * connection. A bind failure (the port is taken, the address is not local) is returned, not thrown: the worker
 * runs on without metrics, and the caller says so.
 */
export function installMetricsRuntime(address: string | undefined): MetricsOutcome {
  if (!address) return { state: 'off' };
  const parsed = MetricsBindAddress.safeParse(address);
  if (!parsed.success) return { state: 'failed', address, reason: parsed.error.issues[0]?.message ?? 'invalid address' };
  const { Runtime } = require('@temporalio/worker') as typeof import('@temporalio/worker');
  const bindAddress = address.replace(/^localhost:/, '127.0.0.1:');
  try {
    Runtime.install({ telemetryOptions: { metrics: { prometheus: { bindAddress } } } });
  } catch (e) {
    const reason = (e as Error).message ?? String(e);
    // A runtime created before this call (a worker or connection already made) is a bug of the caller, not of the
    // deployment: say what to change.
    if (/already been (installed|instantiated)/.test(reason)) {
      throw new Error(`metrics: the Temporal runtime of this process already exists (${reason}); install the metrics runtime before the first worker or connection`);
    }
    return { state: 'failed', address, reason };
  }
  return { state: 'serving', address, url: `http://${address}/metrics` };
}

/** A line for the worker's log. */
export function describeMetrics(m: MetricsOutcome): string | undefined {
  if (m.state === 'serving') return `Prometheus metrics on ${m.url}`;
  if (m.state === 'failed') return `cannot serve Prometheus metrics on ${m.address} (${m.reason}); this worker runs without metrics`;
  return undefined;
}

// ---------------------------------------------------------------------------------------------------------------
// Tracing

/**
 * The OTLP/HTTP traces URL, or undefined when tracing is off (OTEL_SDK_DISABLED=true turns it off too). A variable that
 * is not an http(s) URL is a config error (the config file's field is checked by its schema).
 */
export function tracesUrl(tracing: Cm2Config['temporal']['tracing'] | undefined, env: NodeJS.ProcessEnv = process.env): string | undefined {
  if ((env['OTEL_SDK_DISABLED'] ?? '').trim().toLowerCase() === 'true') return undefined;
  const url = (from: string, value: string): string => {
    if (!URL.canParse(value) || !/^https?:$/.test(new URL(value).protocol)) throw new ConfigError('environment', [{ path: from, message: `expected an http(s) URL, got "${value}"` }]);
    return value;
  };
  const traces = env['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT']?.trim();
  if (traces) return url('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', traces);
  const fromEnv = env['OTEL_EXPORTER_OTLP_ENDPOINT']?.trim();
  const base = fromEnv ? url('OTEL_EXPORTER_OTLP_ENDPOINT', fromEnv) : tracing?.otlpEndpoint;
  return base ? `${base.replace(/\/+$/, '')}/v1/traces` : undefined;
}

export interface Tracing {
  readonly url: string;
  readonly tracer: Tracer;
  /** What a worker adds to its options: the SDK's activity interceptors, its workflow interceptor module, the span sink. */
  workerOptions(): Pick<WorkerOptions, 'interceptors' | 'sinks'>;
  /** The SDK's client interceptor: a span per workflow start, signal, query, update, whose context the workflow continues. */
  clientInterceptors(): ClientInterceptors;
  /** Exports what is buffered and stops (bounded: an unreachable collector does not hold the process). */
  shutdown(timeoutMs?: number): Promise<void>;
}

/** The module the worker adds to the workflow bundle (its `interceptors` export: inbound, outbound, internals). */
export const WORKFLOW_TRACING_MODULE = '@temporalio/interceptors-opentelemetry/lib/workflow-interceptors';

let current: Tracing | undefined;

/**
 * This process's tracing, started on first use (one tracer provider per process, registered globally: the SDK's
 * interceptors propagate span contexts through the global propagator); undefined when tracing is off.
 */
export function processTracing(cfg: Cm2Config, defaultService: string, env: NodeJS.ProcessEnv = process.env): Tracing | undefined {
  if (current) return current;
  const url = tracesUrl(cfg.temporal.tracing, env);
  if (!url) return undefined;
  const serviceName = env['OTEL_SERVICE_NAME']?.trim() || cfg.temporal.tracing?.serviceName || defaultService;
  current = startTracing(url, serviceName);
  return current;
}

/** Flushes and stops this process's tracing, if it was started. */
export async function shutdownTracing(timeoutMs = 5000): Promise<void> {
  const t = current;
  current = undefined;
  await t?.shutdown(timeoutMs);
}

function startTracing(url: string, serviceName: string): Tracing {
  const { Resource: ResourceClass } = require('@opentelemetry/resources') as typeof import('@opentelemetry/resources');
  const { BasicTracerProvider: Provider, BatchSpanProcessor } = require('@opentelemetry/sdk-trace-base') as typeof import('@opentelemetry/sdk-trace-base');
  const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-http') as typeof import('@opentelemetry/exporter-trace-otlp-http');
  const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks') as typeof import('@opentelemetry/context-async-hooks');
  const otel = require('@temporalio/interceptors-opentelemetry') as typeof import('@temporalio/interceptors-opentelemetry');

  const resource: Resource = new ResourceClass({ 'service.name': serviceName });
  const processor: SpanProcessor = new BatchSpanProcessor(new OTLPTraceExporter({ url, timeoutMillis: 10_000 }), { scheduledDelayMillis: 1000 });
  const provider: BasicTracerProvider = new Provider({ resource, spanProcessors: [processor] });
  // Global: the interceptors inject and extract span contexts through the global propagator (W3C trace context) and
  // the active context (async-hooks), so a workflow's activities and child workflows join its trace.
  provider.register({ contextManager: new AsyncLocalStorageContextManager().enable() });
  const tracer = provider.getTracer('cm2');
  return {
    url,
    tracer,
    workerOptions: () => ({
      interceptors: {
        workflowModules: [require.resolve(WORKFLOW_TRACING_MODULE)],
        activity: [(ctx) => ({ inbound: new otel.OpenTelemetryActivityInboundInterceptor(ctx, { tracer }), outbound: new otel.OpenTelemetryActivityOutboundInterceptor(ctx) })],
      },
      sinks: { exporter: otel.makeWorkflowExporter(processor, resource) },
    }),
    clientInterceptors: () => ({ workflow: [new otel.OpenTelemetryWorkflowClientInterceptor({ tracer })] }),
    async shutdown(timeoutMs = 5000) {
      let timer: NodeJS.Timeout | undefined;
      const bound = new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)));
      try {
        await Promise.race([provider.shutdown().catch(() => undefined), bound]);
      } finally {
        clearTimeout(timer);
      }
    },
  };
}
