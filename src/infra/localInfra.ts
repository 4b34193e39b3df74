/**
 * Local infrastructure for development, the demo and the tests: a Temporal dev server (SQLite file
 * persistence, Web UI on, the project's search attributes registered) and a MinIO server, both started from
 * installed binaries as detached processes whose pids, addresses and logs live in one state folder
 * (default `.cm2/infra/`).
 *
 * The MinIO credentials of a local instance are generated at first start and kept in the state folder
 * (`credentials.env`, mode 600, git-ignored); `cm2` exports them into its own environment when the user
 * has not set S3 credentials, so they still reach the code only through the environment.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { SEARCH_ATTRIBUTE_FLAGS } from '../run/layout';
import { projectRoot, requireBinary } from './binaries';

export interface InfraState {
  dir: string;
  temporal: { pid: number; address: string; uiUrl: string; dbFile: string };
  minio: { pid: number; endpoint: string; consoleUrl: string; dataDir: string };
  /**
   * The process that started the servers and will stop them (`cm2 demo`); absent when they were started to stay
   * (`cm2 infra up`, `--keep-infra`). A demo that finds the servers up with a dead owner adopts them.
   */
  owner?: { pid: number; command: string };
}

export interface InfraOptions {
  /** State folder; default `.cm2/infra` in the project. */
  dir?: string;
  temporalPort?: number;
  uiPort?: number;
  minioPort?: number;
  minioConsolePort?: number;
  /** Extra `--dynamic-config-value` entries for the dev server (tests lower CAN thresholds with it). */
  dynamicConfig?: string[];
  /** Recorded in the state: who stops these servers (see `InfraState.owner`). */
  owner?: InfraState['owner'];
  log?: (line: string) => void;
}

/**
 * Ports from the environment (`CM2_TEMPORAL_PORT`, `CM2_TEMPORAL_UI_PORT`, `CM2_MINIO_PORT`, `CM2_MINIO_CONSOLE_PORT`),
 * for a second local infrastructure beside the default one (the demo tests run their own). Invalid values are an error.
 */
export function portsFromEnv(env: NodeJS.ProcessEnv = process.env): Pick<InfraOptions, 'temporalPort' | 'uiPort' | 'minioPort' | 'minioConsolePort'> {
  const out: Pick<InfraOptions, 'temporalPort' | 'uiPort' | 'minioPort' | 'minioConsolePort'> = {};
  const names = [['CM2_TEMPORAL_PORT', 'temporalPort'], ['CM2_TEMPORAL_UI_PORT', 'uiPort'], ['CM2_MINIO_PORT', 'minioPort'], ['CM2_MINIO_CONSOLE_PORT', 'minioConsolePort']] as const;
  for (const [name, key] of names) {
    const raw = env[name];
    if (raw === undefined || raw === '') continue;
    const port = Number(raw);
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`${name}=${raw} is not a TCP port (1–65535)`);
    out[key] = port;
  }
  return out;
}

/** Records (or clears) the owner of running servers: who will stop them. */
export function setInfraOwner(dir: string, owner: InfraState['owner'] | undefined): void {
  const state = readInfraState(dir);
  if (!state) return;
  const next: InfraState = { ...state };
  if (owner) next.owner = owner;
  else delete next.owner;
  writeFileSync(stateFile(dir), JSON.stringify(next, null, 2));
}

export const defaultInfraDir = () => process.env['CM2_INFRA_DIR'] ?? path.join(projectRoot, '.cm2', 'infra');

const stateFile = (dir: string) => path.join(dir, 'state.json');
const credentialsFile = (dir: string) => path.join(dir, 'credentials.env');

export function readInfraState(dir = defaultInfraDir()): InfraState | undefined {
  if (!existsSync(stateFile(dir))) return undefined;
  return JSON.parse(readFileSync(stateFile(dir), 'utf8')) as InfraState;
}

/** The local MinIO credentials (creating them on first use). */
export function localCredentials(dir = defaultInfraDir()): { accessKey: string; secretKey: string } {
  const file = credentialsFile(dir);
  if (!existsSync(file)) {
    mkdirSync(dir, { recursive: true });
    const accessKey = 'cm2-local';
    const secretKey = randomBytes(18).toString('base64url');
    writeFileSync(file, `CM2_S3_ACCESS_KEY=${accessKey}\nCM2_S3_SECRET_KEY=${secretKey}\n`, { mode: 0o600 });
  }
  const vars = Object.fromEntries(
    readFileSync(file, 'utf8').split('\n').filter((l) => l.includes('=')).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
  return { accessKey: vars['CM2_S3_ACCESS_KEY'] ?? '', secretKey: vars['CM2_S3_SECRET_KEY'] ?? '' };
}

/**
 * Environment variables that point the project at a running local infrastructure: addresses always,
 * credentials only where the user has not set their own.
 */
export function infraEnv(state: InfraState, env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const creds = localCredentials(state.dir);
  const out: Record<string, string> = {
    TEMPORAL_ADDRESS: state.temporal.address,
    CM2_TEMPORAL_UI_URL: state.temporal.uiUrl,
    CM2_S3_ENDPOINT: state.minio.endpoint,
  };
  if (!env['CM2_S3_ACCESS_KEY']) out['CM2_S3_ACCESS_KEY'] = creds.accessKey;
  if (!env['CM2_S3_SECRET_KEY']) out['CM2_S3_SECRET_KEY'] = creds.secretKey;
  return out;
}

/** Points the process at the local infrastructure when it is running and the user has not said otherwise. */
export function useLocalInfraEnv(): void {
  const state = readInfraState(defaultInfraDir());
  // Only servers that are up: a state file left behind must not point a CLI aimed elsewhere (AWS S3) at 127.0.0.1.
  if (!state || !isAlive(state.temporal.pid) || !isAlive(state.minio.pid)) return;
  for (const [k, v] of Object.entries(infraEnv(state))) process.env[k] ??= v;
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * A free TCP port on 127.0.0.1, below the kernel's ephemeral range: a server killed and restarted on it (the
 * restart drills) must find it free again, and a port from the ephemeral range can be taken meanwhile as the local
 * end of any outgoing connection ("Specified port is already in use", seen under load).
 */
export async function freePort(): Promise<number> {
  let low = 32768;
  try {
    low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || low;
  } catch {
    /* not Linux: the usual default */
  }
  const from = Math.min(20000, low - 1000);
  for (let i = 0; i < 50 && from > 1024; i++) {
    const port = from + Math.floor(Math.random() * (low - from));
    if (await canListen(port)) return port;
  }
  return listenOn(0);
}

async function canListen(port: number): Promise<boolean> {
  try {
    await listenOn(port);
    return true;
  } catch {
    return false;
  }
}

function listenOn(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(port, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === 'object' && addr ? resolve(addr.port) : reject(new Error('no port'))));
    });
  });
}

function tcpOpen(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = net.connect({ host, port });
    sock.setTimeout(1000);
    sock.once('connect', () => { sock.destroy(); resolve(true); });
    sock.once('error', () => resolve(false));
    sock.once('timeout', () => { sock.destroy(); resolve(false); });
  });
}

async function httpOk(url: string): Promise<boolean> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(2000) });
    return res.ok;
  } catch {
    return false;
  }
}

/** Health of the two servers of a state (both answer ⇒ up). */
export async function infraHealth(state: InfraState): Promise<{ temporal: boolean; minio: boolean; ui: boolean }> {
  const [host, port] = state.temporal.address.split(':');
  const [temporal, minio, ui] = await Promise.all([
    tcpOpen(host ?? '127.0.0.1', Number(port)),
    httpOk(`${state.minio.endpoint}/minio/health/live`),
    httpOk(state.temporal.uiUrl),
  ]);
  return { temporal, minio, ui };
}

async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs: number, pid: number, logFile: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    if (!isAlive(pid)) {
      const tail = existsSync(logFile) ? readFileSync(logFile, 'utf8').split('\n').slice(-15).join('\n') : '';
      throw new Error(`${what} exited during start-up; last lines of ${logFile}:\n${tail}`);
    }
    await sleep(200);
  }
  throw new Error(`${what} did not answer within ${timeoutMs / 1000}s (log: ${logFile})`);
}

function spawnDetached(cmd: string, args: string[], logFile: string, env: NodeJS.ProcessEnv): number {
  const fd = openSync(logFile, 'a');
  const child = spawn(cmd, args, { detached: true, stdio: ['ignore', fd, fd], env });
  closeSync(fd);
  child.unref();
  if (!child.pid) throw new Error(`could not start ${cmd}`);
  return child.pid;
}

/** Starts the Temporal dev server only (used by `startInfra` and by restart drills). */
export async function startTemporal(dir: string, opts: { port: number; uiPort: number; dynamicConfig?: string[] }): Promise<InfraState['temporal']> {
  const bin = requireBinary('temporal');
  const dbFile = path.join(dir, 'temporal.db');
  const logFile = path.join(dir, 'temporal.log');
  const args = [
    'server', 'start-dev',
    '--ip', '127.0.0.1', '--port', String(opts.port), '--ui-port', String(opts.uiPort),
    '--db-filename', dbFile, '--log-level', 'warn', '--ui-disable-news-fetch',
    ...SEARCH_ATTRIBUTE_FLAGS.flatMap((sa) => ['--search-attribute', sa]),
    ...(opts.dynamicConfig ?? []).flatMap((dc) => ['--dynamic-config-value', dc]),
  ];
  const pid = spawnDetached(bin, args, logFile, process.env);
  const address = `127.0.0.1:${opts.port}`;
  const uiUrl = `http://127.0.0.1:${opts.uiPort}`;
  await waitFor('the Temporal dev server', () => tcpOpen('127.0.0.1', opts.port), 60_000, pid, logFile);
  return { pid, address, uiUrl, dbFile };
}

/** Starts MinIO only (used by `startInfra` and by restart drills). */
export async function startMinio(dir: string, opts: { port: number; consolePort: number }): Promise<InfraState['minio']> {
  const bin = requireBinary('minio');
  const dataDir = path.join(dir, 'minio-data');
  mkdirSync(dataDir, { recursive: true });
  const logFile = path.join(dir, 'minio.log');
  const creds = localCredentials(dir);
  const env = { ...process.env, MINIO_ROOT_USER: creds.accessKey, MINIO_ROOT_PASSWORD: creds.secretKey, MINIO_BROWSER: 'on', MINIO_UPDATE: 'off' };
  const pid = spawnDetached(bin, ['server', dataDir, '--address', `127.0.0.1:${opts.port}`, '--console-address', `127.0.0.1:${opts.consolePort}`, '--quiet'], logFile, env);
  const endpoint = `http://127.0.0.1:${opts.port}`;
  await waitFor('MinIO', () => httpOk(`${endpoint}/minio/health/live`), 60_000, pid, logFile);
  return { pid, endpoint, consoleUrl: `http://127.0.0.1:${opts.consolePort}`, dataDir };
}

/**
 * Starts both servers (or returns the running ones: idempotent), waits until both answer and records the
 * state. Default ports: Temporal 7233, UI 8233, MinIO 9000, console 9001.
 */
export async function startInfra(opts: InfraOptions = {}): Promise<InfraState> {
  const dir = opts.dir ?? defaultInfraDir();
  mkdirSync(dir, { recursive: true });
  const log = opts.log ?? (() => undefined);
  const existing = readInfraState(dir);
  if (existing && isAlive(existing.temporal.pid) && isAlive(existing.minio.pid)) {
    const health = await infraHealth(existing);
    if (health.temporal && health.minio) {
      log('local infrastructure already running');
      return existing;
    }
  }
  if (existing) await stopInfra(dir);
  const temporal = await startTemporal(dir, { port: opts.temporalPort ?? 7233, uiPort: opts.uiPort ?? 8233, dynamicConfig: opts.dynamicConfig });
  log(`Temporal dev server: ${temporal.address} (Web UI ${temporal.uiUrl})`);
  let minio: InfraState['minio'];
  try {
    minio = await startMinio(dir, { port: opts.minioPort ?? 9000, consolePort: opts.minioConsolePort ?? 9001 });
  } catch (e) {
    killPid(temporal.pid);
    throw e;
  }
  log(`MinIO: ${minio.endpoint} (console ${minio.consoleUrl})`);
  const state: InfraState = { dir, temporal, minio, ...(opts.owner ? { owner: opts.owner } : {}) };
  writeFileSync(stateFile(dir), JSON.stringify(state, null, 2));
  return state;
}

export function killPid(pid: number, signal: NodeJS.Signals = 'SIGTERM'): void {
  try {
    process.kill(pid, signal);
  } catch {
    /* already gone */
  }
}

async function waitExit(pid: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (isAlive(pid) && Date.now() < deadline) await sleep(100);
  if (isAlive(pid)) killPid(pid, 'SIGKILL');
  while (isAlive(pid)) await sleep(50);
}

/** Stops one server process and waits until it is gone (SIGKILL after 10 s). */
export async function stopPid(pid: number): Promise<void> {
  killPid(pid);
  await waitExit(pid, 10_000);
}

/** Stops both servers of a state folder; data (SQLite file, MinIO folder) is kept. */
export async function stopInfra(dir = defaultInfraDir()): Promise<boolean> {
  const state = readInfraState(dir);
  if (!state) return false;
  await Promise.all([stopPid(state.temporal.pid), stopPid(state.minio.pid)]);
  return true;
}
