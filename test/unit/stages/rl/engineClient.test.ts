import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RlConfig } from '../../../../src/run/config';
import { SglangEngine, VllmEngine, requestSeed, sameFingerprint } from '../../../../src/llm/engine';
import { engineOf, usesEngine } from '../../../../src/stages/rl/engineClient';
import { adapterName, isUnknownAdapter, probePrompt, versionFolder } from '../../../../src/stages/rl/engineActivity';
import { engineConfigProblem } from '../../../../src/kernel/engineRules';
import { LlmFatalError, LlmRetryableError } from '../../../../src/llm/errors';

test('rl.engine: embedded by default; a serving engine needs its url and the folder it reads policies from', () => {
  const rl = RlConfig.parse({});
  assert.equal(rl.engine.kind, 'embedded');
  assert.equal(usesEngine(rl), false);
  assert.equal(usesEngine({}), false, 'inputs recorded before rl.engine: embedded');
  assert.throws(() => RlConfig.parse({ engine: { kind: 'vllm', url: 'http://127.0.0.1:8000' } }), /needs rl\.engine\.url and rl\.engine\.syncDir/);
  const v = RlConfig.parse({ engine: { kind: 'vllm', url: 'http://127.0.0.1:8000', syncDir: '/srv/policies' } });
  assert.equal(usesEngine(v), true);
  assert.ok(engineOf(v.engine) instanceof VllmEngine);
  assert.ok(engineOf({ ...v.engine, kind: 'sglang' }) instanceof SglangEngine);
});

test('the engine token comes from the environment variable the config names', async () => {
  const seen: string[] = [];
  const e = RlConfig.parse({ engine: { kind: 'vllm', url: 'http://engine', syncDir: '/x', apiKeyEnv: 'MY_ENGINE_KEY' } }).engine;
  const engine = engineOf(e, { MY_ENGINE_KEY: 's3cret' });
  (engine as unknown as { fetch: typeof fetch }).fetch = (async (_url: string, init: RequestInit) => {
    seen.push(String((init.headers as Record<string, string>).authorization));
    return new Response(JSON.stringify({ choices: [{ token_ids: [7], finish_reason: 'length', logprobs: { token_logprobs: [-0.5] } }] }), { status: 200 });
  }) as unknown as typeof fetch;
  const r = await engine.decode([{ key: 'a', tokens: [1, 2], maxNewTokens: 1 }], { temperature: 1, stopTokens: [9] });
  assert.deepEqual(r, { tokens: [[7]], finished: [false], logprobs: [[-0.5]] });
  assert.deepEqual(seen, ['Bearer s3cret']);
});

test('version folders, probe prompts and request seeds', () => {
  assert.equal(versionFolder('ckpt:runs/demo/rl/checkpoints/step-000002/manifest.json'), 'ckpt_runs_demo_rl_checkpoints_step-000002_manifest.json');
  assert.equal(versionFolder('hf:runs/demo/sft/final'), 'hf_runs_demo_sft_final');
  const p = probePrompt(1024);
  assert.equal(p.length, 12);
  assert.ok(p.every((t) => t >= 0 && t < 1024));
  assert.equal(new Set(p).size, 12);
  const seeds = Array.from({ length: 100 }, (_, i) => requestSeed(42, i));
  assert.ok(seeds.every((s) => Number.isInteger(s) && s >= 0 && s <= 0x7fffffff));
  assert.equal(new Set(seeds).size, 100);
  assert.equal(requestSeed(42, 3), requestSeed(42, 3));
});

test('which engine settings can run: adapters need rl.lora without token rows; one-step-off needs adapters', () => {
  const engine = { kind: 'vllm', url: 'http://e', syncDir: '/d' };
  const lora = { rank: 8, alpha: 16, targets: ['q_proj'] };
  assert.equal(engineConfigProblem(RlConfig.parse({})), undefined);
  assert.equal(engineConfigProblem(RlConfig.parse({ async: 'one-step-off' })), undefined, 'the embedded model: any');
  assert.equal(engineConfigProblem(RlConfig.parse({ engine })), undefined);
  assert.equal(RlConfig.parse({ engine }).engine.sync, 'weights');
  assert.match(engineConfigProblem(RlConfig.parse({ engine, async: 'one-step-off' }))!, /one set of weights at a time.*sync adapter/);
  assert.match(engineConfigProblem(RlConfig.parse({ engine: { ...engine, sync: 'adapter' } }))!, /needs rl\.lora/);
  assert.match(engineConfigProblem(RlConfig.parse({ engine: { ...engine, sync: 'adapter' }, lora: { ...lora, trainTokens: [5] } }))!, /trainTokens/);
  assert.equal(engineConfigProblem(RlConfig.parse({ engine: { ...engine, sync: 'adapter' }, lora, async: 'one-step-off' })), undefined);
  assert.equal(engineConfigProblem({ engine: { kind: 'vllm' } }), undefined, 'inputs recorded before sync: weights');
});

test('adapter names: one per version, and an engine that does not know one says so', () => {
  const a = adapterName('ckpt:runs/r/rl/checkpoints/step-00000002/manifest.json');
  assert.notEqual(a, adapterName('ckpt:runs/r/rl/checkpoints/step-00000003/manifest.json'));
  assert.match(a, /^cm2-[A-Za-z0-9._-]+$/);
  assert.ok(isUnknownAdapter(new LlmFatalError('engine http://e/v1/completions answered HTTP 404: The model `x` does not exist.', { status: 404 }), a));
  assert.ok(isUnknownAdapter(new LlmFatalError(`HTTP 400: adapter ${a} is not loaded`, { status: 400 }), a));
  assert.ok(!isUnknownAdapter(new LlmFatalError('HTTP 400: max_tokens too large', { status: 400 }), a));
  assert.ok(!isUnknownAdapter(new LlmRetryableError('HTTP 503', { kind: 'server', status: 503 }), a), 'an outage is not an unknown adapter');
  const e = engineOf(RlConfig.parse({ engine: { kind: 'vllm', url: 'http://e', syncDir: '/d' } }).engine, {}, a);
  assert.equal(e.adapter, a);
  assert.equal(e.model, 'policy');
});

test('an engine\'s fingerprint: the same answer to the probe, or not (a restarted engine with other weights)', async () => {
  const answers = [
    { tokens: [[4, 5, 6]], finished: [false], logprobs: [[-1, -2, -3]] },
    { tokens: [[4, 5, 6]], finished: [false], logprobs: [[-1, -2.5, -3]] },
    { tokens: [[4, 9, 6]], finished: [false], logprobs: [[-1, -2, -3]] },
  ];
  const seen: unknown[] = [];
  const fake = { counts: { prefilled: 0, reused: 0, shared: 0, decoded: 0 }, dispose() {}, decode: async (req: unknown, opts: unknown) => (seen.push([req, opts]), answers.shift()!) };
  const fp = { prompt: [1, 2], tokens: [4, 5, 6], logprobs: [-1, -2.000001, -3] };
  const first = await sameFingerprint(fake, fp, 0.01);
  assert.ok(first.same && Math.abs(first.gap - 1e-6) < 1e-12, JSON.stringify(first));
  assert.equal((await sameFingerprint(fake, fp, 0.01)).same, false, 'other log-probabilities');
  assert.deepEqual(await sameFingerprint(fake, fp, 0.01), { same: false, gap: Number.POSITIVE_INFINITY }, 'other tokens');
  assert.deepEqual(seen[0], [[{ key: 'probe', tokens: [1, 2], maxNewTokens: 3, seed: 12345 }], { temperature: 1, topP: 1, stopTokens: [] }]);
});
