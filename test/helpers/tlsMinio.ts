/**
 * A MinIO of its own behind TLS, for the tests of S3 beyond the local MinIO: the binary the test runner uses, the test
 * PKI's server certificate (test/fixtures/tls, for localhost and 127.0.0.1), a free port on 127.0.0.1, a data folder in
 * a temp folder and, on request, a static KMS key (so that it accepts server-side encryption).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import https from 'node:https';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { requireBinary } from '../../src/infra/binaries';
import { freePort } from '../../src/infra/localInfra';
import { track, untrack } from './leftovers';

export const TLS_DIR = path.resolve(__dirname, '..', 'fixtures', 'tls');
export const CA_FILE = path.join(TLS_DIR, 'ca.pem');
/** A CA that did not sign the server certificate. */
export const OTHER_CA_FILE = path.join(TLS_DIR, 'other-ca.pem');

export interface TlsMinio {
  endpoint: string;
  rootUser: string;
  rootPassword: string;
  /** The KMS key name when started with one. */
  kmsKey?: string;
  output(): string;
  stop(): Promise<void>;
}

function healthy(endpoint: string): Promise<boolean> {
  return new Promise((resolve) => {
    const req = https.get(`${endpoint}/minio/health/live`, { ca: readFileSync(CA_FILE), timeout: 2000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(false));
  });
}

export async function startTlsMinio(opts: { kms?: boolean } = {}): Promise<TlsMinio> {
  const dir = mkdtempSync(path.join(tmpdir(), 'cm2-tls-minio-'));
  const certs = path.join(dir, 'certs');
  mkdirSync(path.join(certs, 'CAs'), { recursive: true });
  copyFileSync(path.join(TLS_DIR, 'server.pem'), path.join(certs, 'public.crt'));
  copyFileSync(path.join(TLS_DIR, 'server.key'), path.join(certs, 'private.key'));
  const port = await freePort();
  const rootUser = `tls-${randomBytes(4).toString('hex')}`;
  const rootPassword = randomBytes(18).toString('base64url');
  const kmsKey = opts.kms ? 'cm2-test-key' : undefined;
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    MINIO_ROOT_USER: rootUser,
    MINIO_ROOT_PASSWORD: rootPassword,
    MINIO_BROWSER: 'off',
    MINIO_UPDATE: 'off',
    ...(kmsKey ? { MINIO_KMS_SECRET_KEY: `${kmsKey}:${randomBytes(32).toString('base64')}` } : {}),
  };
  const args = ['server', path.join(dir, 'data'), '--address', `127.0.0.1:${port}`, '--certs-dir', certs, '--quiet'];
  const proc: ChildProcess = spawn(requireBinary('minio'), args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  track(proc.pid);
  proc.once('exit', () => untrack(proc.pid));
  let out = '';
  proc.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  proc.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const endpoint = `https://127.0.0.1:${port}`;
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise((resolve) => proc.once('exit', resolve));
      proc.kill('SIGTERM');
      await Promise.race([exited, sleep(10_000).then(() => proc.kill('SIGKILL'))]);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 60_000;
  while (!(await healthy(endpoint))) {
    if (proc.exitCode !== null || Date.now() > deadline) {
      await stop();
      throw new Error(`MinIO behind TLS did not start on ${endpoint}:\n${out}`);
    }
    await sleep(200);
  }
  return { endpoint, rootUser, rootPassword, ...(kmsKey ? { kmsKey } : {}), output: () => out, stop };
}
