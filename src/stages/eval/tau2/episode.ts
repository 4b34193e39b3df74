/**
 * τ²-Bench episodes (issue 34 item 6). An episode is tau2's own simulation in the bridge process
 * (python/tau2_bridge/bridge.py: `run_task` with tau2's environment, orchestrator, agent and user-simulator classes
 * and evaluator); what it asks of cm2 is each model answer: the agent's (the policy under evaluation) and the user
 * simulator's (`llm.roles.user`, or the offline built-in). A request carries exactly the messages and tool schemas
 * tau2 would send a model (its system prompts: the agent's instructions with the domain policy; the user simulator's
 * guidelines with the task's scenario, and the conversation with the roles flipped).
 *
 * Results: tau2's reward of the simulation (the task's reward basis: database state, environment assertions, actions,
 * communicated information), its termination reason, and the whole simulation as tau2 writes it. pass^k over the
 * trials of each task comes from tau2's own formula (the bridge's `metrics`).
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';

export const TAU2_DOMAINS = ['airline', 'retail', 'telecom'] as const;
export type Tau2Domain = (typeof TAU2_DOMAINS)[number];

/** The paper's τ²-Bench numbers (CM2, Qwen3-8B-Base: SFT → CM2; the average of the three domains), for context. */
export const PAPER_TAU2 = { sft: 18.59, cm2: 26.76 } as const;

/** What the modules here need of the bridge process (src/infra/tau2Bridge.ts): one request, one answer. */
export interface Tau2BridgeLike {
  request<T extends Record<string, unknown> = Record<string, unknown>>(op: string, body?: Record<string, unknown>): Promise<T>;
  readonly generation: number;
}

const Action = z.object({ action_id: z.string().optional(), requestor: z.string().default('assistant'), name: z.string(), arguments: z.record(z.string(), z.unknown()).default({}) }).loose();
const Instructions = z.union([
  z.string(),
  z.object({ reason_for_call: z.string().nullish(), known_info: z.string().nullish(), unknown_info: z.string().nullish(), task_instructions: z.string().nullish() }).loose(),
]);

/** A τ²-Bench task as tau2 writes it (the fields cm2 reads; the rest is kept). */
export const Tau2Task = z.object({
  id: z.string(),
  user_scenario: z.object({ persona: z.string().nullish(), instructions: Instructions }).loose(),
  evaluation_criteria: z.object({
    actions: z.array(Action).nullish(),
    communicate_info: z.array(z.string()).nullish(),
    reward_basis: z.array(z.string()).nullish(),
  }).loose().nullish(),
}).loose();
export type Tau2Task = z.infer<typeof Tau2Task>;

export interface ChatToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** A message of a request, in the chat-completion form tau2 sends its models. */
export interface Tau2ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | null;
  tool_calls?: ChatToolCall[] | null;
  tool_call_id?: string;
}

export interface Tau2Tool {
  type: 'function';
  function: { name: string; description?: string; parameters?: unknown };
}

/** One model call tau2 makes: the agent's or the user simulator's. */
export interface Tau2Request {
  role: 'agent' | 'user';
  messages: Tau2ChatMessage[];
  tools: Tau2Tool[] | null;
  toolChoice: string | null;
}

export interface Tau2Answer {
  content: string | null;
  /** `arguments`: the JSON text the model wrote (tau2 parses it; text that is not JSON ends the episode as tau2 would) */
  toolCalls?: { id: string; name: string; arguments: string }[];
  tokens?: number;
  /** What the call cost, where an endpoint answered it (its `usage`; a cached answer is not paid again) */
  usage?: { promptTokens: number; cachedPromptTokens: number; completionTokens: number; costUsd: number; cacheHit: boolean };
}

/** An endpoint role's calls in episodes: the user simulator's cost (and an endpoint agent's) for the usage ledger. */
export interface Tau2Usage {
  calls: number;
  /** answers from the response cache (a retried activity's): not paid again, not in the token counts */
  cacheHits: number;
  promptTokens: number;
  cachedPromptTokens: number;
  completionTokens: number;
  costUsd: number;
}

/** `a` + `b` (either may be absent). */
export function addTau2Usage(a: Tau2Usage | undefined, b: Tau2Usage | undefined): Tau2Usage | undefined {
  if (!a) return b && { ...b };
  if (!b) return { ...a };
  return {
    calls: a.calls + b.calls,
    cacheHits: a.cacheHits + b.cacheHits,
    promptTokens: a.promptTokens + b.promptTokens,
    cachedPromptTokens: a.cachedPromptTokens + b.cachedPromptTokens,
    completionTokens: a.completionTokens + b.completionTokens,
    costUsd: a.costUsd + b.costUsd,
  };
}

/** One answer's usage as a `Tau2Usage` of one call. */
function usageOfAnswer(u: NonNullable<Tau2Answer['usage']>): Tau2Usage {
  if (u.cacheHit) return { calls: 1, cacheHits: 1, promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0, costUsd: 0 };
  return { calls: 1, cacheHits: 0, promptTokens: u.promptTokens, cachedPromptTokens: u.cachedPromptTokens, completionTokens: u.completionTokens, costUsd: u.costUsd };
}

export interface Tau2EpisodeRef {
  domain: string;
  task: Tau2Task;
  trial: number;
}

/** Answers tau2's model calls of one role (the agent: the policy; the user: the simulator). */
export interface Tau2Responder {
  readonly description: Record<string, unknown>;
  answer(req: Tau2Request, episode: Tau2EpisodeRef): Promise<Tau2Answer>;
  /** Episodes running at once (a batching model waits for all of them before it generates). */
  episodeStart?(): void;
  episodeDone?(): void;
}

export interface Tau2EpisodeResult {
  domain: string;
  taskId: string;
  trial: number;
  seed: number;
  /** tau2's reward (0 when the simulation ended early or failed) */
  reward: number;
  /** tau2's termination reason (`user_stop`, `agent_stop`, `max_steps`, `too_many_errors`, ...), null when it failed */
  termination: string | null;
  /** why tau2 refused the episode (a model answer it could not take, e.g. arguments that are not JSON) */
  error?: string;
  agentCalls: number;
  userCalls: number;
  /** the endpoint roles' calls of this episode (absent for a role no endpoint played: a model, the offline user) */
  usage?: { agent?: Tau2Usage; user?: Tau2Usage };
  /** tau2's SimulationRun as JSON (messages with their turn indices, reward_info with every check) */
  simulation: unknown;
}

/** A model answer that ends the episode (its prompt does not fit the model): the episode scores 0 with this reason. */
export class Tau2EpisodeStop extends Error {
  override readonly name = 'Tau2EpisodeStop';
  constructor(readonly reason: string, detail: string) {
    super(`${reason}: ${detail}`);
  }
}

/** The seed tau2 gets for a trial of a task: from the evaluation's seed, the domain, the task and the trial. */
export function trialSeed(seed: number, domain: string, taskId: string, trial: number): number {
  return createHash('sha256').update(`${seed}/${domain}/${taskId}/${trial}`).digest().readUInt32BE(0) & 0x7fffffff;
}

interface Awaiting {
  episode: string;
  awaiting?: { role: 'agent' | 'user'; messages: Tau2ChatMessage[]; tools: Tau2Tool[] | null; tool_choice: string | null };
  done?: { simulation: { termination_reason?: string } | null; reward: number; error?: string };
  closed?: boolean;
}

export interface PlayOptions {
  seed: number;
  maxSteps?: number;
  maxErrors?: number;
  signal?: AbortSignal;
}

/** The tasks of a domain (of a split of tau2's split_tasks.json, e.g. `base` or `test`), as tau2 loads them. */
export async function loadTau2Tasks(bridge: Tau2BridgeLike, domain: string, split?: string): Promise<Tau2Task[]> {
  const got = await bridge.request<{ tasks: unknown[] }>('tasks', { domain, ...(split ? { split } : {}) });
  return got.tasks.map((t, i) => {
    const parsed = Tau2Task.safeParse(t);
    if (!parsed.success) throw new Error(`τ²-Bench ${domain} task ${i}: ${parsed.error.issues.map((x) => `${x.path.join('.')}: ${x.message}`).join('; ')}`);
    return parsed.data;
  });
}

/** Plays one trial of a task: tau2 runs the simulation, `agent` and `user` answer its model calls. */
export async function playTau2Episode(bridge: Tau2BridgeLike, ref: Tau2EpisodeRef, agent: Tau2Responder, user: Tau2Responder, opts: PlayOptions): Promise<Tau2EpisodeResult> {
  const seed = trialSeed(opts.seed, ref.domain, ref.task.id, ref.trial);
  let calls = { agent: 0, user: 0 };
  const usage: { agent?: Tau2Usage; user?: Tau2Usage } = {};
  const usageField = () => (usage.agent || usage.user ? { usage } : {});
  agent.episodeStart?.();
  if (user !== agent) user.episodeStart?.();
  let open: string | undefined;
  try {
    let r = await bridge.request<Awaiting & Record<string, unknown>>('open', { domain: ref.domain, task_id: ref.task.id, seed, max_steps: opts.maxSteps ?? 100, max_errors: opts.maxErrors ?? 10 });
    const generation = bridge.generation;
    open = r.episode;
    // tau2 asks again when an answer is empty (its `generate` retries): the same request gets the same answer.
    let last: { key: string; answer: Tau2Answer } | undefined;
    while (r.awaiting) {
      opts.signal?.throwIfAborted();
      const a = r.awaiting;
      const responder = a.role === 'user' ? user : agent;
      const key = JSON.stringify([a.role, a.messages, a.tools, a.tool_choice]);
      let answer = last?.key === key ? last.answer : undefined;
      if (!answer) {
        calls = { ...calls, [a.role]: calls[a.role] + 1 };
        try {
          answer = await responder.answer({ role: a.role, messages: a.messages, tools: a.tools, toolChoice: a.tool_choice }, ref);
        } catch (e) {
          if (!(e instanceof Tau2EpisodeStop)) throw e;
          return { domain: ref.domain, taskId: ref.task.id, trial: ref.trial, seed, reward: 0, termination: e.reason, error: e.message, agentCalls: calls.agent, userCalls: calls.user, ...usageField(), simulation: null };
        }
        if (answer.usage) usage[a.role] = addTau2Usage(usage[a.role], usageOfAnswer(answer.usage));
        last = { key, answer };
      }
      const lost = () => new Error(`τ²-Bench ${ref.domain} task ${ref.task.id}: the bridge process restarted during the episode (its simulation is gone)`);
      if (bridge.generation !== generation) throw lost();
      try {
        r = await bridge.request<Awaiting & Record<string, unknown>>('reply', { episode: r.episode, message: { content: answer.content, tool_calls: answer.toolCalls ?? [] } });
      } catch (e) {
        // a process that died since the last answer is started again by this request, without the episode
        if (bridge.generation !== generation) throw lost();
        throw e;
      }
    }
    open = undefined;
    if (!r.done) throw new Error(`τ²-Bench ${ref.domain} task ${ref.task.id}: the episode was closed`);
    return {
      domain: ref.domain,
      taskId: ref.task.id,
      trial: ref.trial,
      seed,
      reward: r.done.reward,
      termination: r.done.simulation?.termination_reason ?? null,
      ...(r.done.error ? { error: r.done.error } : {}),
      agentCalls: calls.agent,
      userCalls: calls.user,
      ...usageField(),
      simulation: r.done.simulation,
    };
  } finally {
    agent.episodeDone?.();
    if (user !== agent) user.episodeDone?.();
    if (open) await bridge.request('close', { episode: open }).catch(() => undefined);
  }
}

export interface Tau2Metrics {
  tasks: number;
  trials: number;
  avg_reward: number;
  /** k → pass^k (tau2's formula: the mean over tasks of C(successes, k) / C(trials, k)) */
  pass_hat_k: Record<string, number>;
}

/** tau2's metrics of a set of results (the bridge computes them with tau2's own functions). */
export async function tau2Metrics(bridge: Tau2BridgeLike, results: readonly Tau2EpisodeResult[]): Promise<Tau2Metrics> {
  const rewards: Record<string, number[]> = {};
  for (const r of results) (rewards[`${r.domain}/${r.taskId}`] ??= []).push(r.reward);
  return bridge.request<Tau2Metrics & Record<string, unknown>>('metrics', { rewards });
}
