/**
 * Who answers RL tool calls on real (non-demo) data (src/stages/rl/env/answers.ts, issue 28): the demo world's
 * executables never answer another dataset's tools of the same name, and a run whose tool calls nothing could answer
 * fails at start-up (a config error naming `llm.roles.simulator`) or, at rollout time, with a fatal error — never
 * with rollouts rewarded 0.
 */
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Example } from '../../../../src/kernel/schema';
import { LlmClient } from '../../../../src/llm/client';
import { LlmConfig } from '../../../../src/llm/llmConfig';
import { LlmFatalError } from '../../../../src/llm/errors';
import { ConfigError, parseConfig } from '../../../../src/run/config';
import { rlInput } from '../../../../src/cli/stages';
import { demoWorldExecutables } from '../../../../src/demo/executables';
import { WORLD_TOOL_NAMES } from '../../../../src/demo/tools';
import { ToolEnvironment } from '../../../../src/stages/rl/env/toolEnv';
import { withSimulatorDefaults } from '../../../../src/stages/rl/env/simulator';
import { executableToolNames, missingSimulatorMessage, toolAnswerIssues, toolsNeedingSimulator } from '../../../../src/stages/rl/env/answers';
import { assistant, call, tool, user } from '../../../fixtures/dialogues';
import { replies, startFakeOpenAI, type FakeOpenAI } from '../../../helpers/fakeOpenAI';

const servers: FakeOpenAI[] = [];
after(async () => {
  await Promise.all(servers.map((s) => s.close()));
});

const ctx = { salt: 'r0#0/s0/c0' };

/** A real dataset's tools that share names with the demo world's (another schema, another world). */
const fn = (name: string, properties: Record<string, unknown>, required: string[]) => ({ type: 'function', function: { name, description: `bank API: ${name}`, parameters: { type: 'object', properties, required } } });
const realWeather = fn('get_weather', { location: { type: 'string' }, station_id: { type: 'integer' } }, ['location']);
const realBalance = fn('get_balance', { iban: { type: 'string' } }, ['iban']);
const lookupOrder = fn('lookup_order', { order_no: { type: 'string' } }, ['order_no']);

function realData(): Example[] {
  return [
    {
      uuid: 'bank-1',
      tools: [realWeather, realBalance],
      messages: [
        user('Balance of DE89 and the weather at the branch?'),
        assistant('', [call('get_balance', { iban: 'DE89' }, 'c1')]),
        { role: 'tool', content: '{"balance_eur": 1200.5}', tool_call_id: 'c1' },
        assistant('1200.50 EUR.'),
      ],
    },
    { uuid: 'shop-1', tools: [lookupOrder, realBalance], messages: [user('Where is order 7?'), assistant('', [call('lookup_order', { order_no: '7' })]), tool('{"status": "shipped"}'), assistant('Shipped.')] },
    { uuid: 'chat-1', tools: [], messages: [user('hi'), assistant('hello')] },
  ];
}

/** The tool environment as the RL activity builds it for a run whose data source is not the demo world. */
function realDataEnv(llm?: LlmClient): ToolEnvironment {
  const names = executableToolNames(true, false, WORLD_TOOL_NAMES);
  return new ToolEnvironment(realData(), { ...(llm ? { llm } : {}), ...(names.length ? { executables: demoWorldExecutables(undefined, names) } : {}) });
}

describe("the demo world's executables and real data", () => {
  test('`true` stands for the demo tools on demo data only; a list names them for any data; `false` for none', () => {
    assert.deepEqual(executableToolNames(true, true, WORLD_TOOL_NAMES), [...WORLD_TOOL_NAMES]);
    assert.deepEqual(executableToolNames(true, false, WORLD_TOOL_NAMES), []);
    assert.deepEqual(executableToolNames(['get_weather'], false, WORLD_TOOL_NAMES), ['get_weather']);
    assert.deepEqual(executableToolNames(false, true, WORLD_TOOL_NAMES), []);
    assert.deepEqual(Object.keys(demoWorldExecutables(undefined, ['get_weather', 'lookup_order'])), ['get_weather'], 'only demo-world tools have executables');
  });

  test("a real get_weather / get_balance call goes to the simulator, never to the demo world's answer", async () => {
    const server = await startFakeOpenAI({ behaviour: () => replies.text('{"analysis": "a", "execution_result": {"temp_c": 11, "station": 4}}') });
    servers.push(server);
    const config = withSimulatorDefaults(LlmConfig.parse({ roles: { simulator: { baseUrl: server.url, model: 'sim', maxTransportRetries: 0 } } }));
    const env = realDataEnv(new LlmClient(config, { log: () => {}, env: {} }));
    const weather = await env.execute('bank-1', 'get_weather', { location: 'Berlin' }, ctx);
    assert.deepEqual([weather.source, weather.text], ['simulated', '{"temp_c": 11, "station": 4}']);
    const balance = await env.execute('bank-1', 'get_balance', { iban: 'FR76' }, ctx);
    assert.equal(balance.source, 'simulated');
    assert.equal(server.requests.length, 2);
    // Replays still answer the reference's own calls without the simulator.
    assert.deepEqual(await env.execute('bank-1', 'get_balance', { iban: 'DE89' }, ctx), { text: '{"balance_eur": 1200.5}', success: true, source: 'replay' });
  });

  test('without a simulator endpoint such a call is a fatal error naming llm.roles.simulator, not a failed rollout', async () => {
    const env = realDataEnv();
    await assert.rejects(env.execute('bank-1', 'get_weather', { location: 'Berlin' }, ctx), (e: unknown) => e instanceof LlmFatalError && /tool get_weather \(sample bank-1\).*llm\.roles\.simulator/.test(e.message));
    const offlineRole = realDataEnv(new LlmClient(LlmConfig.parse({}), { log: () => {}, env: {} }));
    await assert.rejects(offlineRole.execute('shop-1', 'lookup_order', { order_no: '8' }, ctx), LlmFatalError);
    assert.equal((await env.execute('shop-1', 'lookup_order', { order_no: '7' }, ctx)).source, 'replay');
    assert.equal((await env.execute('chat-1', 'get_weather', { location: 'x' }, ctx)).source, 'unknown_tool', 'a call error needs no simulator');
  });
});

describe('start-up checks', () => {
  test("the data's tools that no executable answers, with the examples offering them", () => {
    const needs = toolsNeedingSimulator(realData(), new Set(executableToolNames(true, false, WORLD_TOOL_NAMES)));
    assert.deepEqual([...needs], [['get_weather', 1], ['get_balance', 2], ['lookup_order', 1]]);
    assert.deepEqual([...toolsNeedingSimulator(realData(), new Set(['get_weather', 'get_balance']))], [['lookup_order', 1]]);
    const message = missingSimulatorMessage(needs, 3);
    assert.match(message, /^llm\.roles\.simulator has no endpoint/);
    assert.match(message, /get_balance \(2 of 3 examples\)/);
  });

  test('config issues: no executable and no simulator; names that are not demo-world tools', () => {
    assert.deepEqual(toolAnswerIssues(true, true, false, WORLD_TOOL_NAMES), [], 'the demo world executes its own tools');
    assert.deepEqual(toolAnswerIssues(true, false, true, WORLD_TOOL_NAMES), [], 'real data with a simulator');
    const [issue] = toolAnswerIssues(true, false, false, WORLD_TOOL_NAMES);
    assert.equal(issue?.path, 'llm.roles.simulator.baseUrl');
    assert.match(issue!.message, /the data source is not the demo world/);
    assert.match(toolAnswerIssues(false, true, false, WORLD_TOOL_NAMES)[0]!.message, /rl\.executableTools is off/);
    assert.deepEqual(toolAnswerIssues(['get_weather', 'lookup_order'], false, true, WORLD_TOOL_NAMES).map((i) => i.path), ['rl.executableTools[1]']);
  });

  const fileRun = (over: Record<string, unknown> = {}) => parseConfig({ run: { id: 'real' }, data: { source: { kind: 'file', paths: ['/data/bank.jsonl'] } }, ...over });

  test('rlInput: a file-source run without a simulator is a ConfigError naming the role, before any workflow starts', () => {
    assert.throws(() => rlInput(fileRun()), (e: unknown) => e instanceof ConfigError && /llm\.roles\.simulator\.baseUrl: RL needs a tool simulator/.test(e.message));
    assert.throws(() => rlInput(fileRun({ rl: { executableTools: ['get_wether'] }, llm: { roles: { simulator: { baseUrl: 'http://127.0.0.1:1/v1', model: 'm' } } } })), /rl\.executableTools\[0\]: "get_wether" is not a tool of the demo world/);
  });

  test('rlInput resolves rl.executableTools into the list of tools the run executes (old configs keep working)', () => {
    const simulator = { llm: { roles: { simulator: { baseUrl: 'http://127.0.0.1:1/v1', model: 'm' } } } };
    assert.deepEqual(rlInput(fileRun(simulator)).rl.executableTools, []);
    assert.deepEqual(rlInput(fileRun({ ...simulator, rl: { executableTools: ['get_weather'] } })).rl.executableTools, ['get_weather']);
    assert.deepEqual(rlInput(parseConfig({ run: { id: 'demo' } })).rl.executableTools, [...WORLD_TOOL_NAMES], 'the demo world: its tools');
    assert.deepEqual(rlInput(parseConfig({ run: { id: 'demo' }, rl: { executableTools: true } })).rl.executableTools, [...WORLD_TOOL_NAMES]);
    assert.deepEqual(rlInput(parseConfig({ run: { id: 'demo' }, rl: { executableTools: false }, ...simulator })).rl.executableTools, []);
  });
});
