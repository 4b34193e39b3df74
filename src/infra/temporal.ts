/**
 * The Temporal connection of the CLI, the workers and the tests: address, namespace, TLS (server CA, client
 * certificate for mTLS, server name), a Temporal Cloud API key, and the payload codec when `CM2_CODEC_KEY` is set.
 *
 * Secrets (the API key, key data) are read from the environment when connecting and go nowhere else. The variables
 * are the `temporal` CLI's: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS,
 * TEMPORAL_TLS_SERVER_CA_CERT_PATH / _DATA, TEMPORAL_TLS_CLIENT_CERT_PATH / _DATA, TEMPORAL_TLS_CLIENT_KEY_PATH / _DATA,
 * TEMPORAL_TLS_SERVER_NAME (and the older TEMPORAL_TLS_CA, TEMPORAL_TLS_CERT, TEMPORAL_TLS_KEY and their _DATA).
 */
import { readFileSync } from 'node:fs';
import { Client, Connection, type TLSConfig } from '@temporalio/client';
import type { DataConverter } from '@temporalio/common';
import type { Cm2Config } from '../run/config';
import type { TemporalConfig } from '../run/temporalConfig';
import { codecDataConverter } from './codec';
import { processTracing } from './telemetry';

export class InfraNotRunningError extends Error {
  constructor(what: string, address: string, cause: unknown) {
    super(`${what} is not reachable at ${address} (${(cause as Error).message ?? cause}).\n` +
      `Start the local infrastructure with \`cm2 infra up\` (or \`npm run cm2 -- infra up\`), ` +
      `or point TEMPORAL_ADDRESS / CM2_S3_ENDPOINT at running servers.`);
    this.name = 'InfraNotRunningError';
  }
}

/** A TLS or credential setting that cannot be used (a missing file, half a key pair). */
export class TemporalTlsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TemporalTlsError';
  }
}

/** What both kinds of connection (client, worker) take: address, TLS and API key. */
export interface TemporalConnectionOptions {
  address: string;
  tls?: TLSConfig;
  apiKey?: string;
}

/** PEM inline from the first set variable of `dataVars` (the `temporal` CLI's `*_DATA` forms), else from a file. */
function pem(env: NodeJS.ProcessEnv, dataVars: readonly string[], file: string | undefined, what: string): Buffer | undefined {
  const data = dataVars.map((v) => env[v]).find((v) => v);
  if (data) return Buffer.from(data);
  if (!file) return undefined;
  try {
    return readFileSync(file);
  } catch (e) {
    throw new TemporalTlsError(`temporal.tls: cannot read the ${what} ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
}

/**
 * The connection options of a config: TLS is on when asked for (`tls.enabled`, `TEMPORAL_TLS`) or when a CA, a
 * client certificate, a server name or an API key is given, unless `tls.enabled` is false.
 */
export function temporalConnectionOptions(cfg: TemporalConfig, env: NodeJS.ProcessEnv = process.env): TemporalConnectionOptions {
  const t = cfg.tls;
  const ca = pem(env, ['TEMPORAL_TLS_SERVER_CA_CERT_DATA', 'TEMPORAL_TLS_CA_DATA'], t.caFile, 'CA certificate (caFile)');
  const crt = pem(env, ['TEMPORAL_TLS_CLIENT_CERT_DATA', 'TEMPORAL_TLS_CERT_DATA'], t.certFile, 'client certificate (certFile)');
  const key = pem(env, ['TEMPORAL_TLS_CLIENT_KEY_DATA', 'TEMPORAL_TLS_KEY_DATA'], t.keyFile, 'client key (keyFile)');
  if (['1', 'true'].includes((env['TEMPORAL_TLS_DISABLE_HOST_VERIFICATION'] ?? '').toLowerCase())) {
    throw new TemporalTlsError('TEMPORAL_TLS_DISABLE_HOST_VERIFICATION is not supported: set the name the server certificate is for (temporal.tls.serverName, TEMPORAL_TLS_SERVER_NAME) instead');
  }
  if (!crt !== !key) {
    throw new TemporalTlsError('temporal.tls: a client certificate needs its key and a key its certificate (certFile and keyFile, or TEMPORAL_TLS_CERT / TEMPORAL_TLS_KEY)');
  }
  const apiKey = env[cfg.apiKeyEnv] || undefined;
  const wanted = t.enabled ?? Boolean(ca || crt || t.serverName || apiKey);
  const opts: TemporalConnectionOptions = { address: cfg.address };
  if (wanted) {
    opts.tls = {
      ...(ca ? { serverRootCACertificate: ca } : {}),
      ...(crt && key ? { clientCertPair: { crt, key } } : {}),
      ...(t.serverName ? { serverNameOverride: t.serverName } : {}),
    };
  }
  if (apiKey) opts.apiKey = apiKey;
  return opts;
}

/** How the connection is secured, for messages (never a secret): `TLS (mTLS, API key)`, `plaintext`. */
export function describeConnection(opts: TemporalConnectionOptions): string {
  if (!opts.tls) return opts.apiKey ? 'plaintext, API key' : 'plaintext';
  const parts = [opts.tls.clientCertPair ? 'mTLS' : '', opts.apiKey ? 'API key' : ''].filter(Boolean);
  return `TLS${parts.length ? ` (${parts.join(', ')})` : ''}`;
}

/** The data converter of clients and workers: the encrypting codec when `CM2_CODEC_KEY` is set, else the default. */
export function dataConverter(env: NodeJS.ProcessEnv = process.env): DataConverter | undefined {
  return codecDataConverter(env);
}

/** The server answered but refused the credentials (gRPC UNAUTHENTICATED or PERMISSION_DENIED). */
export class TemporalAuthError extends Error {
  constructor(address: string, security: string, detail: string, apiKeyEnv: string) {
    super(`the Temporal server at ${address} refused the credentials (${security}): ${detail}.\n` +
      `Check the API key in ${apiKeyEnv} (temporal.apiKeyEnv), the client certificate (temporal.tls) and the namespace.`);
    this.name = 'TemporalAuthError';
  }
}

/** The innermost message of an error chain, and its gRPC status code when it has one. */
function rootCause(e: unknown): { message: string; code?: number } {
  let cur: unknown = e;
  for (let i = 0; i < 5 && cur instanceof Error && cur.cause instanceof Error; i++) cur = cur.cause;
  const code = (cur as { code?: unknown } | undefined)?.code;
  return { message: cur instanceof Error ? cur.message : String(cur), ...(typeof code === 'number' ? { code } : {}) };
}

/** The error for a failed connection: refused credentials, or a server that is not there (or not speaking TLS). */
export function connectionError(cfg: TemporalConfig, opts: TemporalConnectionOptions, e: unknown): Error {
  const cause = rootCause(e);
  const security = describeConnection(opts);
  if (cause.code === 16 || cause.code === 7 || /UNAUTHENTICATED|PERMISSION_DENIED/.test(cause.message)) {
    return new TemporalAuthError(cfg.address, security, cause.message, cfg.apiKeyEnv);
  }
  const err = new InfraNotRunningError('the Temporal server', cfg.address, new Error(opts.tls || opts.apiKey ? `${cause.message}; over ${security}` : cause.message));
  if (opts.tls) {
    err.message += `\nWith TLS, also check temporal.tls: the CA that signed the server certificate (caFile), the client certificate and key ` +
      `its CA accepts (certFile, keyFile), and the server name the certificate is for (serverName).`;
  }
  return err;
}

export async function connectClient(cfg: Cm2Config, env: NodeJS.ProcessEnv = process.env): Promise<Client> {
  const opts = temporalConnectionOptions(cfg.temporal, env);
  let connection: Connection;
  try {
    connection = await Connection.connect({ ...opts, connectTimeout: '5s' });
  } catch (e) {
    throw connectionError(cfg.temporal, opts, e);
  }
  const converter = dataConverter(env);
  // With tracing configured, workflow starts, signals, queries and updates are spans, and the workflows continue them.
  const tracing = processTracing(cfg, 'cm2');
  return new Client({
    connection,
    namespace: cfg.temporal.namespace,
    ...(converter ? { dataConverter: converter } : {}),
    ...(tracing ? { interceptors: tracing.clientInterceptors() } : {}),
  });
}
