/**
 * The LLM client's `onUsage` hook (what the per-role token and cost metrics count): called once per answer, with the
 * answer's usage when the endpoint was paid and as a free cache hit when the response cache answered; a hook that
 * throws never fails a call.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LlmClient } from '../../../src/llm/client';
import { LlmConfig } from '../../../src/llm/config';
import type { Usage } from '../../../src/kernel/roles';
import { replies, startFakeOpenAI } from '../../helpers/fakeOpenAI';

test('onUsage: a paid answer with its tokens and cost, the same request again from the cache as a free hit; a throwing hook is ignored', async () => {
  const server = await startFakeOpenAI({ behaviour: () => replies.text('ok', { usage: { prompt_tokens: 50, completion_tokens: 5, cached_tokens: 10 } }) });
  try {
    const cfg = LlmConfig.parse({ roles: { filter: { baseUrl: server.url, model: 'fake', pricing: { inputPer1M: 2, cachedInputPer1M: 1, outputPer1M: 8 } } } });
    const cache = new Map<string, string>();
    const seen: { role: string; usage: Usage; cached: boolean }[] = [];
    const client = new LlmClient(cfg, {
      cache: { get: async (k) => cache.get(k), put: async (k, v) => void cache.set(k, v) },
      onUsage: (role, usage, cached) => seen.push({ role, usage, cached }),
      log: () => undefined,
      env: {},
    });
    const ask = () => client.chat({ role: 'filter', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal((await ask()).text, 'ok');
    assert.equal((await ask()).cached, true);
    assert.equal(server.requests.length, 1);
    assert.deepEqual(seen.map((s) => [s.role, s.cached, s.usage.calls, s.usage.cacheHits, s.usage.promptTokens, s.usage.completionTokens]), [
      ['filter', false, 1, 0, 50, 5],
      ['filter', true, 1, 1, 0, 0],
    ]);
    assert.ok(Math.abs(seen[0]!.usage.costUsd - (40 * 2 + 10 * 1 + 5 * 8) / 1e6) < 1e-15);

    const throwing = new LlmClient(cfg, { onUsage: () => {
      throw new Error('metrics broken');
    }, log: () => undefined, env: {} });
    assert.equal((await throwing.chat({ role: 'filter', messages: [{ role: 'user', content: 'again' }] })).text, 'ok');
  } finally {
    await server.close();
  }
});
