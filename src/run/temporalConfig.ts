/** The Temporal section of the config: address, namespace, task queues, TLS / API key, activity timeouts. */
import { z } from 'zod';
import { TelemetryMetricsConfig, TelemetryTracingConfig } from './telemetryConfig';

export const TaskQueues = z.object({
  workflows: z.string().default('cm2-workflows').describe('Task queue of the workflow workers (orchestration only).'),
  api: z.string().default('cm2-api').describe('Task queue of the api workers: LLM calls and data I/O.'),
  gpu: z.string().default('cm2-gpu').describe('Task queue of the gpu workers: model training and generation.'),
  train: z.string().min(1).optional()
    .describe('Task queue of the training activities (`rlTrain`, `sftTrain`): the engine that trains a run is whichever workers poll it (`cm2 worker --queues train`). Default: the gpu queue, so the gpu workers train.'),
});

/** Where the training activities go: `taskQueues.train`, else the gpu queue. */
export const trainQueueOf = (queues: { gpu: string; train?: string | undefined }): string => queues.train ?? queues.gpu;

/**
 * TLS to the Temporal frontend. Paths only: certificate and key *data* come from `TEMPORAL_TLS_CLIENT_CERT_DATA`,
 * `TEMPORAL_TLS_CLIENT_KEY_DATA` and `TEMPORAL_TLS_SERVER_CA_CERT_DATA` (as for the `temporal` CLI) and never enter a
 * config file.
 */
export const TemporalTls = z.object({
  enabled: z.boolean().optional()
    .describe('TLS on or off; default: on when a CA, a client certificate, a server name or an API key is given (`TEMPORAL_TLS`).'),
  caFile: z.string().min(1).optional()
    .describe('PEM file of the CA that signed the server certificate; default: the system roots (`TEMPORAL_TLS_SERVER_CA_CERT_PATH`).'),
  certFile: z.string().min(1).optional().describe('PEM client certificate for mTLS, with `keyFile` (`TEMPORAL_TLS_CLIENT_CERT_PATH`).'),
  keyFile: z.string().min(1).optional().describe('PEM private key of the client certificate (`TEMPORAL_TLS_CLIENT_KEY_PATH`).'),
  serverName: z.string().min(1).optional()
    .describe('Server name to verify the certificate against, when it differs from the address host (`TEMPORAL_TLS_SERVER_NAME`).'),
});

export const TemporalConfig = z.object({
  address: z.string().default('127.0.0.1:7233').describe('Temporal frontend address, `host:port`.'),
  namespace: z.string().default('default').describe('Temporal namespace of every workflow of the run.'),
  taskQueues: TaskQueues.prefault({}).describe('Task queue names, one per worker kind (`cm2 worker --queues workflows,api,gpu,train`).'),
  uiUrl: z.string().default('http://127.0.0.1:8233').describe('Web UI base URL, printed by the CLI.'),
  tls: TemporalTls.prefault({})
    .describe('TLS to the Temporal frontend (self-hosted with mTLS, or Temporal Cloud); the `TEMPORAL_TLS*` variables of the `temporal` CLI set it too.'),
  apiKeyEnv: z.string().default('TEMPORAL_API_KEY')
    .describe('Name of the environment variable holding a Temporal Cloud API key (never the key itself); sent as a bearer token, with TLS on.'),
  /** Timeouts of the stage activities (Temporal duration strings such as '30s', '10m'). */
  activity: z.object({
    startToCloseTimeout: z.string().default('30m').describe('Longest single attempt of a stage activity.'),
    heartbeatTimeout: z.string().default('60s')
      .describe('An attempt without a heartbeat for this long (e.g. its worker died) is failed and retried.'),
    maxRetryInterval: z.string().default('60s').describe('Cap of the exponential backoff between activity retries.'),
  }).prefault({}).describe('Timeouts of the stage activities (Temporal duration strings such as `30s`, `10m`).'),
  metrics: TelemetryMetricsConfig.prefault({}).describe('Prometheus metrics of the workers (off unless an address is set).'),
  tracing: TelemetryTracingConfig.prefault({}).describe('OpenTelemetry tracing of workflows and activities (off unless an endpoint is set).'),
});
export type TemporalConfig = z.infer<typeof TemporalConfig>;
