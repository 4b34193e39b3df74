/**
 * The LLM client's `onUsage` hook (what the per-role token and cost metrics count): called once per answer, with the
 * answer's usage when the endpoint was paid and as a free cache hit when the response cache answered; a hook that
 * throws never fails a call.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LlmClient } from '../../../src/llm/client';
import { LlmConfig } from '../../../src/llm/llmConfig';
import type { Usage } from '../../../src/kernel/roleContracts';
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

test('an answer whose cache write fails (the store down) is not paid again by the retry: kept in memory, written once the store answers', async () => {
  const server = await startFakeOpenAI({ behaviour: () => replies.text('verdict') });
  try {
    const cfg = LlmConfig.parse({ roles: { judge: { baseUrl: server.url, model: 'fake' } } });
    const stored = new Map<string, string>();
    let down = false;
    const refuse = () => {
      if (down) throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:9000'), { code: 'ECONNREFUSED' });
    };
    const logs: string[] = [];
    const client = new LlmClient(cfg, {
      cache: {
        get: async (k) => (refuse(), stored.get(k)),
        put: async (k, v) => {
          refuse();
          stored.set(k, v);
        },
      },
      log: (l) => logs.push(l),
      env: {},
    });
    const ask = () => client.chat({ role: 'judge', messages: [{ role: 'user', content: 'is it right?' }], cacheSalt: 'step-3/p1' });
    // The store goes down while the request is in flight: the cache read worked, the write does not.
    server.setBehaviour(() => {
      down = true;
      return replies.text('verdict');
    });
    assert.equal((await ask()).text, 'verdict');
    assert.equal(stored.size, 0);
    assert.match(logs.join('\n'), /could not write the response cache .*ECONNREFUSED.*kept in memory/);
    // The activity fails on the outage (here: the next read) and Temporal retries it once the store is back.
    await assert.rejects(client.chat({ role: 'judge', messages: [{ role: 'user', content: 'another item' }] }), /ECONNREFUSED/);
    down = false;
    const again = await ask();
    assert.equal(again.text, 'verdict');
    assert.equal(again.cached, true);
    assert.equal(server.answered.size, 1, 'the endpoint answered (was paid) once');
    assert.equal([...server.answered.values()][0], 1);
    assert.deepEqual([...stored.values()], ['verdict'], 'written to the cache once the store answered');
  } finally {
    await server.close();
  }
});
