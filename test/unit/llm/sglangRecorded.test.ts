/**
 * The SGLang adapter against answers a real SGLang server gave (test/fixtures/sglang: executed cells of SGLang's
 * documentation notebooks and a server output pasted in an SGLang pull request, each file naming its source). A
 * fake fetch replays them; what is checked is how the client reads what SGLang really sends.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SglangEngine, sglangOutput } from '../../../src/llm/engine';
import { LlmFatalError } from '../../../src/llm/errors';

interface Recorded {
  source: { repo: string };
  request: unknown;
  response: Record<string, unknown>;
}
const recorded = (name: string): Recorded => JSON.parse(readFileSync(join(__dirname, '../../fixtures/sglang', `${name}.json`), 'utf8')) as Recorded;

/** An SglangEngine whose fetch answers each call with the next recorded body (and status), keeping the requests. */
function replaying(answers: { body: unknown; status?: number }[]) {
  const sent: { path: string; body: Record<string, unknown> }[] = [];
  const engine = new SglangEngine({ baseUrl: 'http://sglang:30000', retries: 0 });
  (engine as unknown as { fetch: typeof fetch }).fetch = (async (url: string, init: RequestInit) => {
    sent.push({ path: new URL(url).pathname, body: JSON.parse(String(init.body)) as Record<string, unknown> });
    const a = answers.shift();
    if (!a) throw new Error('no more recorded answers');
    return new Response(JSON.stringify(a.body), { status: a.status ?? 200 });
  }) as unknown as typeof fetch;
  return { engine, sent };
}

test('SGLang /generate with return_logprob (a real server\'s answer): the new tokens and their log-probabilities from output_token_logprobs', async () => {
  const r = recorded('generate-logprob-stream-chunk-partial');
  const o = sglangOutput(r.response, 'recorded');
  assert.deepEqual(o.tokens, [16, 13, 12095, 220, 17, 13, 7148]);
  assert.equal(o.logprobs.length, 7);
  assert.equal(o.logprobs[2], -1.4560649394989014);
  assert.equal(o.stop, false, 'finish_reason null: not stopped');
  assert.equal(o.promptTokens, 6);

  const { engine, sent } = replaying([{ body: r.response }]);
  const out = await engine.decode([{ key: 'e1', tokens: [1, 2, 3, 4, 5, 220], maxNewTokens: 7, seed: 9 }], { temperature: 0.7, stopTokens: [151643] });
  assert.deepEqual(out.tokens, [[16, 13, 12095, 220, 17, 13, 7148]]);
  assert.deepEqual(out.finished, [false]);
  const body = sent[0]!.body;
  assert.equal(sent[0]!.path, '/generate');
  assert.deepEqual(body['input_ids'], [1, 2, 3, 4, 5, 220]);
  assert.equal(body['return_logprob'], true);
  assert.equal((body['sampling_params'] as Record<string, unknown>)['sampling_seed'], 9);
  assert.equal('lora_path' in body, false, 'no adapter: the served weights');
  assert.equal(engine.counts.decoded, 7);
});

test('SGLang /generate: a non-streaming answer\'s output_ids begins with the prompt\'s last tokens (0.5.2rc1); only the completion is read', () => {
  // The recorded answer (no log-probabilities were asked for): 7 output_ids, 2 completion tokens.
  const r = recorded('generate-text-stop');
  const meta = r.response['meta_info'] as Record<string, unknown>;
  assert.equal((r.response['output_ids'] as number[]).length, 7);
  assert.equal(meta['completion_tokens'], 2);
  assert.throws(() => sglangOutput(r.response, 'recorded'), (e: unknown) => e instanceof LlmFatalError && /no meta_info\.output_token_logprobs/.test(e.message));
  // With log-probabilities for its two new tokens (as return_logprob adds them), the tokens are the last two ids.
  const withLogprobs = { ...r.response, meta_info: { ...meta, output_token_logprobs: [[-0.1, 12095, null], [-0.01, 151643, null]] } };
  const o = sglangOutput(withLogprobs, 'recorded');
  assert.deepEqual(o.tokens, [12095, 151643]);
  assert.equal(o.stop, true, 'finish_reason {type: stop, matched: <id>}');
  // Ids that disagree with the log-probabilities' are refused, not guessed at.
  const mismatched = { ...withLogprobs, meta_info: { ...withLogprobs.meta_info, output_token_logprobs: [[-0.1, 99, null], [-0.01, 151643, null]] } };
  assert.throws(() => sglangOutput(mismatched, 'recorded'), /output_ids does not end with the 2 tokens/);
});

test('SGLang /generate from a server that sends no output_ids (sglang-jax): the ids of output_token_logprobs', () => {
  const r = recorded('generate-logprob-sglang-jax-partial');
  assert.equal('output_ids' in r.response, false);
  const o = sglangOutput(r.response, 'recorded');
  assert.equal(o.tokens[0], 12095);
  assert.equal(o.tokens.length, o.logprobs.length);
});

test('SGLang weight sync: update_weights_from_disk\'s recorded success, and its recorded failure as a fatal error naming the cause', async () => {
  const ok = recorded('update-weights-from-disk-success');
  const { engine, sent } = replaying([{ body: ok.response }]);
  await engine.loadWeights('/srv/policies/run/v2');
  assert.deepEqual(sent[0], { path: '/update_weights_from_disk', body: { model_path: '/srv/policies/run/v2', flush_cache: true } });
  const bad = recorded('update-weights-from-disk-failure');
  for (const status of [200, 400]) {
    const { engine: e2 } = replaying([{ body: bad.response, status }]);
    await assert.rejects(e2.loadWeights('/nowhere'), (e: unknown) => e instanceof LlmFatalError && /repository not found/.test(e.message));
  }
});

test('SGLang adapters: load_lora_adapter\'s recorded answer; later requests select the adapter by name', async () => {
  const load = recorded('load-lora-adapter-lora0');
  const gen = recorded('generate-logprob-stream-chunk-partial');
  const { engine, sent } = replaying([{ body: { error_message: 'not loaded' }, status: 400 }, { body: load.response }, { body: gen.response }]);
  await engine.loadAdapter('lora0', '/srv/policies/run/v3');
  assert.deepEqual(sent.map((s) => s.path), ['/unload_lora_adapter', '/load_lora_adapter']);
  assert.deepEqual(sent[1]!.body, { lora_name: 'lora0', lora_path: '/srv/policies/run/v3' });
  assert.equal(engine.adapter, 'lora0');
  await engine.decode([{ key: 'e', tokens: [1], maxNewTokens: 7 }]);
  assert.equal(sent[2]!.body['lora_path'], 'lora0');
  // A refused load (success false, as the recorded answers' error_message field) fails loudly.
  const { engine: e2 } = replaying([{ body: {}, status: 200 }, { body: { ...load.response, success: false, error_message: 'rank 64 above --max-lora-rank' } }]);
  await assert.rejects(e2.loadAdapter('x', '/d'), /rank 64 above --max-lora-rank/);
});
