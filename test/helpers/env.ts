/**
 * Test helpers for the real servers the test runner started (scripts/run-tests.mjs exports their
 * addresses and the local credentials into the environment).
 */
import { randomBytes } from 'node:crypto';
import { parseConfig, type Cm2Config } from '../../src/run/config';
import { ObjectStore } from '../../src/storage/store';
import { readNativeStatus } from '../../src/model/net/backend';

export function requireTestInfra(): void {
  if (!process.env['TEMPORAL_ADDRESS'] || !process.env['CM2_S3_ENDPOINT']) {
    throw new Error('integration tests need the servers started by `npm test` (scripts/run-tests.mjs)');
  }
}

/** A unique id for a test run (S3 prefix, workflow ids, task queues). */
export const uniqueId = (prefix: string) => `${prefix}-${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`;

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Deep merge of plain objects (arrays and scalars of `b` replace those of `a`). */
export function deepMerge(a: Record<string, unknown>, b: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...a };
  for (const [k, v] of Object.entries(b)) out[k] = isPlainObject(v) && isPlainObject(out[k]) ? deepMerge(out[k] as Record<string, unknown>, v) : v;
  return out;
}

/** A validated config pointing at the test servers, with its own task queues; `overrides` are deep-merged. */
export function testConfig(runId: string, overrides: Record<string, unknown> = {}): Cm2Config {
  requireTestInfra();
  const suffix = runId.replace(/[^a-z0-9]/gi, '').slice(-12);
  return parseConfig(deepMerge({
    run: { id: runId },
    temporal: {
      address: process.env['TEMPORAL_ADDRESS'],
      taskQueues: { workflows: `wf-${suffix}`, api: `api-${suffix}`, gpu: `gpu-${suffix}` },
    },
    s3: { endpoint: process.env['CM2_S3_ENDPOINT'], bucket: 'cm2-test' },
  }, overrides));
}

export function testStore(cfg: Cm2Config): ObjectStore {
  return ObjectStore.fromConfig(cfg.s3);
}

/**
 * The backends the exactness tests (exact resume, exactly-once train steps, parity) run on: the native backend when
 * it is installed (what `auto` picks), and always wasm, the fallback, so both stay right. CM2_TEST_BACKENDS=wasm (a
 * comma list) narrows it.
 */
export function exactnessBackends(): ('tfjs-node' | 'tfjs-node-gpu' | 'wasm')[] {
  const fromEnv = process.env['CM2_TEST_BACKENDS'];
  if (fromEnv) return fromEnv.split(',').map((s) => s.trim()).filter(Boolean) as ('tfjs-node' | 'wasm')[];
  const native = readNativeStatus();
  return native.ok && native.backend ? [native.backend, 'wasm'] : ['wasm'];
}
