/**
 * LlmClient and the LLM-backed roles against a local fake OpenAI-compatible server
 * (test/helpers/fakeOpenAI.ts): request shape, parameter fallbacks, retry classification, caching,
 * accounting and concurrency.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { ApplicationFailure } from '@temporalio/common';
import { LlmConfig, type LlmRoleConfigInput } from '../../src/llm/llmConfig';
import { LlmClient, type ResponseCache } from '../../src/llm/client';
import { toTemporalFailure, LLM_FATAL_TYPE, LLM_RETRYABLE_TYPE } from '../../src/llm/temporal';
import { FILTER_JSON_SCHEMA } from '../../src/stages/prepare/llmFilter';
import type { DataRoles } from '../../src/kernel/roleContracts';
import type { Example } from '../../src/kernel/schema';
import { replies, startFakeOpenAI, type Behaviour, type FakeOpenAI } from '../helpers/fakeOpenAI';
import { CompressorRole, LlmFilterRole, makeDataRoles } from '../../src/stages/prepare/llmRoles';
import { classifyLlmError, LlmFatalError, LlmRetryableError, parseRetryAfter } from '../../src/llm/errors';

const servers: FakeOpenAI[] = [];
after(async () => {
  await Promise.all(servers.map((s) => s.close()));
});

async function fake(behaviour: Behaviour): Promise<FakeOpenAI> {
  const s = await startFakeOpenAI({ behaviour });
  servers.push(s);
  return s;
}

/** A client whose filter and compressor roles point at `server`; backoff shortened for tests. */
function clientFor(server: FakeOpenAI, role: Partial<LlmRoleConfigInput> = {}, extra: { cache?: ResponseCache; log?: (m: string) => void; env?: NodeJS.ProcessEnv } = {}) {
  const cfg = LlmConfig.parse({
    roles: {
      filter: { baseUrl: server.url, model: 'fake-judge', ...role },
      compressor: { baseUrl: server.url, model: 'fake-compressor', ...role },
    },
  });
  const logs: string[] = [];
  const client = new LlmClient(cfg, {
    backoff: { baseMs: 5, maxMs: 20, maxRetryAfterMs: 5_000 },
    log: extra.log ?? ((m) => logs.push(m)),
    env: extra.env ?? {},
    ...(extra.cache ? { cache: extra.cache } : {}),
  });
  return { client, logs, cfg };
}

const memoryCache = (): ResponseCache & { map: Map<string, string> } => {
  const map = new Map<string, string>();
  return { map, get: async (k) => map.get(k), put: async (k, v) => void map.set(k, v) };
};

const example: Example = {
  uuid: 'u1',
  messages: [
    { role: 'user', content: 'Book a table for two.' },
    { role: 'assistant', content: '<think>\nLong reasoning about which tool.\n</think>', tool_calls: [{ id: 'c', type: 'function', function: { name: 'book', arguments: '{"n":2}' } }] },
    { role: 'tool', content: '{"ok": true}' },
    { role: 'assistant', content: '<think>\nConfirm.\n</think>\n\nBooked!' },
  ],
  tools: [{ type: 'function', function: { name: 'book', parameters: { type: 'object', properties: { n: { type: 'integer' } } } } }],
};

const verdict = { Reasoning: 'fine', NoError: true };
const ask = (client: LlmClient, content = 'hello') =>
  client.chat({ role: 'filter', messages: [{ role: 'user', content }], jsonSchema: FILTER_JSON_SCHEMA });

test('structured output request shape, sampling parameters and API key from the named env var', async () => {
  const s = await fake(() => replies.json(verdict));
  const { client } = clientFor(
    s,
    { temperature: 0.6, topP: 0.8, maxTokens: 123, reasoningEffort: 'high', apiKeyEnv: 'FAKE_LLM_KEY' },
    { env: { FAKE_LLM_KEY: 'sk-test-123' } },
  );
  const res = await ask(client);
  assert.equal(res.text, JSON.stringify(verdict));
  assert.equal(res.cached, false);
  const req = s.requests[0]!;
  assert.equal(req.path, '/v1/chat/completions');
  assert.equal(req.headers.authorization, 'Bearer sk-test-123');
  assert.equal(req.body.model, 'fake-judge');
  assert.deepEqual(req.body.messages, [{ role: 'user', content: 'hello' }]);
  assert.equal(req.body.temperature, 0.6);
  assert.equal(req.body.top_p, 0.8);
  assert.equal(req.body.max_tokens, 123);
  assert.equal(req.body.reasoning_effort, 'high');
  assert.deepEqual(req.body.response_format, {
    type: 'json_schema',
    json_schema: { name: 'filter_verdict', schema: FILTER_JSON_SCHEMA.schema, strict: true },
  });
});

test('unset key env var → placeholder key; per-call effort overrides the configured one', async () => {
  const s = await fake(() => replies.json(verdict));
  const { client } = clientFor(s, { apiKeyEnv: 'UNSET_KEY_VAR', reasoningEffort: 'low' });
  await client.chat({ role: 'filter', messages: [{ role: 'user', content: 'x' }], reasoningEffort: 'medium' });
  assert.equal(s.requests[0]!.headers.authorization, 'Bearer not-needed');
  assert.equal(s.requests[0]!.body.reasoning_effort, 'medium');
  assert.equal(s.requests[0]!.body.response_format, undefined, 'no schema → no response_format');
});

test('response_format rejected → json_object, then none; remembered per role, logged once per step', async () => {
  // This server supports neither json_schema nor json_object.
  const s = await fake((req) => (req.body.response_format ? replies.rejectResponseFormat(req.body.response_format.type) : replies.json(verdict)));
  const { client, logs } = clientFor(s);
  const first = await ask(client, 'one');
  assert.equal(first.text, JSON.stringify(verdict));
  assert.deepEqual(
    s.requests.map((r) => r.body.response_format?.type ?? 'none'),
    ['json_schema', 'json_object', 'none'],
  );
  await ask(client, 'two');
  assert.equal(s.requests.length, 4, 'the second call goes straight to the remembered mode');
  assert.equal(s.requests[3]!.body.response_format, undefined);
  assert.equal(logs.filter((l) => l.includes('rejected response_format')).length, 2);
  assert.match(logs[0]!, /filter: endpoint rejected response_format=json_schema .*using json_object/);
});

test('json_object accepted after json_schema is rejected', async () => {
  const s = await fake((req) => (req.body.response_format?.type === 'json_schema' ? replies.rejectResponseFormat() : replies.json(verdict)));
  const { client, logs } = clientFor(s);
  await ask(client);
  await ask(client, 'again');
  assert.deepEqual(
    s.requests.map((r) => r.body.response_format?.type),
    ['json_schema', 'json_object', 'json_object'],
  );
  assert.equal(logs.length, 1);
});

test('429 with Retry-After is honoured, then success', async () => {
  const s = await fake((_req, ctx) => (ctx.total === 1 ? replies.rateLimited('1') : replies.json(verdict)));
  const { client } = clientFor(s);
  const t0 = Date.now();
  const res = await ask(client);
  assert.equal(res.text, JSON.stringify(verdict));
  assert.equal(s.requests.length, 2);
  const gap = s.requests[1]!.receivedAt - s.requests[0]!.receivedAt;
  assert.ok(gap >= 950, `waited ${gap} ms, Retry-After asked for 1000`);
  assert.ok(Date.now() - t0 < 5_000);
});

test('a Retry-After longer than the in-process budget is handed to Temporal at once', async () => {
  const s = await fake(() => replies.rateLimited('120'));
  const { client } = clientFor(s);
  const err = await ask(client).catch((e: unknown) => e);
  assert.ok(err instanceof LlmRetryableError);
  assert.equal(err.kind, 'rate_limit');
  assert.equal(err.retryAfterMs, 120_000);
  assert.equal(s.requests.length, 1);
  const failure = toTemporalFailure(err);
  assert.ok(failure instanceof ApplicationFailure);
  assert.equal(failure.type, LLM_RETRYABLE_TYPE);
  assert.equal(failure.nonRetryable, false);
  assert.equal(failure.nextRetryDelay, 120_000);
  assert.equal(failure.category, 'BENIGN');
});

test('429s do not use up maxTransportRetries; a 503 between them does', async () => {
  const limited = (): ReturnType<typeof replies.status> => replies.status(429, { code: 'rate_limit_exceeded', headers: { 'retry-after': '1', 'retry-after-ms': '20' } });
  const s = await fake((_req, ctx) => (ctx.total <= 6 ? limited() : ctx.total === 7 ? replies.status(503) : replies.json(verdict)));
  const { client } = clientFor(s, { maxTransportRetries: 1 });
  const res = await ask(client);
  assert.equal(res.text, JSON.stringify(verdict));
  assert.equal(s.requests.length, 8);
  // retry-after-ms is honoured (not the whole second of Retry-After).
  assert.ok(s.requests[6]!.receivedAt - s.requests[0]!.receivedAt < 2_000);
  // One more 503 and the call fails: the 429s left both transport retries to the 503s.
  const s2 = await fake((_req, ctx) => (ctx.total <= 3 ? limited() : replies.status(503)));
  const err = await ask(clientFor(s2, { maxTransportRetries: 1 }).client).catch((e: unknown) => e);
  assert.ok(err instanceof LlmRetryableError && err.kind === 'server', String(err));
  assert.equal(s2.requests.length, 5);
});

test('a 429 that never ends goes to Temporal after maxRateLimitWaitMs', async () => {
  const s = await fake(() => replies.status(429, { code: 'rate_limit_exceeded', headers: { 'retry-after-ms': '50' } }));
  const client = new LlmClient(LlmConfig.parse({ roles: { filter: { baseUrl: s.url, model: 'm' } } }), { backoff: { maxRateLimitWaitMs: 500 }, log: () => undefined, env: {} });
  const t0 = Date.now();
  const err = await client.chat({ role: 'filter', messages: [{ role: 'user', content: 'x' }] }).catch((e: unknown) => e);
  assert.ok(err instanceof LlmRetryableError && err.kind === 'rate_limit', String(err));
  assert.ok(Date.now() - t0 < 3_000);
  assert.ok(s.requests.length >= 5, `${s.requests.length} requests`);
  assert.equal(toTemporalFailure(err).category, 'BENIGN');
});

test('503 burst then success', async () => {
  const s = await fake((_req, ctx) => (ctx.total <= 2 ? replies.status(503, { message: 'overloaded' }) : replies.json(verdict)));
  const { client } = clientFor(s, { maxTransportRetries: 2 });
  const res = await ask(client);
  assert.equal(res.text, JSON.stringify(verdict));
  assert.equal(s.requests.length, 3);
});

test('persistent 503 → LlmRetryableError after 1 + maxTransportRetries attempts', async () => {
  const s = await fake(() => replies.status(503));
  const { client } = clientFor(s, { maxTransportRetries: 2 });
  const err = await ask(client).catch((e: unknown) => e);
  assert.ok(err instanceof LlmRetryableError, String(err));
  assert.equal(err.kind, 'server');
  assert.equal(err.status, 503);
  assert.equal(err.attempts, 3);
  assert.equal(s.requests.length, 3);
  const failure = toTemporalFailure(err);
  assert.equal(failure.nonRetryable, false);
  assert.equal(failure.nextRetryDelay, undefined);
});

test('401 → LlmFatalError, no retry, non-retryable Temporal failure', async () => {
  const s = await fake(() => replies.status(401, { message: 'Incorrect API key provided' }));
  const { client } = clientFor(s);
  const err = await ask(client).catch((e: unknown) => e);
  assert.ok(err instanceof LlmFatalError, String(err));
  assert.equal(err.status, 401);
  assert.equal(s.requests.length, 1);
  const failure = toTemporalFailure(err);
  assert.equal(failure.type, LLM_FATAL_TYPE);
  assert.equal(failure.nonRetryable, true);
});

test('400 not about response_format → fatal; 429 insufficient_quota → fatal', async () => {
  const s = await fake((_req, ctx) =>
    ctx.total === 1 ? replies.status(400, { message: "This model's maximum context length is 8192 tokens" }) : replies.status(429, { code: 'insufficient_quota', message: 'You exceeded your current quota' }),
  );
  const { client } = clientFor(s);
  const e1 = await ask(client).catch((e: unknown) => e);
  assert.ok(e1 instanceof LlmFatalError && e1.status === 400, String(e1));
  const e2 = await ask(client, 'b').catch((e: unknown) => e);
  assert.ok(e2 instanceof LlmFatalError && e2.status === 429, String(e2));
  assert.equal(s.requests.length, 2);
});

test('timeout → LlmRetryableError(kind timeout)', async () => {
  const s = await fake(() => replies.hang());
  const { client } = clientFor(s, { timeoutMs: 150, maxTransportRetries: 1 });
  const t0 = Date.now();
  const err = await ask(client).catch((e: unknown) => e);
  assert.ok(err instanceof LlmRetryableError, String(err));
  assert.equal(err.kind, 'timeout');
  assert.equal(s.requests.length, 2);
  assert.ok(Date.now() - t0 < 3_000);
});

test('connection refused → LlmRetryableError(kind connection)', async () => {
  const s = await fake(() => replies.json(verdict));
  const url = s.url;
  await s.close();
  servers.splice(servers.indexOf(s), 1);
  const cfg = LlmConfig.parse({ roles: { filter: { baseUrl: url, model: 'm', maxTransportRetries: 0 } } });
  const client = new LlmClient(cfg, { log: () => {}, env: {} });
  const err = await ask(client).catch((e: unknown) => e);
  assert.ok(err instanceof LlmRetryableError, String(err));
  assert.equal(err.kind, 'connection');
});

test('unparseable output → parse retries, then { ok: false } (never a throw)', async () => {
  const s = await fake(() => replies.text('I refuse to answer in JSON.'));
  const { client } = clientFor(s, { maxParseAttempts: 3 }, { cache: memoryCache() });
  const out = await new LlmFilterRole(client).judge(example, { pass: 0, effort: 'low' });
  assert.equal(out.ok, false);
  if (out.ok) return;
  assert.equal(out.attempts, 3);
  assert.equal(out.usage.calls, 3);
  assert.equal(out.raw, 'I refuse to answer in JSON.');
  assert.match(out.reason, /unparseable answer after 3 attempt\(s\)/);
  assert.equal(s.requests.length, 3, 'each parse retry asks the model again despite the cache');
});

test('parse retry succeeds on the second answer', async () => {
  const s = await fake((_req, ctx) => (ctx.total === 1 ? replies.text('{"Reasoning": "x"}') : replies.json({ Reasoning: 'bad arg', NoError: false })));
  const { client } = clientFor(s);
  const out = await new LlmFilterRole(client).judge(example, { pass: 2, effort: 'medium' });
  assert.deepEqual(out.ok && out.value, { noError: false, reasoning: 'bad arg' });
  assert.equal(out.attempts, 2);
  assert.equal(s.requests[0]!.body.reasoning_effort, 'medium');
});

test('cache: a hit avoids the request; same pass shares, other passes do not', async () => {
  const s = await fake(() => replies.json(verdict, { usage: { prompt_tokens: 100, completion_tokens: 10 } }));
  const cache = memoryCache();
  const { client } = clientFor(s, {}, { cache });
  const role = new LlmFilterRole(client);

  const a = await role.judge(example, { pass: 0, effort: 'low' });
  assert.equal(s.requests.length, 1);
  assert.equal(cache.map.size, 1);

  // A retried activity re-running pass 0: answered from the cache, free.
  const b = await role.judge(example, { pass: 0, effort: 'low' });
  assert.equal(s.requests.length, 1, 'no second request');
  assert.deepEqual(b.ok && b.value, a.ok && a.value);
  assert.deepEqual(b.usage, { calls: 1, promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0, costUsd: 0, cacheHits: 1 });

  // Pass 1 at the same effort is a fresh, independent judgement.
  await role.judge(example, { pass: 1, effort: 'low' });
  assert.equal(s.requests.length, 2);
  assert.equal(s.counts.size, 1, 'same messages at the server…');
  assert.equal([...s.counts.values()][0], 2, '…asked twice, once per pass');

  const direct = await ask(client, 'plain');
  const again = await ask(client, 'plain');
  assert.equal(direct.cached, false);
  assert.equal(again.cached, true);
  assert.equal(again.text, direct.text);
});

test('cache: the answer is stored before parsing, so an unparseable answer is not paid twice', async () => {
  const s = await fake(() => replies.text('garbage'));
  const cache = memoryCache();
  const { client } = clientFor(s, { maxParseAttempts: 2 }, { cache });
  await new CompressorRole(client).compress(example);
  assert.equal(s.requests.length, 2);
  assert.equal(cache.map.size, 2);
  // A retried activity replays both attempts from the cache.
  const again = await new CompressorRole(client).compress(example);
  assert.equal(s.requests.length, 2);
  assert.equal(again.usage.cacheHits, 2);
});

test('usage and cost accounting', async () => {
  const s = await fake(() => replies.json(verdict, { usage: { prompt_tokens: 1000, cached_tokens: 200, completion_tokens: 500 } }));
  const { client } = clientFor(s, { pricing: { inputPer1M: 1.25, cachedInputPer1M: 0.125, outputPer1M: 10 } });
  const res = await ask(client);
  assert.equal(res.usage.calls, 1);
  assert.equal(res.usage.promptTokens, 1000);
  assert.equal(res.usage.cachedPromptTokens, 200);
  assert.equal(res.usage.completionTokens, 500);
  assert.equal(res.usage.cacheHits, 0);
  // 800 × 1.25 + 200 × 0.125 + 500 × 10, per million.
  assert.ok(Math.abs(res.usage.costUsd - 0.006025) < 1e-12, String(res.usage.costUsd));
  await ask(client, 'second');
  const totals = client.usageTotals();
  assert.equal(totals.filter.calls, 2);
  assert.ok(Math.abs(totals.filter.costUsd - 0.01205) < 1e-12);
  assert.equal(totals.judge.calls, 0);
});

test('the reference gpt-5 usage example costs $0.13348', async () => {
  const s = await fake(() => replies.json(verdict, { usage: { prompt_tokens: 5080, cached_tokens: 0, completion_tokens: 12713 } }));
  const { client } = clientFor(s, { pricing: { inputPer1M: 1.25, cachedInputPer1M: 0.125, outputPer1M: 10 } });
  const res = await ask(client);
  assert.equal(Math.round(res.usage.costUsd * 1e6) / 1e6, 0.13348);
});

test('concurrency bound per role is respected (observed at the server)', async () => {
  const s = await fake(() => replies.json(verdict, { delayMs: 60 }));
  const { client } = clientFor(s, { concurrency: 2 });
  await Promise.all(Array.from({ length: 7 }, (_, i) => ask(client, `q${i}`)));
  assert.equal(s.requests.length, 7);
  assert.equal(s.maxInFlight, 2);
  assert.equal(s.inFlight, 0);
});

test('CompressorRole: one compressed thinking per assistant message', async () => {
  const s = await fake(() => replies.json({ thinkings: [{ thinking: 'Book it.' }, { thinking: 'Confirm.' }] }));
  const { client } = clientFor(s, { reasoningEffort: 'medium' });
  const out = await new CompressorRole(client).compress(example);
  assert.deepEqual(out.ok && out.value, ['Book it.', 'Confirm.']);
  const body = s.requests[0]!.body;
  assert.equal(body.model, 'fake-compressor');
  assert.equal(body.reasoning_effort, 'medium');
  assert.equal(body.response_format?.json_schema?.name, 'compressed_thinkings');
  assert.match(String(body.messages?.[1]?.content), /^\{\n {4}"tools"/);
});

test('makeDataRoles: LLM-backed where a baseUrl is set, offline elsewhere', async () => {
  const s = await fake(() => replies.json(verdict));
  let offlineBuilt = 0;
  const offline = (): DataRoles => {
    offlineBuilt++;
    return {
      filter: { judge: async () => ({ ok: true, value: { noError: true, reasoning: 'offline' }, usage: { calls: 0, promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0, costUsd: 0, cacheHits: 0 }, attempts: 1 }) },
      compressor: { compress: async () => ({ ok: false, reason: 'offline', usage: { calls: 0, promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0, costUsd: 0, cacheHits: 0 }, attempts: 1 }) },
      describe: () => ({ filter: 'offline', compressor: 'offline' }),
    };
  };

  const allOffline = makeDataRoles(LlmConfig.parse({}), { offline });
  assert.deepEqual(allOffline.describe(), { filter: 'offline', compressor: 'offline' });
  assert.equal(offlineBuilt, 1);

  offlineBuilt = 0;
  const mixed = makeDataRoles(LlmConfig.parse({ roles: { filter: { baseUrl: s.url, model: 'judge-model' } } }), { offline, log: () => {} });
  assert.deepEqual(mixed.describe(), { filter: 'judge-model', compressor: 'offline' });
  const v = await mixed.filter.judge(example, { pass: 0, effort: 'low' });
  assert.deepEqual(v.ok && v.value, { noError: true, reasoning: 'fine' });
  assert.equal(s.requests.length, 1);
  const c = await mixed.compressor.compress(example);
  assert.equal(c.ok, false);
  assert.equal(offlineBuilt, 1, 'offline roles are built once');

  offlineBuilt = 0;
  makeDataRoles(LlmConfig.parse({ roles: { filter: { baseUrl: s.url, model: 'a' }, compressor: { baseUrl: s.url, model: 'b' } } }), { offline });
  assert.equal(offlineBuilt, 0, 'not built when no role needs it');
});

test('calling an offline role through the client is a fatal configuration error', async () => {
  const client = new LlmClient(LlmConfig.parse({}), { log: () => {} });
  await assert.rejects(() => client.chat({ role: 'judge', messages: [{ role: 'user', content: 'x' }] }), LlmFatalError);
});

test('parseRetryAfter and classifyLlmError on plain values', () => {
  const h = (entries: Record<string, string>) => new Headers(entries);
  assert.equal(parseRetryAfter(h({ 'retry-after': '2' })), 2000);
  assert.equal(parseRetryAfter(h({ 'retry-after': '0.5' })), 500);
  assert.equal(parseRetryAfter(h({ 'retry-after-ms': '250', 'retry-after': '9' })), 250);
  const now = Date.parse('2026-01-01T00:00:00Z');
  assert.equal(parseRetryAfter(h({ 'retry-after': 'Thu, 01 Jan 2026 00:00:30 GMT' }), now), 30_000);
  assert.equal(parseRetryAfter(h({ 'retry-after': 'Wed, 31 Dec 2025 00:00:00 GMT' }), now), 0);
  assert.equal(parseRetryAfter(h({ 'retry-after': 'soon' })), undefined);
  assert.equal(parseRetryAfter(h({})), undefined);
  assert.equal(parseRetryAfter(undefined), undefined);

  assert.ok(classifyLlmError(Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' })) instanceof LlmRetryableError);
  assert.ok(classifyLlmError(new TypeError('bug')) instanceof LlmFatalError);
  const r = new LlmRetryableError('x', { kind: 'server' });
  assert.equal(classifyLlmError(r), r);
});

test('toTemporalFailure passes ApplicationFailures through and keeps plain errors retryable', () => {
  const af = ApplicationFailure.nonRetryable('already converted', 'X');
  assert.equal(toTemporalFailure(af), af);
  const plain = toTemporalFailure(new RangeError('boom'));
  assert.equal(plain.type, 'RangeError');
  assert.equal(plain.nonRetryable, false);
});

test('LlmConfig: all roles offline by default, defaults filled in, keys cannot be pasted into apiKeyEnv', () => {
  const cfg = LlmConfig.parse({});
  for (const role of ['filter', 'compressor', 'annotator', 'simulator', 'judge'] as const) {
    assert.equal(cfg.roles[role].baseUrl, undefined);
    assert.equal(cfg.roles[role].model, 'offline');
  }
  const judge = LlmConfig.parse({ roles: { judge: { baseUrl: 'http://localhost:8000/v1', model: 'Qwen/Qwen3-4B-Instruct-2507' } } }).roles.judge;
  assert.deepEqual(
    { ...judge },
    {
      baseUrl: 'http://localhost:8000/v1',
      model: 'Qwen/Qwen3-4B-Instruct-2507',
      structuredOutput: 'json_schema',
      timeoutMs: 120_000,
      maxParseAttempts: 3,
      maxTransportRetries: 2,
      concurrency: 8,
      pricing: { inputPer1M: 0, cachedInputPer1M: 0, outputPer1M: 0 },
    },
  );
  assert.throws(() => LlmConfig.parse({ roles: { judge: { model: 'm', apiKeyEnv: 'sk-proj-abcdef123' } } }));
  assert.throws(() => LlmConfig.parse({ roles: { judge: { baseUrl: 'not a url', model: 'm' } } }));
  assert.throws(() => LlmConfig.parse({ roles: { judge: { baseUrl: 'http://x/v1' } } }), 'a model is required');
});
