/**
 * Who answers tau2's model calls in a τ²-Bench episode (./episode.ts):
 *
 * - `EndpointResponder`: an OpenAI-compatible endpoint, sent the request as tau2 would send it (its messages, its tool
 *   schemas, `tool_choice`), the agent under evaluation (`cm2 eval tau2 --endpoint`) or the user simulator
 *   (`llm.roles.user`, temperature 0 unless configured: tau2's default).
 * - `ModelAgent` (./modelAgent.ts): the project's policy (tfjs, or a serving engine that serves it).
 * - `ReferenceAgent` and `OfflineUser`: scripted from the task's gold actions, the harness check (as BFCL's reference
 *   policy): the agent performs the gold actions in order, asks the user to perform the user's (telecom), and says
 *   the information to communicate; the offline user states the reason for the call and what it knows, performs its
 *   gold actions when the agent speaks, says yes to questions a few times, then stops. With both, every task should
 *   score 1: that checks the loop and tau2's scoring, not a model. The offline user is the built-in of
 *   `llm.roles.user` (works with no endpoint), deterministic, and far easier than tau2's LLM user simulator: numbers
 *   with it are a smoke test, not comparable with the paper's (which uses an LLM user simulator).
 */
import type { ChatCompletionCreateParamsNonStreaming } from 'openai/resources/chat/completions';
import { isContextLengthError } from '../../../llm/errors';
import { costUsd } from '../../../llm/client';
import { isOnline, type LlmPricing, type LlmRoleConfig } from '../../../llm/llmConfig';
import { EndpointConfig, EndpointPolicy, type EndpointPolicyOptions } from '../bfcl/runner';
import { Tau2EpisodeStop, type Tau2Answer, type Tau2ChatMessage, type Tau2EpisodeRef, type Tau2Request, type Tau2Responder, type Tau2Task } from './episode';

/** tau2's user stop token (tau2.user.base.STOP). */
export const USER_STOP = '###STOP###';

/** Tool calls made so far in a conversation (to number new ones uniquely). */
const toolCallsIn = (messages: readonly Tau2ChatMessage[]) => messages.reduce((n, m) => n + (m.tool_calls?.length ?? 0), 0);

/** The messages as a strict server takes them: no null tool_calls, tool calls as {id, type, function}. */
function chatMessages(messages: readonly Tau2ChatMessage[]): ChatCompletionCreateParamsNonStreaming['messages'] {
  return messages.map((m) => {
    if (m.role === 'assistant') {
      const calls = (m.tool_calls ?? []).map((c) => ({ id: c.id, type: 'function' as const, function: { name: c.function.name, arguments: c.function.arguments } }));
      return calls.length ? { role: 'assistant' as const, content: m.content, tool_calls: calls } : { role: 'assistant' as const, content: m.content ?? '' };
    }
    if (m.role === 'tool') return { role: 'tool' as const, content: m.content ?? '', tool_call_id: m.tool_call_id ?? '' };
    return { role: m.role, content: m.content ?? '' };
  });
}

export class EndpointResponder implements Tau2Responder {
  readonly description: Record<string, unknown>;

  /** `pricing`: the role's (`llm.roles.user`), for the cost of each call; without it the cost is 0 and the tokens counted. */
  constructor(private readonly endpoint: EndpointPolicy, private readonly signal?: AbortSignal, private readonly pricing?: LlmPricing) {
    this.description = { ...endpoint.description };
  }

  async answer(req: Tau2Request): Promise<Tau2Answer> {
    const body: ChatCompletionCreateParamsNonStreaming = { ...this.endpoint.requestBase(), messages: chatMessages(req.messages) };
    if (req.tools?.length) {
      body.tools = req.tools as ChatCompletionCreateParamsNonStreaming['tools'];
      if (req.toolChoice) body.tool_choice = req.toolChoice as ChatCompletionCreateParamsNonStreaming['tool_choice'];
    }
    let message: Awaited<ReturnType<EndpointPolicy['complete']>>;
    try {
      message = await this.endpoint.complete(body, this.signal);
    } catch (e) {
      if (isContextLengthError(e)) throw new Tau2EpisodeStop('prompt_too_long', (e as Error).message.slice(0, 300));
      throw e;
    }
    const n = toolCallsIn(req.messages);
    const toolCalls = (message.tool_calls ?? []).map((c, k) => ({ id: `call_${n + k}`, name: c.function.name ?? '', arguments: c.function.arguments ?? '' }));
    const [promptTokens, cachedPromptTokens, completionTokens] = [message.promptTokens ?? 0, message.cachedPromptTokens ?? 0, message.completionTokens ?? 0];
    const usage = {
      promptTokens, cachedPromptTokens, completionTokens, cacheHit: message.cacheHit === true,
      costUsd: this.pricing ? costUsd(this.pricing, promptTokens, cachedPromptTokens, completionTokens) : 0,
    };
    return { content: message.content ?? null, ...(toolCalls.length ? { toolCalls } : {}), tokens: completionTokens, usage };
  }
}

type GoldAction = NonNullable<NonNullable<Tau2Task['evaluation_criteria']>['actions']>[number];

/** The task's gold actions cut into runs of one requestor, in order. */
function goldRuns(task: Tau2Task): { requestor: string; actions: GoldAction[] }[] {
  const runs: { requestor: string; actions: GoldAction[] }[] = [];
  for (const a of task.evaluation_criteria?.actions ?? []) {
    const last = runs[runs.length - 1];
    if (last && last.requestor === a.requestor) last.actions.push(a);
    else runs.push({ requestor: a.requestor, actions: [a] });
  }
  return runs;
}

const ASK = 'Please do the following on your device, then tell me when it is done:';
const FINAL = 'All done.';

/**
 * The gold actions as an agent: each of its own actions as a tool call, one at a time; before a run of the user's
 * actions, a message asking for them; at the end, the information to communicate. Stateless: where it is comes from
 * the conversation (its tool calls and its requests so far), so a replayed request gets the same answer.
 */
export class ReferenceAgent implements Tau2Responder {
  readonly description = { kind: 'reference' };

  async answer(req: Tau2Request, ep: Tau2EpisodeRef): Promise<Tau2Answer> {
    const own = req.messages.filter((m) => m.role === 'assistant');
    let calls = toolCallsIn(own);
    let asks = own.filter((m) => (m.content ?? '').startsWith(ASK)).length;
    const finals = own.filter((m) => (m.content ?? '').startsWith(FINAL)).length;
    for (const run of goldRuns(ep.task)) {
      if (run.requestor === 'user') {
        if (asks > 0) {
          asks--;
          continue;
        }
        return { content: `${ASK}\n${run.actions.map((a) => `- ${a.name}(${JSON.stringify(a.arguments)})`).join('\n')}` };
      }
      for (const a of run.actions) {
        if (calls > 0) {
          calls--;
          continue;
        }
        return { content: null, toolCalls: [{ id: `call_${toolCallsIn(req.messages)}`, name: a.name, arguments: JSON.stringify(a.arguments) }] };
      }
    }
    if (finals === 0) return { content: [FINAL, ...(ep.task.evaluation_criteria?.communicate_info ?? [])].join(' ') };
    return { content: 'Thank you. Goodbye.' };
  }
}

/** What the offline user says first: the reason for the call and what it knows (tau2's scenario, without the rest). */
export function scenarioOpening(task: Tau2Task): string {
  const i = task.user_scenario.instructions;
  if (typeof i === 'string') return i;
  return [i.reason_for_call, i.known_info].filter((x): x is string => Boolean(x && x.trim())).map((x) => x.trim()).join('\n\n');
}

/** Yeses the offline user gives before it stops. */
const MAX_YES = 4;

/**
 * The built-in user simulator (no endpoint): deterministic, from the task and its own view of the conversation (tau2
 * flips roles for the user: the agent's messages are `user`, its own `assistant`, its tool results `tool`).
 */
export class OfflineUser implements Tau2Responder {
  readonly description = { kind: 'offline-user' };

  async answer(req: Tau2Request, ep: Tau2EpisodeRef): Promise<Tau2Answer> {
    const view = req.messages.filter((m) => m.role !== 'system');
    const own = view.filter((m) => m.role === 'assistant');
    const last = view[view.length - 1];
    if (own.length === 0) return { content: scenarioOpening(ep.task) };
    if (last?.role === 'tool') {
      let from = view.length;
      while (from > 0 && view[from - 1]!.role === 'tool') from--;
      const results = view.slice(from).map((m) => m.content ?? '');
      return { content: `I did that. This is what I see:\n${results.join('\n')}` };
    }
    // Its runs of gold actions, in order: the next one when the agent has spoken since the last.
    let done = toolCallsIn(own);
    for (const run of goldRuns(ep.task).filter((r) => r.requestor === 'user')) {
      if (done >= run.actions.length) {
        done -= run.actions.length;
        continue;
      }
      const n = toolCallsIn(req.messages);
      return { content: null, toolCalls: run.actions.map((a, k) => ({ id: `user_call_${n + k}`, name: a.name, arguments: JSON.stringify(a.arguments) })) };
    }
    const yeses = own.filter((m) => m.content === 'Yes, please go ahead.').length;
    if (last?.role === 'user' && (last.content ?? '').includes('?') && yeses < MAX_YES) return { content: 'Yes, please go ahead.' };
    return { content: USER_STOP };
  }
}

/** The user simulator of a role config (`llm.roles.user`): its endpoint, temperature 0 unless set (tau2's default), or offline. */
export function userSimulator(role: LlmRoleConfig, opts: EndpointPolicyOptions = {}, signal?: AbortSignal): Tau2Responder {
  if (!isOnline(role)) return new OfflineUser();
  return new EndpointResponder(new EndpointPolicy(EndpointConfig.parse({ ...role, temperature: role.temperature ?? 0 }), opts), signal, role.pricing);
}
