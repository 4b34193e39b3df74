/** Temporal client connection, with a message that says what to start when the server is not there. */
import { Client, Connection } from '@temporalio/client';
import type { Cm2Config } from '../run/config';
import { processTracing } from './telemetry';

export class InfraNotRunningError extends Error {
  constructor(what: string, address: string, cause: unknown) {
    super(`${what} is not reachable at ${address} (${(cause as Error).message ?? cause}).\n` +
      `Start the local infrastructure with \`cm2 infra up\` (or \`npm run cm2 -- infra up\`), ` +
      `or point TEMPORAL_ADDRESS / CM2_S3_ENDPOINT at running servers.`);
    this.name = 'InfraNotRunningError';
  }
}

export async function connectClient(cfg: Cm2Config): Promise<Client> {
  let connection: Connection;
  try {
    connection = await Connection.connect({ address: cfg.temporal.address, connectTimeout: '5s' });
  } catch (e) {
    throw new InfraNotRunningError('the Temporal server', cfg.temporal.address, e);
  }
  // With tracing configured, workflow starts, signals, queries and updates are spans, and the workflows continue them.
  const tracing = processTracing(cfg, 'cm2');
  return new Client({ connection, namespace: cfg.temporal.namespace, ...(tracing ? { interceptors: tracing.clientInterceptors() } : {}) });
}
