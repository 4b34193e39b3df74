/**
 * The RL tool environment (src/stages/rl/env/toolEnv.ts): replay, schema check, executable tools, LLM simulation against the
 * local fake OpenAI server, the Python JSON semantics of arguments, and per-call cost independent of the tool count.
 */
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Example } from '../../../../src/kernel/schema';
import { parseToolCalls } from '../../../../src/chat/toolCalls';
import { LlmClient, type ResponseCache } from '../../../../src/llm/client';
import { LlmConfig, type LlmRoleConfigInput } from '../../../../src/llm/llmConfig';
import { CITY_NAMES } from '../../../../src/demo/catalog';
import { executeTool, toolResultText, toolSchema } from '../../../../src/demo/tools';
import { ToolEnvironment, type ToolResult } from '../../../../src/stages/rl/env/toolEnv';
import { assistant, call, timeTool, tool, user, weatherTool } from '../../../fixtures/dialogues';
import { replies, startFakeOpenAI, type Behaviour, type FakeOpenAI } from '../../../helpers/fakeOpenAI';
import { checkArguments, RawArguments, rawCallArguments } from '../../../../src/stages/rl/env/arguments';
import { parseSimulation, SIMULATION_JSON_SCHEMA, SIMULATOR_SYSTEM_PROMPT, withSimulatorDefaults } from '../../../../src/stages/rl/env/simulator';
import { demoWorldExecutables } from '../../../../src/demo/executables';
import { pyCanonicalJson } from '../../../../src/kernel/pyjson';
import { LlmFatalError, LlmRetryableError } from '../../../../src/llm/errors';

const servers: FakeOpenAI[] = [];
after(async () => {
  await Promise.all(servers.map((s) => s.close()));
});

const ctx = { salt: 'r0#0/s0/c0' };
const LONE = '\uD800';

/** A function tool with `strict: false` and an enum, and a bare `{name, …}` tool (wrapped by the environment). */
const looseTool = {
  type: 'function',
  function: {
    name: 'set_mode',
    strict: false,
    parameters: { type: 'object', properties: { mode: { type: 'string', enum: ['eco', 'fast'] } }, required: ['mode'] },
  },
};
const bareTool = { name: 'bare', description: 'bare tool', parameters: { type: 'object', properties: { n: { type: 'number' } }, required: [] } };

/**
 * Recorded calls: get_weather(Paris, 2) → 18; then a parallel step get_time(Paris), get_weather(Rome, days 1.0 — a
 * float) whose tool messages come back in reverse order, paired by tool_call_id.
 */
function sample(): Example {
  return {
    uuid: 's1',
    tools: [structuredClone(weatherTool), structuredClone(timeTool), structuredClone(looseTool), structuredClone(bareTool)],
    messages: [
      user('Plan my day in Paris and Rome.'),
      assistant('<think>\nweather\n</think>', [call('get_weather', '{"city": "Paris", "days": 2}', 'c1')]),
      { role: 'tool', content: '{"temp": 18}', tool_call_id: 'c1' },
      assistant('<think>\ntime and Rome\n</think>', [call('get_time', '{"city": "Paris"}', 'c2'), call('get_weather', '{"city": "Rome", "days": 1.0}', 'c3')]),
      { role: 'tool', content: `{"temp": 25, "note": "x${LONE}"}`, tool_call_id: 'c3' },
      { role: 'tool', content: '{"time": "14:00"}', tool_call_id: 'c2' },
      assistant('<think>\ndone\n</think>\n\nAll set.'),
    ],
  };
}

/** A second sample whose only tool is `other_tool` (known globally, but not to s1). */
const otherSample = (): Example => ({
  uuid: 's2',
  tools: [{ type: 'function', function: { name: 'other_tool', parameters: { type: 'object', properties: {} } } }],
  messages: [user('hi'), assistant('hello')],
});

const offlineEnv = () => new ToolEnvironment([sample(), otherSample()]);
/** A call that got past replay, the schema check and the executables: without a simulator endpoint it throws (no silent 0). */
const needsSimulator = (p: Promise<ToolResult>, message?: string) =>
  assert.rejects(p, (e: unknown) => e instanceof LlmFatalError && /llm\.roles\.simulator/.test(e.message), message);
const errorOf = (r: ToolResult) => (JSON.parse(r.text) as { error_tool_call: { code: string; message: string; details: Record<string, unknown> } }).error_tool_call;

describe('Python JSON semantics', () => {
  test('canonical form: sorted keys (by code point), compact separators, ensure_ascii, Python float repr', () => {
    assert.equal(
      pyCanonicalJson('{"b": 1.0, "a": [1e-7, 1E16, 100, 0.0001, 1e-5, 2.50, -0.0], "c": "é😀\\n"}'),
      '{"a":[1e-07,1e+16,100,0.0001,1e-05,2.5,-0.0],"b":1.0,"c":"\\u00e9\\ud83d\\ude00\\n"}',
    );
    // U+FFFF sorts before U+1F600 in Python (code points), after it in JS's default UTF-16 order.
    assert.equal(pyCanonicalJson('{"😀": 1, "\\uffff": 2}'), '{"\\uffff":2,"\\ud83d\\ude00":1}');
    // Integers keep arbitrary precision; duplicate keys keep the last value.
    assert.equal(pyCanonicalJson('{"n": 123456789012345678901234567890, "n": 7}'), '{"n":7}');
    assert.equal(pyCanonicalJson('[123456789012345678901234567890]'), '[123456789012345678901234567890]');
    assert.throws(() => pyCanonicalJson('{"a": 1,}'), /Expecting property name enclosed in double quotes: line 1 column 9 \(char 8\)/);
  });

  test('integer check: 1.0 is a float (raw text), 1 an int; plain JS objects follow JS semantics', () => {
    assert.deepEqual(checkArguments(weatherTool, new RawArguments('{"city": "Paris", "days": 1}')), []);
    assert.deepEqual(checkArguments(weatherTool, new RawArguments('{"city": "Paris", "days": 1.0}')), ["field 'days' type mismatch: expected integer"]);
    assert.deepEqual(checkArguments(weatherTool, { city: 'Paris', days: 1.0 }), [], 'JSON.parse has already turned 1.0 into 1');
    assert.deepEqual(checkArguments(weatherTool, { city: 'Paris', days: 1.5 }), ["field 'days' type mismatch: expected integer"]);
  });

  test('rawCallArguments gives the raw arguments of the calls parseToolCalls executes, in the same order', () => {
    const text =
      '<think>x</think>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "days": 1.0}}\n</tool_call>' +
      '\n<tool_call>\n[{"name": "get_time", "parameters": "{\\"city\\": \\"Paris\\"}"}, {"name": "bare", "arguments": {"n": 1e-7}}]\n</tool_call>';
    const parsed = parseToolCalls(text);
    assert.deepEqual(parsed.errors, []);
    const raw = rawCallArguments(text);
    assert.deepEqual(raw.map((r) => r.text), ['{"city": "Rome", "days": 1.0}', '{"city": "Paris"}', '{"n": 1e-07}']);
    assert.deepEqual(raw.map((r) => JSON.parse(r.text)), parsed.calls.map((c) => c.arguments));
  });
});

describe('call errors', () => {
  test('unknown uuid, a tool not in this sample (even if another sample has it), arguments that are not an object', async () => {
    const env = offlineEnv();
    const noSample = await env.execute('nope', 'get_weather', { city: 'Paris' }, ctx);
    assert.deepEqual([noSample.success, noSample.source, errorOf(noSample).code], [false, 'unknown_tool', 'INDEX_NOT_FOUND']);

    const notHere = await env.execute('s1', 'other_tool', {}, ctx);
    assert.deepEqual([notHere.success, notHere.source, errorOf(notHere).code], [false, 'unknown_tool', 'TOOL_NOT_AVAILABLE']);
    assert.deepEqual(errorOf(notHere).details, { tool: 'other_tool', original_index: 's1' });

    for (const [args, type] of [[['Paris'], 'list'], ['{"city": "Paris"}', 'str'], [null, 'NoneType'], [new RawArguments('[1]'), 'list'], [new RawArguments('{bad'), 'str']] as const) {
      const r = await env.execute('s1', 'get_weather', args, ctx);
      assert.deepEqual([r.success, r.source, errorOf(r).code, errorOf(r).details['parameters_type']], [false, 'bad_arguments', 'INVALID_PARAMETERS', type]);
    }
    // Python's json.dumps layout (", " and ": "), ASCII only.
    assert.equal(
      noSample.text,
      '{"error_tool_call": {"code": "INDEX_NOT_FOUND", "message": "original_index nope not found", "details": {"original_index": "nope"}}}',
    );
  });
});

describe('replay', () => {
  test('a recorded call of the same tool at any position replays its tool message verbatim (surrogates stripped)', async () => {
    const env = offlineEnv();
    const first = await env.execute('s1', 'get_weather', new RawArguments('{"city": "Paris", "days": 2}'), ctx);
    assert.deepEqual(first, { text: '{"temp": 18}', success: true, source: 'replay' });
    // Second call of the parallel step, answered by the tool message with its id (which came first).
    const time = await env.execute('s1', 'get_time', { city: 'Paris' }, ctx);
    assert.deepEqual(time, { text: '{"time": "14:00"}', success: true, source: 'replay' });
    const rome = await env.execute('s1', 'get_weather', new RawArguments('{"days": 1.0, "city": "Rome"}'), ctx);
    assert.deepEqual(rome, { text: '{"temp": 25, "note": "x"}', success: true, source: 'replay' });
  });

  test('canonical matching: key order and whitespace do not matter; \\u escapes equal the characters', async () => {
    const ex = sample();
    ex.messages[1] = assistant('x', [call('get_weather', '{"city":"Zürich","days":2}')]);
    const env = new ToolEnvironment([ex]);
    for (const args of [new RawArguments('{ "days" : 2 , "city" : "Z\\u00fcrich" }'), { days: 2, city: 'Zürich' }]) {
      const r = await env.execute('s1', 'get_weather', args, ctx);
      assert.deepEqual([r.source, r.text], ['replay', '{"temp": 18}']);
    }
  });

  test('int vs float: 1 does not replay a recorded 1.0 (raw text), and a float fails the integer check', async () => {
    const env = offlineEnv();
    await needsSimulator(env.execute('s1', 'get_weather', new RawArguments('{"city": "Rome", "days": 1}'), ctx), 'no replay, schema passes, then the (offline) simulator');
    const parisFloat = await env.execute('s1', 'get_weather', new RawArguments('{"city": "Paris", "days": 2.0}'), ctx);
    assert.equal(parisFloat.source, 'schema_error', 'neither a replay of days=2 nor a valid integer');
    // A plain object went through JSON.parse: 1.0 is lost, so it is the int 1 (JS semantics).
    await needsSimulator(env.execute('s1', 'get_weather', { city: 'Rome', days: 1.0 }, ctx));
    assert.equal((await env.execute('s1', 'get_weather', { city: 'Paris', days: 2.0 }, ctx)).source, 'replay');
  });
});

describe('schema check', () => {
  const env = offlineEnv();
  const errors = async (name: string, args: unknown) => {
    const r = await env.execute('s1', name, args, ctx);
    assert.equal(r.success, true, 'a schema error is a successful call whose error_tool_call ends the rollout');
    assert.equal(r.source, 'schema_error');
    assert.equal(errorOf(r).code, 'SCHEMA_VALIDATION_FAILED');
    return errorOf(r).details['errors'];
  };

  test('missing required key, bool for integer, bool for number, extra key (strict by default)', async () => {
    assert.deepEqual(await errors('get_weather', { days: 2 }), ['missing required field: city']);
    assert.deepEqual(await errors('get_weather', { city: 'Oslo', days: true }), ["field 'days' type mismatch: expected integer"]);
    assert.deepEqual(await errors('bare', { n: false }), ["field 'n' type mismatch: expected number"]);
    assert.deepEqual(await errors('get_weather', { city: 'Oslo', unit: 'c' }), ['unexpected field not allowed: unit']);
  });

  test('strict: false allows extra keys; enum membership is checked', async () => {
    assert.deepEqual(await errors('set_mode', { mode: 'slow', extra: 1 }), ["field 'mode' not in enum: ['eco', 'fast']"]);
    await needsSimulator(env.execute('s1', 'set_mode', { mode: 'eco', extra: 1 }, ctx), 'valid: passed on to the (offline) simulator');
  });

  test('checkArguments: type lists, unknown type words, Python == in enums, bare tools', () => {
    const t = { name: 't', parameters: { properties: { u: { type: ['string', 'null'] }, w: { type: 'weird' }, e: { enum: [1, 'x'] } } } };
    assert.deepEqual(checkArguments(t, { u: null, w: 5, e: true }), [], 'True == 1 in Python');
    assert.deepEqual(checkArguments(t, new RawArguments('{"e": 1.0}')), []);
    assert.deepEqual(checkArguments(t, { u: 3, e: 'y' }), ["field 'u' type mismatch: expected ['string', 'null']", "field 'e' not in enum: [1, 'x']"]);
    assert.deepEqual(checkArguments(t, 'nope'), ['parameters must be a JSON object']);
  });
});

describe('executable tools', () => {
  test("the demo world's tools run for real: the result equals executeTool's text; replay still comes first", async () => {
    const seed = 7;
    const city = CITY_NAMES[1]!;
    const recorded = toolResultText(executeTool('get_weather', { city: CITY_NAMES[0] }, seed));
    const ex: Example = {
      uuid: 'w1',
      tools: [toolSchema('get_weather'), toolSchema('get_forecast')],
      messages: [user('weather?'), assistant('x', [call('get_weather', { city: CITY_NAMES[0] })]), tool(recorded), assistant('ok')],
    };
    const env = new ToolEnvironment([ex], { executables: demoWorldExecutables(seed) });
    const r = await env.execute('w1', 'get_weather', { city }, ctx);
    assert.deepEqual(r, { text: toolResultText(executeTool('get_weather', { city }, seed)), success: true, source: 'executable' });
    assert.equal((await env.execute('w1', 'get_weather', { city: CITY_NAMES[0] }, ctx)).source, 'replay');
    const unknownCity = await env.execute('w1', 'get_forecast', { city: 'Atlantis', days: 2 }, ctx);
    assert.deepEqual(unknownCity, { text: toolResultText(executeTool('get_forecast', { city: 'Atlantis', days: 2 }, seed)), success: true, source: 'executable' });
    assert.match(unknownCity.text, /not_found/, 'a tool-level error is still a successful call');
    assert.equal((await env.execute('w1', 'get_weather', { town: city }, ctx)).source, 'schema_error', 'the schema check runs before the executable');
  });
});

describe('LLM simulation', () => {
  async function simulatorEnv(behaviour: Behaviour, role: Partial<LlmRoleConfigInput> = {}, cache?: ResponseCache) {
    const server = await startFakeOpenAI({ behaviour });
    servers.push(server);
    const config = withSimulatorDefaults(LlmConfig.parse({ roles: { simulator: { baseUrl: server.url, model: 'fake-sim', maxParseAttempts: 2, maxTransportRetries: 0, ...role } } }));
    const llm = new LlmClient(config, { backoff: { baseMs: 1, maxMs: 2, maxRetryAfterMs: 10 }, log: () => {}, env: {}, ...(cache ? { cache } : {}) });
    return { server, env: new ToolEnvironment([sample(), otherSample()], { llm }) };
  }

  const answer = '{"analysis": "Lyon is like Paris", "execution_result": {"temp": 21.0, "city": "Lyon \\u00e9", "list": [1, 2.50, 1e-7]}}';

  test('prompt: every recorded call of the sample as few-shot, the full tool schema, the arguments; output re-serialised', async () => {
    const { server, env } = await simulatorEnv(() => replies.text(answer));
    const r = await env.execute('s1', 'get_weather', { city: 'Lyon' }, ctx);
    assert.equal(r.source, 'simulated');
    assert.equal(r.success, true);
    assert.equal(r.text, '{"temp": 21.0, "city": "Lyon \\u00e9", "list": [1, 2.5, 1e-07]}');
    assert.equal(r.usage?.calls, 1);

    const body = server.requests[0]!.body;
    assert.equal(body.messages?.[0]?.role, 'system');
    assert.equal(body.messages?.[0]?.content, SIMULATOR_SYSTEM_PROMPT);
    const block = (name: string, args: string, result: string) => `Tool name:\n${name}\nTool arguments:\n${args}\nTool execution result:\n${result}\n`;
    const expected =
      [
        'Previous tool calls and results (few-shot):',
        // Grouped by tool in order of first use, as the reference's dict of lists; the lone surrogate is stripped.
        block('get_weather', '{\n"city": "Paris",\n"days": 2\n}', '{"temp": 18}'),
        block('get_weather', '{\n"city": "Rome",\n"days": 1.0\n}', '{"temp": 25, "note": "x"}'),
        block('get_time', '{\n"city": "Paris"\n}', '{"time": "14:00"}'),
      ].join('\n') +
      '\n\nCurrent tool name: get_weather\n' +
      'Current tool input schema (JSON Schema):\n' +
      '{\n"type": "function",\n"function": {\n"name": "get_weather",\n"description": "Current weather for a city",\n"parameters": {\n"type": "object",\n' +
      '"properties": {\n"city": {\n"type": "string",\n"description": "City name"\n},\n"days": {\n"type": "integer"\n}\n},\n"required": [\n"city"\n]\n}\n}\n}\n' +
      'Current arguments (JSON):\n{\n"city": "Lyon"\n}\n' +
      'Generate tool execution result in JSON format.';
    assert.deepEqual(body.messages?.[1], { role: 'user', content: expected });
    assert.deepEqual(body.response_format, { type: 'json_schema', json_schema: { name: SIMULATION_JSON_SCHEMA.name, schema: SIMULATION_JSON_SCHEMA.schema, strict: false } });
    assert.deepEqual([body['temperature'], body['top_p'], body['max_tokens']], [0.6, 0.8, 8000]);
  });

  test('role config sampling wins over the defaults', async () => {
    const { server, env } = await simulatorEnv(() => replies.text(answer), { temperature: 0.2, topP: 0.5, maxTokens: 100 });
    await env.execute('s1', 'get_weather', { city: 'Lyon' }, ctx);
    assert.deepEqual([server.requests[0]!.body['temperature'], server.requests[0]!.body['top_p'], server.requests[0]!.body['max_tokens']], [0.2, 0.5, 100]);
  });

  test('an unusable answer is asked again; after the last attempt the call fails (success false, {"error": …})', async () => {
    const { server, env } = await simulatorEnv((_req, c) => (c.nthForKey === 1 ? replies.text('not json') : replies.text(answer)));
    const retried = await env.execute('s1', 'get_weather', { city: 'Lyon' }, ctx);
    assert.deepEqual([retried.source, retried.usage?.calls, server.requests.length], ['simulated', 2, 2]);

    server.setBehaviour(() => replies.text('{"analysis": "x", "execution_result": {}}'));
    const failed = await env.execute('s1', 'get_weather', { city: 'Nice' }, ctx);
    assert.equal(failed.success, false);
    assert.equal(failed.source, 'failed');
    assert.equal(failed.usage?.calls, 2);
    assert.match(failed.text, /^\{"error": unparseable answer after 2 attempt\(s\): execution_result must be a non-empty object or an array/);
  });

  test('transport errors are thrown (Temporal retries the activity); a retried activity is served from the cache', async () => {
    const { env } = await simulatorEnv(() => replies.status(503));
    await assert.rejects(env.execute('s1', 'get_weather', { city: 'Lyon' }, ctx), LlmRetryableError);

    const map = new Map<string, string>();
    const cache: ResponseCache = { get: async (k) => map.get(k), put: async (k, v) => void map.set(k, v) };
    const cached = await simulatorEnv(() => replies.text(answer), {}, cache);
    const a = await cached.env.execute('s1', 'get_weather', { city: 'Lyon' }, ctx);
    const b = await cached.env.execute('s1', 'get_weather', { city: 'Lyon' }, ctx);
    assert.equal(a.text, b.text);
    assert.deepEqual([cached.server.requests.length, b.usage?.cacheHits], [1, 1]);
    await cached.env.execute('s1', 'get_weather', { city: 'Lyon' }, { salt: 'r0#1/s0/c0' });
    assert.equal(cached.server.requests.length, 2, 'another rollout samples its own answer');
  });

  test('simulator offline and no executable: a fatal error naming the role, not a failed result rewarded 0', async () => {
    await assert.rejects(offlineEnv().execute('s1', 'get_weather', { city: 'Lyon' }, ctx), (e: unknown) => {
      assert.ok(e instanceof LlmFatalError, String(e));
      assert.match(e.message, /call of tool get_weather \(sample s1\) is neither a replay nor executable/);
      assert.match(e.message, /give llm\.roles\.simulator an endpoint/);
      return true;
    });
    const offlineRole = new ToolEnvironment([sample()], { llm: new LlmClient(LlmConfig.parse({}), { log: () => {} }) });
    await needsSimulator(offlineRole.execute('s1', 'get_weather', { city: 'Lyon' }, ctx));
  });

  test('parseSimulation: arrays, fenced answers, and shapes the schema forbids', () => {
    assert.deepEqual(parseSimulation('{"analysis": "a", "execution_result": [1.0, {"b": null}]}'), { ok: true, value: '[1.0, {"b": null}]' });
    assert.deepEqual(parseSimulation('```json\n{"analysis": "a", "execution_result": {"x": 1}}\n```'), { ok: true, value: '{"x": 1}' });
    for (const bad of ['[1]', '{"analysis": "a"}', '{"execution_result": "text"}', '{"execution_result": {}}', '']) assert.equal(parseSimulation(bad).ok, false, bad);
  });
});

describe('scale: 5,000 tools', () => {
  /** A tool whose `parameters` count their reads: the index must not touch them, a call only its own tool's. */
  function countedTool(name: string, reads: Map<string, number>) {
    return {
      type: 'function',
      function: {
        name,
        description: '',
        get parameters() {
          reads.set(name, (reads.get(name) ?? 0) + 1);
          return { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] };
        },
      },
    };
  }

  test('one sample with 5,000 tools: a call reads only its own tool schema, once; the examples are never revisited', async () => {
    const reads = new Map<string, number>();
    const ex: Example = {
      uuid: 'big',
      tools: Array.from({ length: 5000 }, (_, k) => countedTool(`tool_${k}`, reads)),
      messages: [user('go'), assistant('x', [call('tool_17', { q: 'a' })]), tool('{"r": 1}'), assistant('done')],
    };
    const env = new ToolEnvironment([ex]);
    assert.deepEqual(env.summary(), { samples: 1, tools: 5000, recordedCalls: 1 });
    assert.equal(reads.size, 0, 'building the index reads no parameters');
    // From now on the dataset itself must not be scanned again.
    ex.tools = new Proxy([], { get: () => assert.fail('execute went back to the examples') });
    ex.messages = new Proxy([], { get: () => assert.fail('execute went back to the examples') });

    assert.equal((await env.execute('big', 'tool_17', { q: 'a' }, ctx)).source, 'replay');
    assert.equal(reads.size, 0, 'a replay needs no schema');
    for (let k = 0; k < 3; k++) await needsSimulator(env.execute('big', 'tool_4321', { q: `b${k}` }, ctx));
    assert.equal((await env.execute('big', 'tool_4321', { z: 1 }, ctx)).source, 'schema_error');
    assert.deepEqual([...reads], [['tool_4321', 1]], 'only the called tool, its checker compiled once');
  });

  test('1,000 samples x 5 tools: a call in one sample touches only that tool', async () => {
    const reads = new Map<string, number>();
    const examples: Example[] = Array.from({ length: 1000 }, (_, s) => ({
      uuid: `u${s}`,
      tools: Array.from({ length: 5 }, (_, k) => countedTool(`t${s}_${k}`, reads)),
      messages: [user('go'), assistant('done')],
    }));
    const env = new ToolEnvironment(examples);
    assert.equal(env.summary().tools, 5000);
    await needsSimulator(env.execute('u500', 't500_3', { q: 'x' }, ctx));
    assert.equal((await env.execute('u500', 't501_3', { q: 'x' }, ctx)).source, 'unknown_tool');
    assert.deepEqual([...reads], [['t500_3', 1]]);
  });
});
