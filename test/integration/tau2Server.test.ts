/**
 * τ²-Bench episodes against a real OpenAI-compatible server (llama.cpp's `llama-server` serving SmolLM2-135M-Instruct,
 * test/helpers/llamaServer.ts) as both the agent and the user simulator (`llm.roles.user`), simulated and scored by
 * the real tau2 (issue 34 item 6): tau2's requests go to the server as tau2 would send them (its system prompts, its
 * tools, `tool_choice`), the agent's tool calls are executed by tau2's environment and come back as `tool` messages
 * with the calls' ids, the user simulator gets tau2's user prompt with the roles flipped. What is checked is the
 * protocol and the loop, not a 135M model's skill. Skipped without llama-server unless CM2_REQUIRE_REAL_LLM=1 (CI).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { ChatCompletionCreateParamsNonStreaming } from 'openai/resources/chat/completions';
import { Tau2Bridge, tau2PythonPath } from '../../src/infra/tau2Bridge';
import { EndpointConfig, EndpointPolicy } from '../../src/stages/eval/bfcl/runner';
import { loadTau2Tasks, playTau2Episode, type Tau2Task } from '../../src/stages/eval/tau2/episode';
import { EndpointResponder } from '../../src/stages/eval/tau2/responders';
import type { Tau2Results } from '../../src/stages/eval/tau2/results';
import { cm2 } from '../helpers/pipelineFixture';
import { llamaServerUnavailable, startLlamaServer, type LlamaServer } from '../helpers/llamaServer';

let server: LlamaServer | undefined;
let skip: string | undefined;
let bridge: Tau2Bridge;
let airline: Tau2Task[] = [];

before(async () => {
  skip = await llamaServerUnavailable();
  if (skip) return;
  // The ChatML template with tools and <tool_call> blocks (SmolLM2's own has none). An airline request is ~5k tokens
  // (tau2's policy and 14 tools).
  server = await startLlamaServer({ ctxSize: 16384, parallel: 2, chatTemplateFile: path.join(__dirname, '..', 'fixtures', 'llama-server', 'chatml-tool-calls.jinja') });
  bridge = new Tau2Bridge({ python: tau2PythonPath() });
  airline = await loadTau2Tasks(bridge, 'airline', 'base');
});

after(async () => {
  await server?.close();
  await bridge?.close();
});

const endpoint = (s: LlamaServer) => EndpointConfig.parse({ baseUrl: s.url, model: s.model, maxTokens: 64, timeoutMs: 300_000, maxTransportRetries: 1, concurrency: 2 });

test('real server as agent and user: tau2\'s requests as tau2 sends them, a forced tool call executed by tau2\'s environment and answered as a tool message with its id', async (t) => {
  if (!server) return t.skip(skip ?? 'llama-server did not start');
  const bodies: { role: 'agent' | 'user'; body: ChatCompletionCreateParamsNonStreaming }[] = [];
  // As the BFCL real-server test: the agent's first request forced to call (tool_choice "required", an answer begun
  // with "<tool_call>") so that a 135M model calls at all; everything else is the production path.
  class Recorded extends EndpointPolicy {
    constructor(private readonly who: 'agent' | 'user') {
      super(endpoint(server!));
    }
    override complete(body: ChatCompletionCreateParamsNonStreaming, signal?: AbortSignal) {
      bodies.push({ role: this.who, body });
      const forced = this.who === 'agent' && bodies.filter((b) => b.role === 'agent').length === 1;
      return super.complete(forced ? { ...body, tool_choice: 'required', messages: [...body.messages, { role: 'assistant', content: '<tool_call>' }] } : body, signal);
    }
  }
  const task = airline.find((x) => (x.evaluation_criteria?.actions ?? []).length > 0)!;
  const r = await playTau2Episode(bridge, { domain: 'airline', task, trial: 0 }, new EndpointResponder(new Recorded('agent')), new EndpointResponder(new Recorded('user')), { seed: 300, maxSteps: 10 });
  t.diagnostic(`reward ${r.reward}, ${r.termination ?? r.error}; ${r.agentCalls} agent and ${r.userCalls} user calls`);
  // each role's calls counted from the server's own usage (llama-server reports prompt and completion tokens)
  const sent = (role: 'agent' | 'user') => bodies.filter((b) => b.role === role).length;
  assert.equal(r.usage?.agent?.calls, sent('agent'));
  assert.equal(r.usage?.user?.calls, sent('user'));
  assert.ok(r.usage!.agent!.promptTokens > 4000 * sent('agent'), `an airline request is ~5k tokens: ${JSON.stringify(r.usage)}`);
  assert.ok(r.usage!.user!.completionTokens > 0);
  const agents = bodies.filter((b) => b.role === 'agent').map((b) => b.body);
  const users = bodies.filter((b) => b.role === 'user').map((b) => b.body);
  assert.ok(agents.length > 0 && users.length > 0);
  // the agent: tau2's system prompt with the airline policy, tau2's tools
  const sys = agents[0]!.messages[0] as { role: string; content: string };
  assert.equal(sys.role, 'system');
  assert.match(sys.content, /customer service agent[\s\S]*<policy>[\s\S]*Airline Agent Policy/);
  assert.ok(agents.every((b) => (b.tools?.length ?? 0) >= 10), 'the agent is offered tau2\'s tools');
  // the user simulator: tau2's guidelines with the task's scenario; the agent's greeting is its "user" message
  const userSys = users[0]!.messages[0] as { content: string };
  assert.match(userSys.content, /<scenario>[\s\S]*<\/scenario>/);
  assert.ok(userSys.content.includes(task.user_scenario.instructions && typeof task.user_scenario.instructions === 'object' ? task.user_scenario.instructions.reason_for_call!.trim().slice(0, 40) : ''));
  assert.equal((users[0]!.messages[1] as { role: string; content: string }).role, 'user');
  assert.match((users[0]!.messages[1] as { content: string }).content, /How can I help you/);
  // the forced call was executed by tau2's environment and came back as a tool message with the call's id
  const followUp = agents.find((b) => b.messages.some((m) => m.role === 'tool'));
  if (r.error === undefined) {
    assert.ok(followUp, 'a request carried a tool result');
    const call = followUp!.messages.find((m) => m.role === 'assistant' && 'tool_calls' in m && m.tool_calls?.length) as { tool_calls: { id: string }[] };
    const result = followUp!.messages.find((m) => m.role === 'tool') as { tool_call_id: string; content: string };
    assert.equal(result.tool_call_id, call.tool_calls[0]!.id);
    assert.ok(result.content.length > 0);
    assert.ok(r.simulation !== null && ['user_stop', 'agent_stop', 'max_steps', 'too_many_errors'].includes(r.termination!), String(r.termination));
  } else assert.match(r.error, /JSONDecodeError|ValueError/, 'tau2 refused a model answer (a 135M model\'s arguments)');
});

test('real server: `cm2 eval tau2 --endpoint … --user openai:…` plays and scores a telecom task (the user has tools there; airline: the test above), the user simulator\'s tokens in the results', async (t) => {
  if (!server) return t.skip(skip ?? 'llama-server did not start');
  const out = path.join(mkdtempSync(path.join(tmpdir(), 'cm2-tau2-real-')), 'r.json');
  const r = await cm2(['eval', 'tau2', '--endpoint', server.url, '--model', server.model, '--user', `openai:${server.model}@${server.url}`, '--domain', 'telecom', '--limit', '1',
    '--max-steps', '8', '--concurrency', '2', '--max-new-tokens', '64', '--timeout-ms', '300000', '--out', out]);
  assert.equal(r.code, 0, r.out.slice(-2000));
  const res = JSON.parse(readFileSync(out, 'utf8')) as Tau2Results;
  assert.deepEqual(Object.keys(res.domains), ['telecom']);
  assert.equal(res.episodes.length, 1);
  assert.equal(res.usage?.user?.calls, res.episodes[0]!.userCalls);
  assert.ok(res.usage!.user!.promptTokens > 0 && res.usage!.agent!.promptTokens > 0, JSON.stringify(res.usage));
  assert.match(r.out, /user simulator: \d+ call\(s\)/);
  for (const e of res.episodes) assert.ok(e.termination !== null || e.error, JSON.stringify(e).slice(0, 300));
  t.diagnostic(res.episodes.map((e) => `${e.reward} ${e.termination ?? e.error?.slice(0, 80)}`).join('; '));
});
