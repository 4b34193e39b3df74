/**
 * The serving engine of `rl.engine` (issue 33) on the gpu workers: which engine a rollout activity generates with,
 * and `rlEngineSync`, which makes the engine serve a step's policy before its rollouts.
 *
 * The policy's version decides whether to load: a marker beside the versions (`syncDir/.serving/<engine>.json`) names
 * the policy last loaded into that engine. When it is this one, a probe (src/llm/engine.ts `probeEngine`: 16 tokens
 * of a fixed prompt sampled by the engine, scored by the policy loaded here) checks that the engine still serves it, so
 * a retried or replayed sync costs one probe and an engine that restarted with its first weights is loaded again.
 * Otherwise the policy (LoRA merged) is written untied (docs/decisions.md) to `syncDir/<run>/<version>/`, once (a
 * folder is renamed into place complete, and a version's folder is reused), loaded, and probed: a gap above
 * `probeTolerance` fails the step at once (`StaleEngineWeights`), because rollouts from another policy would train on
 * the wrong ratios.
 *
 * With `rl.engine.sync: adapter` a LoRA checkpoint is not merged: its base is served as above (loaded once), and the
 * checkpoint's PEFT files go to the engine as an adapter named after the version (`adapterName`), which the rollouts
 * then select by name. Versions stay loaded side by side, so one-step-off's two policies are served at once.
 */
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import * as tf from '@tensorflow/tfjs';
import type { z } from 'zod';
import { probeEngine, type ProbeResult } from '../../llm/engine';
import { LlmFatalError } from '../../llm/errors';
import { engineOf, type EngineSettings } from './engineClient';
import { saveHfCheckpoint } from '../../model/formats/checkpoint';
import { ADAPTER_CONFIG, ADAPTER_WEIGHTS } from '../../model/net/lora';
import type { QwenModel } from '../../model/net/qwen';
import { policyKey, type PolicyRef } from '../../run/layout';
import { CheckpointManifest, downloadCheckpoint } from '../../storage/checkpoints';
import { isLoraCheckpoint, loraBaseOf } from '../../storage/loraCheckpoint';
import { heartbeat } from '../activityKit';
import type { PolicyCache } from '../../storage/policyStore';
import type { ObjectStore } from '../../storage/store';
import type { RlEngineSyncInput, RlEngineSyncResult } from './shapes';

/** What a sync needs of the gpu worker's RL state (./episodesActivity.ts `RlWorker`). */
export interface SyncWorker {
  store: ObjectStore;
  log: (line: string) => void;
  policies: PolicyCache;
  ensureBackend(): Promise<string>;
}

/** The probe's prompt: a fixed sequence of ids spread over the vocabulary (any ids do: it compares distributions). */
export const probePrompt = (vocab: number): number[] => Array.from({ length: 12 }, (_, i) => (i * 7919 + 13) % vocab);

/** The policy's log-probabilities of `tokens` after `prompt`, at `temperature` (the probe's: 1). */
export function policyLogprobs(model: QwenModel, prompt: readonly number[], tokens: readonly number[], temperature = 1): number[] {
  if (tokens.length === 0) return [];
  const ids = [...prompt, ...tokens];
  const lp = tf.tidy(() => model.tokenLogprobs([ids.slice(0, -1)], [ids.slice(1)], undefined, temperature).arraySync() as number[][]);
  return lp[0]!.slice(prompt.length - 1);
}

/** A version's folder name: the policy key with what a path cannot hold replaced. */
export const versionFolder = (key: string): string => key.replace(/[^A-Za-z0-9._-]+/g, '_').replace(/^_+|_+$/g, '').slice(-180);

/** Where a sync records which policy it last loaded into an engine (per engine URL, beside the versions). */
export const servingMarker = (syncDir: string, url: string): string => path.join(syncDir, '.serving', `${versionFolder(url)}.json`);

function readMarker(file: string): string | undefined {
  try {
    return (JSON.parse(readFileSync(file, 'utf8')) as { policy?: string }).policy;
  } catch {
    return undefined;
  }
}

/** The adapter name an engine serves a LoRA policy version under (unique per version: a name is never reloaded with other weights). */
export const adapterName = (key: string): string => `cm2-${versionFolder(key).slice(-120)}`;

/** An answer saying the engine has no model or adapter by that name (vLLM 404; SGLang 400 naming it). */
export const isUnknownAdapter = (e: unknown, name: string): boolean =>
  e instanceof LlmFatalError && (e.status === 404 || (e.status === 400 && e.message.includes(name)));

export async function engineSync(w: SyncWorker, input: z.infer<typeof RlEngineSyncInput>): Promise<RlEngineSyncResult> {
  const t0 = Date.now();
  const e = input.rl.engine;
  await w.ensureBackend();
  // rl.engine.sync adapter: a LoRA checkpoint goes in as its adapter over its base, which the engine serves first
  if ((e.sync ?? 'weights') === 'adapter' && input.policy.kind === 'ckpt') {
    const manifest = await w.store.getJson(input.policy.manifestKey, CheckpointManifest);
    if (isLoraCheckpoint(manifest)) {
      await serveWeights(w, input.runId, e, loraBaseOf(manifest, input.policy.manifestKey));
      return { ...(await serveAdapter(w, input.runId, e, input.policy)), seconds: (Date.now() - t0) / 1000 };
    }
  }
  return { ...(await serveWeights(w, input.runId, e, input.policy)), seconds: (Date.now() - t0) / 1000 };
}

type Served = Omit<RlEngineSyncResult, 'seconds'>;

/** Full weights: the marker and a probe say whether the engine serves `policy`; else exported, loaded and probed. */
async function serveWeights(w: SyncWorker, runId: string, e: EngineSettings, policy: PolicyRef): Promise<Served> {
  const t0 = Date.now();
  const engine = engineOf(e);
  const model = await w.policies.get(policy);
  const prompt = probePrompt(model.config.vocab_size);
  const score = (p: readonly number[], t: readonly number[]) => policyLogprobs(model, p, t);
  const key = policyKey(policy);
  const marker = servingMarker(e.syncDir, e.url);
  // The version decides, the probe checks: a policy one small update away from the served one may pass the probe,
  // and must be loaded all the same. The marker says what was loaded last; the probe finds an engine that restarted
  // (or was loaded by someone else) since.
  let before: Awaited<ReturnType<typeof probeEngine>> | undefined;
  if (readMarker(marker) === key) {
    before = await probeEngine(engine, prompt, score);
    if (before.max <= e.probeTolerance) {
      w.log(`rlEngineSync ${runId}: ${e.url} serves ${key} already (probe gap ${before.max.toExponential(2)})`);
      return { policy: key, reloaded: false, probe: stats(before), fingerprint: before.sample };
    }
    w.log(`rlEngineSync ${runId}: ${e.url} should serve ${key} but the probe disagrees (gap ${before.max.toFixed(3)}): restarted? loading it again`);
  }
  const dir = path.join(e.syncDir, versionFolder(runId), versionFolder(key));
  await writeOnce(dir, 'config.json', (staging) => {
    saveHfCheckpoint(staging, model, { untie: true });
  });
  heartbeat({ sync: 'load', dir });
  await engine.loadWeights(dir);
  const after = await probeEngine(engine, prompt, score);
  if (after.max > e.probeTolerance) {
    rmSync(marker, { force: true });
    throw ApplicationFailure.nonRetryable(`${e.kind} at ${e.url} does not serve ${key} after loading ${dir}: the probe's largest log-probability gap is ${after.max.toFixed(4)} (tolerance ${e.probeTolerance})`, 'StaleEngineWeights');
  }
  mkdirSync(path.dirname(marker), { recursive: true });
  writeFileSync(`${marker}.${process.pid}`, JSON.stringify({ policy: key, dir, at: new Date().toISOString() }));
  renameSync(`${marker}.${process.pid}`, marker);
  w.log(`rlEngineSync ${runId}: ${e.url} loaded ${dir} (probe gap ${after.max.toExponential(2)}${before ? `, ${before.max.toFixed(3)} before` : ''}, ${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  return { policy: key, reloaded: true, dir, probe: stats(after), fingerprint: after.sample };
}

/**
 * A LoRA checkpoint as an adapter of its own name (the base served already): a probe under that name says whether
 * the engine has it (an engine that does not know the name refuses it); else its PEFT files are copied from the
 * checkpoint, loaded, and probed. Earlier versions stay loaded: one-step-off's rollouts may still be using one.
 */
async function serveAdapter(w: SyncWorker, runId: string, e: EngineSettings, policy: Extract<PolicyRef, { kind: 'ckpt' }>): Promise<Served> {
  const t0 = Date.now();
  const key = policyKey(policy);
  const name = adapterName(key);
  const engine = engineOf(e, process.env, name);
  const model = await w.policies.get(policy);
  const prompt = probePrompt(model.config.vocab_size);
  const score = (p: readonly number[], t: readonly number[]) => policyLogprobs(model, p, t);
  let before: Awaited<ReturnType<typeof probeEngine>> | undefined;
  try {
    before = await probeEngine(engine, prompt, score);
  } catch (err) {
    if (!isUnknownAdapter(err, name)) throw err;
  }
  if (before && before.max <= e.probeTolerance) {
    w.log(`rlEngineSync ${runId}: ${e.url} serves ${key} as adapter ${name} already (probe gap ${before.max.toExponential(2)})`);
    return { policy: key, adapter: name, reloaded: false, probe: stats(before), fingerprint: before.sample };
  }
  const dir = path.join(e.syncDir, versionFolder(runId), versionFolder(key));
  await writeOnce(dir, ADAPTER_WEIGHTS, async (staging) => {
    await downloadCheckpoint(w.store, policy.manifestKey, staging, [ADAPTER_CONFIG, ADAPTER_WEIGHTS]);
  });
  heartbeat({ sync: 'load adapter', dir });
  await engine.loadAdapter(name, dir);
  const after = await probeEngine(engine, prompt, score);
  if (after.max > e.probeTolerance) {
    throw ApplicationFailure.nonRetryable(`${e.kind} at ${e.url} does not serve ${key} as adapter ${name} after loading ${dir}: the probe's largest log-probability gap is ${after.max.toFixed(4)} (tolerance ${e.probeTolerance})`, 'StaleEngineWeights');
  }
  w.log(`rlEngineSync ${runId}: ${e.url} loaded adapter ${name} from ${dir} (probe gap ${after.max.toExponential(2)}${before ? `, ${before.max.toFixed(3)} before` : ''}, ${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  return { policy: key, adapter: name, reloaded: true, dir, probe: stats(after), fingerprint: after.sample };
}

const stats = (p: ProbeResult) => ({ mean: p.mean, max: p.max, tokens: p.tokens });

/** Writes a version's folder once: made complete in a staging folder, then renamed into place; an existing one (with `file`) is reused. */
async function writeOnce(dir: string, file: string, write: (staging: string) => Promise<void> | void): Promise<void> {
  if (existsSync(path.join(dir, file))) return;
  const staging = `${dir}.partial-${process.pid}`;
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(staging, { recursive: true });
  heartbeat({ sync: 'export', dir });
  await write(staging);
  rmSync(dir, { recursive: true, force: true });
  renameSync(staging, dir);
}
