/**
 * A Temporal dev server and a MinIO of a test's own (not the runner's shared ones), which the test may kill and start
 * again on the same SQLite file and data folder: the restart drills and the chaos test. Also what those tests compare
 * between a disturbed run and an undisturbed one.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { freePort, killPid, localCredentials, startMinio, startTemporal } from '../../src/infra/localInfra';
import { runKey } from '../../src/run/layout';
import type { Cm2Config } from '../../src/run/config';
import type { PipelineResult } from '../../src/stages/pipeline/workflow';
import { ObjectStore } from '../../src/storage/store';
import { track, untrack } from './leftovers';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface DedicatedServers {
  /** Their state folder (SQLite file, data, temporal.log and minio.log). */
  dir: string;
  /** Environment for processes that use them (addresses, local S3 credentials). */
  env: Record<string, string>;
  /** `cfg` pointed at these servers (a copy). */
  configure(cfg: Cm2Config): Cm2Config;
  store(cfg: Cm2Config): ObjectStore;
  /** SIGKILL the server, wait `downMs`, start it again on the same state. */
  restartTemporal(downMs?: number): Promise<void>;
  restartMinio(downMs?: number): Promise<void>;
  stop(): Promise<void>;
}

export async function startDedicatedServers(prefix: string): Promise<DedicatedServers> {
  const dir = mkdtempSync(path.join(tmpdir(), `cm2-${prefix}-`));
  const [port, uiPort, s3Port, consolePort] = [await freePort(), await freePort(), await freePort(), await freePort()];
  let temporal = await startTemporal(dir, { port, uiPort });
  track(temporal.pid);
  let minio = await startMinio(dir, { port: s3Port, consolePort });
  track(minio.pid);
  const creds = localCredentials(dir);
  const env = { TEMPORAL_ADDRESS: temporal.address, CM2_S3_ENDPOINT: minio.endpoint, CM2_S3_ACCESS_KEY: creds.accessKey, CM2_S3_SECRET_KEY: creds.secretKey };
  return {
    dir,
    env,
    configure: (cfg) => ({ ...cfg, temporal: { ...cfg.temporal, address: temporal.address }, s3: { ...cfg.s3, endpoint: minio.endpoint } }),
    store: (cfg) => ObjectStore.fromConfig({ ...cfg.s3, endpoint: minio.endpoint }, { ...process.env, ...env }),
    async restartTemporal(downMs = 2000) {
      killPid(temporal.pid, 'SIGKILL');
      untrack(temporal.pid);
      await sleep(downMs);
      temporal = await startTemporal(dir, { port, uiPort });
      track(temporal.pid);
    },
    async restartMinio(downMs = 3000) {
      killPid(minio.pid, 'SIGKILL');
      untrack(minio.pid);
      await sleep(downMs);
      minio = await startMinio(dir, { port: s3Port, consolePort });
      track(minio.pid);
    },
    async stop() {
      killPid(temporal.pid, 'SIGTERM');
      killPid(minio.pid, 'SIGTERM');
      untrack(temporal.pid);
      untrack(minio.pid);
      await sleep(500);
      // A server still writing as it stops leaves the folder briefly non-empty: retry, and never fail the caller.
      try {
        rmSync(dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 300 });
      } catch (e) {
        console.warn(`could not remove ${dir}: ${(e as Error).message}`);
      }
    },
  };
}

const Row = z.looseObject({ step: z.number(), kind: z.string(), weightsSha256: z.string().optional() });

/** [step, sha256 of the weights after it] for every RL step of a run. */
export const stepWeights = async (store: ObjectStore, runId: string) =>
  (await store.getText(runKey(runId, 'rl', 'metrics.jsonl'))).split('\n').filter(Boolean).map((l) => Row.parse(JSON.parse(l))).filter((r) => r.kind === 'step').map((r) => [r.step, r.weightsSha256]);

/** Stage results without what differs between two runs by design (run id, keys, times) or by retries (`omit`). */
export const comparableStages = (r: PipelineResult, omit = /Key$|policy/) =>
  r.stages.map((s) => ({ name: s.name, state: s.state, summary: Object.fromEntries(Object.entries(s.summary).filter(([k]) => !omit.test(k))) }));
