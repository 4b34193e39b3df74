/**
 * The minio-js client of an `S3Config`: endpoint and addressing style, TLS trust, credentials, server-side encryption.
 *
 * - Addressing: `s3.pathStyle`, by default virtual-hosted for AWS's own endpoints (`*.amazonaws.com`) and path style
 *   for every other endpoint (MinIO and most private S3-compatible servers answer only that).
 * - TLS: an `https://` endpoint is verified against Node's built-in roots plus, for a private CA, the PEM file of
 *   `s3.caFile` (`CM2_S3_CA_FILE`) or `AWS_CA_BUNDLE`, given to the client as its https.Agent. Verification is never
 *   turned off; a failed handshake becomes an error that says which certificate check failed and what to set.
 * - Credentials: `S3CredentialChain` (s3Credentials.ts), asked by the client before every request.
 * - Encryption: the `x-amz-server-side-encryption` headers of `s3.sse` / `s3.kmsKeyId`, sent with every write (minio-js
 *   passes them to the single PUT and to the initiation of a multipart upload).
 */
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import tls from 'node:tls';
import { Client } from 'minio';
import { ConfigError, isAwsS3Endpoint, type S3Config } from '../run/config';
import { S3CredentialChain, S3CredentialsError } from './s3Credentials';

export interface S3Connection {
  client: Client;
  credentials: S3CredentialChain;
  /** The endpoint URL as configured (no secrets). */
  endpoint: string;
  /** The extra CA file trusted for the endpoint, with the setting it came from. */
  ca?: { file: string; from: string };
  /** Headers of every write: server-side encryption. */
  writeHeaders: Record<string, string>;
}

/** The `x-amz-server-side-encryption` headers of the config (none for `sse: none`). */
export function sseHeaders(cfg: Pick<S3Config, 'sse' | 'kmsKeyId'>): Record<string, string> {
  if (cfg.sse === 'none') return {};
  return {
    'x-amz-server-side-encryption': cfg.sse,
    ...(cfg.sse === 'aws:kms' && cfg.kmsKeyId ? { 'x-amz-server-side-encryption-aws-kms-key-id': cfg.kmsKeyId } : {}),
  };
}

/** Path-style addressing unless the config says otherwise or the endpoint is AWS's own. */
export const usesPathStyle = (cfg: Pick<S3Config, 'endpoint' | 'pathStyle'>): boolean => cfg.pathStyle ?? !isAwsS3Endpoint(new URL(cfg.endpoint).hostname);

/** The PEM certificates of a CA file, checked (a missing file or one without a certificate is a ConfigError). */
export function readCaFile(file: string, from: string): string[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new ConfigError(from, [{ path: from, message: `cannot read the CA file ${file} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})` }]);
  }
  const pems = text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (!pems.length) throw new ConfigError(from, [{ path: from, message: `${file} holds no PEM certificate (-----BEGIN CERTIFICATE-----)` }]);
  for (const pem of pems) {
    try {
      new X509Certificate(pem);
    } catch (e) {
      throw new ConfigError(from, [{ path: from, message: `${file} holds a certificate that does not parse (${(e as Error).message})` }]);
    }
  }
  return pems;
}

/** The extra CA of an https endpoint: `s3.caFile` (CM2_S3_CA_FILE), else AWS_CA_BUNDLE; paths relative to the working directory. */
function caOf(cfg: S3Config, env: NodeJS.ProcessEnv): S3Connection['ca'] {
  if (!cfg.endpoint.startsWith('https:')) return undefined;
  if (cfg.caFile) return { file: path.resolve(cfg.caFile), from: 's3.caFile' };
  if (env['AWS_CA_BUNDLE']) return { file: path.resolve(env['AWS_CA_BUNDLE']), from: 'AWS_CA_BUNDLE' };
  return undefined;
}

/** A client for the config (nothing is contacted yet: the credentials are resolved on the first request). */
export function makeS3Client(cfg: S3Config, env: NodeJS.ProcessEnv = process.env, opts: { partSize?: number } = {}): S3Connection {
  const url = new URL(cfg.endpoint);
  const useSSL = url.protocol === 'https:';
  const ca = caOf(cfg, env);
  const transportAgent = ca ? new https.Agent({ keepAlive: true, ca: [...tls.rootCertificates, ...readCaFile(ca.file, ca.from)] }) : undefined;
  const credentials = new S3CredentialChain(cfg, env);
  const client = new Client({
    endPoint: url.hostname,
    port: url.port ? Number(url.port) : useSSL ? 443 : 80,
    useSSL,
    region: cfg.region,
    pathStyle: usesPathStyle(cfg),
    credentialsProvider: credentials,
    ...(transportAgent ? { transportAgent } : {}),
    ...(opts.partSize ? { partSize: opts.partSize } : {}),
  });
  return { client, credentials, endpoint: cfg.endpoint, ...(ca ? { ca } : {}), writeHeaders: sseHeaders(cfg) };
}

/** Node's certificate-verification error codes (and a handshake with a server that does not speak TLS). */
const TLS_CODES = /^(UNABLE_TO_|SELF_SIGNED_CERT|DEPTH_ZERO_SELF_SIGNED_CERT|CERT_|ERR_TLS_CERT_ALTNAME_INVALID$|ERR_SSL_|EPROTO$)/;
/** S3 error codes that mean "these credentials are not accepted". */
const AUTH_CODES = new Set(['InvalidAccessKeyId', 'SignatureDoesNotMatch', 'InvalidToken', 'ExpiredToken', 'AccessDenied', 'InvalidClientTokenId']);

/** Says why a request failed, where the bare error would not: TLS trust, credentials (the error's code is kept). */
export function explainS3Error(e: unknown, conn: Pick<S3Connection, 'endpoint' | 'ca' | 'credentials'>): unknown {
  if (!(e instanceof Error)) return e;
  // minio-js wraps a provider's error in "Unable to get credentials: ..."; ours says it better.
  if (e.cause instanceof S3CredentialsError) return e.cause;
  const code = (e as { code?: string }).code ?? '';
  let message: string | undefined;
  if (TLS_CODES.test(code)) {
    const what = code === 'ERR_TLS_CERT_ALTNAME_INVALID' ? 'the certificate is not for this host'
      : code === 'EPROTO' || code.startsWith('ERR_SSL_') ? 'the TLS handshake failed (does the server speak https?)'
      : 'the certificate is not trusted';
    const hint = conn.ca
      ? `The CA file ${conn.ca.file} (${conn.ca.from}, trusted besides the built-in roots) does not vouch for it.`
      : 'For an endpoint with a private CA, set s3.caFile (or CM2_S3_CA_FILE, or AWS_CA_BUNDLE) to the PEM file of the CA.';
    message = `S3 endpoint ${conn.endpoint}: ${what} (${code}: ${e.message}). ${hint} Certificate verification is never turned off.`;
  } else if (AUTH_CODES.has(code)) {
    message = `S3 endpoint ${conn.endpoint}: ${code}: ${e.message} (credentials from ${conn.credentials.source ?? 'the configured source'})`;
  }
  return message ? Object.assign(new Error(message, { cause: e }), { code }) : e;
}
