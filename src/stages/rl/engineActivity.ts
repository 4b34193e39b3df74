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
 */
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import * as tf from '@tensorflow/tfjs';
import type { z } from 'zod';
import { probeEngine } from '../../llm/engine';
import { engineOf } from './engineClient';
import { saveHfCheckpoint } from '../../model/formats/checkpoint';
import type { QwenModel } from '../../model/net/qwen';
import { policyKey } from '../../run/layout';
import { heartbeat } from '../activityKit';
import type { RlWorker } from './episodesActivity';
import type { RlEngineSyncInput, RlEngineSyncResult } from './shapes';

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

export async function engineSync(w: RlWorker, input: z.infer<typeof RlEngineSyncInput>): Promise<RlEngineSyncResult> {
  const t0 = Date.now();
  const e = input.rl.engine;
  const engine = engineOf(e);
  await w.ensureBackend();
  const model = await w.policies.get(input.policy);
  const prompt = probePrompt(model.config.vocab_size);
  const score = (p: readonly number[], t: readonly number[]) => policyLogprobs(model, p, t);
  const key = policyKey(input.policy);
  const marker = servingMarker(e.syncDir, e.url);
  // The version decides, the probe checks: a policy one small update away from the served one may pass the probe,
  // and must be loaded all the same. The marker says what was loaded last; the probe finds an engine that restarted
  // (or was loaded by someone else) since.
  let before: Awaited<ReturnType<typeof probeEngine>> | undefined;
  if (readMarker(marker) === key) {
    before = await probeEngine(engine, prompt, score);
    if (before.max <= e.probeTolerance) {
      w.log(`rlEngineSync ${input.runId}: ${e.url} serves ${key} already (probe gap ${before.max.toExponential(2)})`);
      return { policy: key, reloaded: false, probe: before, seconds: (Date.now() - t0) / 1000 };
    }
    w.log(`rlEngineSync ${input.runId}: ${e.url} should serve ${key} but the probe disagrees (gap ${before.max.toFixed(3)}): restarted? loading it again`);
  }
  const dir = path.join(e.syncDir, versionFolder(input.runId), versionFolder(key));
  if (!existsSync(path.join(dir, 'config.json'))) {
    const staging = `${dir}.partial-${process.pid}`;
    rmSync(staging, { recursive: true, force: true });
    mkdirSync(path.dirname(dir), { recursive: true });
    heartbeat({ sync: 'export', dir });
    saveHfCheckpoint(staging, model, { untie: true });
    rmSync(dir, { recursive: true, force: true });
    renameSync(staging, dir);
  }
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
  w.log(`rlEngineSync ${input.runId}: ${e.url} loaded ${dir} (probe gap ${after.max.toExponential(2)}${before ? `, ${before.max.toFixed(3)} before` : ''}, ${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  return { policy: key, reloaded: true, dir, probe: after, seconds: (Date.now() - t0) / 1000 };
}
