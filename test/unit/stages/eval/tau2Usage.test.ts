/**
 * The τ²-Bench user simulator's cost (issue 34): an endpoint role's calls are counted per episode from the endpoint's
 * `usage` and priced with the role's pricing; an answer from the response cache (a retried activity's) is not paid
 * again; the results sum the stored episodes, so an episode kept from an earlier attempt counts what it cost then.
 * The tau2 loop runs against a scripted bridge here; test/integration/tau2Server.test.ts checks the counts against
 * a real server.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { ChatCompletionCreateParamsNonStreaming } from 'openai/resources/chat/completions';
import { EndpointConfig, EndpointPolicy } from '../../../../src/stages/eval/bfcl/runner';
import { playTau2Episode, type Tau2BridgeLike, type Tau2Task } from '../../../../src/stages/eval/tau2/episode';
import { EndpointResponder, OfflineUser } from '../../../../src/stages/eval/tau2/responders';
import { formatTau2Summary, tau2UsageOf, type Tau2Results } from '../../../../src/stages/eval/tau2/results';

/** tau2's side: the user speaks first, then the agent, then the user again, then the episode ends with reward 1. */
class ScriptedBridge implements Tau2BridgeLike {
  readonly generation = 0;
  private turn = 0;
  async request<T extends Record<string, unknown>>(op: string): Promise<T> {
    if (op === 'close') return {} as T;
    const roles = ['user', 'agent', 'user'] as const;
    const role = roles[this.turn++];
    if (!role) return { episode: 'e1', done: { simulation: { termination_reason: 'user_stop' }, reward: 1 } } as unknown as T;
    return { episode: 'e1', awaiting: { role, messages: [{ role: 'user', content: `turn ${this.turn}` }], tools: null, tool_choice: null } } as unknown as T;
  }
}

/** An endpoint whose answers carry the usage a server reports; the `cachedAt`-th call comes from the response cache. */
class MeteredEndpoint extends EndpointPolicy {
  calls = 0;
  constructor(private readonly cachedAt?: number) {
    super(EndpointConfig.parse({ baseUrl: 'http://127.0.0.1:1/v1', model: 'm' }));
  }
  override async complete(_body: ChatCompletionCreateParamsNonStreaming) {
    this.calls++;
    const message = { content: 'ok', tool_calls: null, promptTokens: 1000, cachedPromptTokens: 400, completionTokens: 50 };
    return this.calls === this.cachedAt ? { ...message, cacheHit: true as const } : message;
  }
}

const task: Tau2Task = { id: 't1', user_scenario: { instructions: 'I want to change my flight.' }, evaluation_criteria: { actions: [] } };
const pricing = { inputPer1M: 2, cachedInputPer1M: 0.5, outputPer1M: 8 };

test('the user simulator\'s calls of an episode: tokens from the endpoint\'s usage, priced with the role\'s pricing, a cached answer not paid again', async () => {
  const user = new EndpointResponder(new MeteredEndpoint(2), undefined, pricing);
  const r = await playTau2Episode(new ScriptedBridge(), { domain: 'airline', task, trial: 0 }, new OfflineUser(), user, { seed: 1 });
  assert.equal(r.reward, 1);
  assert.equal(r.userCalls, 2);
  // one paid call: 600 uncached + 400 cached prompt tokens, 50 completion tokens
  const cost = (600 * 2 + 400 * 0.5 + 50 * 8) / 1e6;
  // the agent here is no endpoint: no agent entry
  assert.deepEqual(r.usage, { user: { calls: 2, cacheHits: 1, promptTokens: 1000, cachedPromptTokens: 400, completionTokens: 50, costUsd: cost } });
});

test('results sum the stored episodes\' usage (an episode from an earlier attempt counts what it cost then); none offline; the summary prints it', async () => {
  const u = (calls: number, costUsd: number) => ({ calls, cacheHits: 0, promptTokens: 100 * calls, cachedPromptTokens: 0, completionTokens: 10 * calls, costUsd });
  const episodes = [{ usage: { user: u(3, 0.01) } }, {}, { usage: { user: u(2, 0.02), agent: u(1, 0.5) } }];
  const got = tau2UsageOf(episodes);
  assert.equal(got.usage?.user?.calls, 5);
  assert.equal(got.usage?.user?.promptTokens, 500);
  assert.ok(Math.abs(got.usage!.user!.costUsd - 0.03) < 1e-12);
  assert.equal(got.usage?.agent?.calls, 1);
  assert.deepEqual(tau2UsageOf([{}, {}]), {}, 'offline roles: no usage field');
  const results: Tau2Results = { benchmark: 'tau2-bench', tau2: '26.3', policy: {}, user: {}, split: 'base', trials: 1, seed: 0, domains: {}, average: 0, seconds: 1, ...got, episodes: [] };
  assert.match(formatTau2Summary(results), /user simulator: 5 call\(s\), 500 prompt tokens \(0 cached\), 50 completion tokens, \$0\.0300/);
  assert.match(formatTau2Summary(results), /agent endpoint: 1 call\(s\)/);
});
