/**
 * Multi-turn, multi-step rollouts (spec §6.2), advanced one turn at a time so the judge can run between turns.
 *
 * `initRollouts` builds G episodes per prompt: the reference conversation cut after its first user message.
 * `advanceRollouts` runs every episode whose status is `generate` until it gives a final reply (→ `judge`), or ends
 * (error_tool_call, tool failure, length, generation cap → `judge`, so its partial turn is judged too). All
 * live episodes of the step are generated as ONE batch per decoding round (G × prompts sequences).
 * `applyTurnDecisions` (after the judge) continues an episode with the next reference user message, or ends it.
 *
 * Token bookkeeping (§8.1): the sequence is the policy's context exactly as it was fed: the prompt rendered with
 * the chat template; each generation's ids (the policy tokens: one segment, the stop id it sampled included) +
 * `<|im_end|>` (if it did not end with it) + `\n` (context, not trained); then the
 * template's rendering of the messages appended since (tool results, the next user message) with the generation
 * prompt, as a text delta of two renders (the template is prefix-stable, src/chat/tokenize.ts).
 *
 * Decisions:
 * - An episode that ends mid-turn is judged on its real steps (spec §6.6 quirk 1 offers this or "≈0"): the reward
 *   then reflects what the policy did, e.g. a correct call followed by a length cut still earns its tool item.
 * - RL prompts render the sample's tools as stored (the SFT format); the reference's pydantic normalisation of
 *   tool JSON (§6.2 step 1) is not reproduced.
 * - Sampling is seeded per (RL step seed, decoding round): a retried activity regenerates the same tokens. With
 *   `episodeSeeds` (chunked rollouts, issue 16) each episode samples from its own PRNG, seeded by (step seed, episode
 *   id, generation index): its tokens do not depend on which chunk, worker or batch it was generated in.
 */
import type { Example } from '../../kernel/schema';
import { assistantContentFromIds, completeAssistantIds, promptIds, type ChatTokenizer } from '../../chat/tokenize';
import { renderChat } from '../../chat/template';
import { errorToolCallText, parseToolCalls } from '../../chat/toolCalls';
import { DecodePool } from '../../model/net/decodePool';
import type { TokenEngine } from '../../llm/engine';
import { PREFILL_CHUNK_TOKENS } from '../../model/net/generate';
import type { DecodeCounts } from '../../model/net/decodeSession';
import type { QwenModel } from '../../model/net/qwen';
import type { ChecklistVariant } from '../checklist/schema';
import { turnSpans } from '../checklist/steps';
import { turnDecision } from './algo/rewards';
import type { EndReason, Rollout } from './rolloutSchema';
import { rawCallArguments, type ToolArguments } from './env/arguments';

export interface RolloutLimits {
  /** Tokens per assistant generation. */
  maxNewTokens: number;
  /** Context cap: prompt + everything after it. */
  maxModelLen: number;
  maxAssistantTurns: number;
  maxUserTurns: number;
  temperature: number;
  topP: number;
  /**
   * Prompt tokens (whole batch) per prefill forward call, at most PREFILL_CHUNK_TOKENS (2,048): the live episodes of a
   * round are generated in one decoding loop, their prefill in pieces (a whole batch's prefill at once can exceed the
   * wasm backend's 4 GiB heap, and one long call blocks heartbeats).
   */
  maxBatchTokens?: number;
  /** KV cache budget of one decoding loop, MiB: more live episodes than fit are decoded in several loops, one after the other. */
  kvCacheMiB?: number;
}

export const DEFAULT_KV_CACHE_MIB = 2048;

/** What a tool call got from the environment (src/stages/rl/env/toolEnv.ts satisfies this). */
export interface ToolAnswer {
  text: string;
  success: boolean;
  source: string;
}

export interface ToolExecutor {
  execute(uuid: string, name: string, args: ToolArguments, ctx: { salt: string }): Promise<ToolAnswer>;
}

/** The RL prompt of an example: its messages through the first user message (a system message is kept). */
export function promptMessages(example: Example): Example['messages'] {
  const first = example.messages.findIndex((m) => m.role === 'user');
  if (first < 0) throw new Error(`example ${example.uuid} has no user message`);
  return example.messages.slice(0, first + 1);
}

/** Reference user messages of an example, in order. */
export const referenceUserMessages = (example: Example) => example.messages.filter((m) => m.role === 'user');

/**
 * G fresh episodes per example; `group` = `groupOffset` + index of the example in `examples` (a chunk of a step's
 * prompts passes its first prompt's index in the step, so groups stay unique when the chunks are merged).
 */
export function initRollouts(examples: readonly Example[], G: number, tok: ChatTokenizer, groupOffset = 0): Rollout[] {
  const out: Rollout[] = [];
  examples.forEach((ex, group) => {
    const messages = promptMessages(ex);
    const tokens = promptIds(messages, ex.tools, tok);
    const refTurns = turnSpans(ex.messages).length;
    for (let member = 0; member < G; member++) {
      out.push({
        id: `${ex.uuid}#${member}`,
        uuid: ex.uuid,
        group: groupOffset + group,
        member,
        messages: structuredClone(messages),
        tokens: [...tokens],
        logprobs: [],
        segments: [],
        turns: 1,
        refTurns,
        status: 'generate',
        generations: 0,
        toolFailed: false,
        toolSources: {},
      });
    }
  });
  return out;
}

const end = (r: Rollout, reason: EndReason): void => {
  r.ended = reason;
  r.status = 'judge';
};

/** Append the tokens of the messages added since the last assistant message, with the generation prompt. */
function appendContextDelta(r: Rollout, tools: readonly unknown[], tok: ChatTokenizer): void {
  let last = -1;
  r.messages.forEach((m, i) => {
    if (m.role === 'assistant') last = i;
  });
  if (last < 0) return; // still the initial prompt: already tokenised with its generation prompt
  if (last === r.messages.length - 1) throw new Error(`rollout ${r.id}: nothing to answer after the last assistant message`);
  const before = renderChat(r.messages.slice(0, last + 1), tools);
  const after = renderChat(r.messages, tools, { addGenerationPrompt: true });
  if (!after.startsWith(before)) throw new Error(`rollout ${r.id}: chat template is not prefix-stable; cannot append tool/user messages`);
  r.tokens.push(...tok.encode(after.slice(before.length)));
}

export interface AdvanceOptions {
  limits: RolloutLimits;
  /** Seed of this RL step's sampling; combined with the decoding round. */
  seed: number;
  /** Salt for the environment's LLM cache: stable across retries of the same step and phase. */
  salt: string;
  /** Seed each episode's sampling by (seed, episode id, generation index) instead of by (seed, round, call). */
  episodeSeeds?: boolean;
  onRound?: (round: number, live: number) => void;
  onDecodeStep?: (step: number) => void;
  /** Tokens prefilled, reused from a cache, saved by a shared prompt, and decoded in the call (once, at its end). */
  onCounts?: (counts: DecodeCounts) => void;
}

/**
 * Generate for every `generate` episode until each has given a final reply or ended. Mutates and returns `rollouts`.
 * `examples` by uuid supplies tools. `policy` is the embedded model (decoded here, src/model/net/decodePool.ts) or a
 * serving engine that serves the policy (src/llm/engine.ts): only the token generation differs.
 */
export async function advanceRollouts(
  rollouts: Rollout[],
  examples: ReadonlyMap<string, Example>,
  policy: QwenModel | TokenEngine,
  tok: ChatTokenizer,
  env: ToolExecutor,
  opts: AdvanceOptions,
): Promise<Rollout[]> {
  // The caches live for this call only: a retried activity, or one on another worker, starts from the same empty
  // state, so it computes exactly what the first attempt did (same float rounding, same tokens). See docs/decisions.md.
  const engine: TokenEngine = 'decode' in policy ? policy : new DecodePool(policy, (opts.limits.kvCacheMiB ?? DEFAULT_KV_CACHE_MIB) * 2 ** 20);
  const before = { ...engine.counts };
  try {
    return await advance(rollouts, examples, engine, tok, env, opts);
  } finally {
    const c = engine.counts;
    opts.onCounts?.({ prefilled: c.prefilled - before.prefilled, reused: c.reused - before.reused, shared: c.shared - before.shared, decoded: c.decoded - before.decoded });
    if (engine !== policy) engine.dispose();
  }
}

async function advance(rollouts: Rollout[], examples: ReadonlyMap<string, Example>, pool: TokenEngine, tok: ChatTokenizer, env: ToolExecutor, opts: AdvanceOptions): Promise<Rollout[]> {
  const { limits } = opts;
  for (let round = 0; ; round++) {
    const live = rollouts.filter((r) => r.status === 'generate');
    if (live.length === 0) return rollouts;
    opts.onRound?.(round, live.length);
    const batch: { r: Rollout; budget: number }[] = [];
    for (const r of live) {
      appendContextDelta(r, examples.get(r.uuid)!.tools, tok);
      const budget = Math.min(limits.maxNewTokens, limits.maxModelLen - r.tokens.length - 1);
      if (budget <= 0) end(r, 'length');
      else batch.push({ r, budget });
    }
    if (batch.length === 0) continue;
    // One decoding loop for the round: each episode's cache goes on from the last round (or activity), a group's
    // shared prompt is prefilled once (src/model/net/decodeSession.ts); maxBatchTokens caps the prefill's pieces.
    // A serving engine batches as it likes: its episodes are always seeded one by one.
    const ownSeeds = opts.episodeSeeds || !(pool instanceof DecodePool);
    const gen = await pool.decode(batch.map(({ r, budget }) => ({
      key: r.id,
      tokens: r.tokens,
      maxNewTokens: budget,
      ...(ownSeeds ? { seed: episodeSeed(opts.seed, r.id, r.generations) } : {}),
    })), {
      temperature: limits.temperature,
      topP: limits.topP,
      stopTokens: tok.stopIds,
      seed: mixSeed(opts.seed, round * 1009),
      padId: tok.special.pad,
      // Pieces of at most PREFILL_CHUNK_TOKENS: a bigger one holds the event loop past a heartbeat timeout (docs/decisions.md).
      prefillChunkTokens: Math.min(limits.maxBatchTokens ?? PREFILL_CHUNK_TOKENS, PREFILL_CHUNK_TOKENS),
      ...(opts.onDecodeStep ? { onStep: opts.onDecodeStep } : {}),
    });
    await Promise.all(
      batch.map(async ({ r }, i) => {
        const ids = gen.tokens[i]!;
        const lps = gen.logprobs[i]!;
        const finished = ids.length > 0 && tok.stopIds.includes(ids[ids.length - 1]!);
        await afterGeneration(r, ids, lps, finished, tok, env, limits, `${opts.salt}/${r.id}/g${r.generations}`);
      }),
    );
  }
}

async function afterGeneration(
  r: Rollout,
  ids: number[],
  lps: number[],
  finished: boolean,
  tok: ChatTokenizer,
  env: ToolExecutor,
  limits: RolloutLimits,
  salt: string,
): Promise<void> {
  const stored = completeAssistantIds(ids, tok);
  const content = assistantContentFromIds(ids, tok);
  // The segment is what the policy sampled: the `<|im_end|>` added to a cut generation and the `\n` after it stay in
  // the context but get no loss and no advantage.
  r.segments.push({ message: r.messages.length, turn: r.turns - 1, start: r.tokens.length, end: r.tokens.length + ids.length });
  r.tokens.push(...stored);
  r.logprobs.push(...lps);
  r.messages.push({ role: 'assistant', content });
  r.generations++;
  if (!finished) return end(r, 'length');

  const parsed = parseToolCalls(content);
  if (!parsed.hasToolCall) {
    // A final reply: the turn is complete; the judge decides whether the dialogue goes on.
    r.status = 'judge';
    if (r.generations >= limits.maxAssistantTurns) r.ended = 'max_assistant_turns';
    return;
  }
  const bump = (source: string) => (r.toolSources[source] = (r.toolSources[source] ?? 0) + 1);
  if (parsed.errors.length > 0) {
    bump('parse_error');
    r.messages.push({ role: 'tool', content: errorToolCallText(parsed.errors) });
    return end(r, 'error_tool_call');
  }
  // The raw argument texts keep Python's int/float distinction for replay matching and schema checks (§8.1).
  const raw = rawCallArguments(content);
  const answers = await Promise.all(parsed.calls.map((c, k) => env.execute(r.uuid, c.name, raw.length === parsed.calls.length ? raw[k]! : c.arguments, { salt: `${salt}/c${k}` })));
  for (const a of answers) {
    bump(a.source);
    r.messages.push({ role: 'tool', content: a.text });
  }
  if (answers.some((a) => a.text.includes('error_tool_call'))) return end(r, 'error_tool_call');
  if (answers.some((a) => !a.success)) {
    r.toolFailed = true;
    return end(r, 'tool_failed');
  }
  if (r.tokens.length >= limits.maxModelLen) return end(r, 'length');
  if (r.generations >= limits.maxAssistantTurns) return end(r, 'max_assistant_turns');
}

/**
 * After the judge has filled `verdicts` for the episode's current turn: an ended episode becomes `done`; a complete
 * turn either continues with the next reference user message or ends the episode (spec §6.5).
 */
export function applyTurnDecisions(rollouts: Rollout[], checklists: ReadonlyMap<string, ChecklistVariant[]>, examples: ReadonlyMap<string, Example>, limits: RolloutLimits): void {
  for (const r of rollouts) {
    if (r.status !== 'judge') continue;
    if (r.ended) {
      r.status = 'done';
      continue;
    }
    const variants = checklists.get(r.uuid)!;
    const turn = r.turns - 1;
    const perVariant = (r.verdicts ?? []).map((v) => v[turn]!);
    const decision = turnDecision(variants, perVariant, turn, r.refTurns);
    if (!decision.continue) {
      r.ended = decision.reason === 'final_turn' ? 'final_turn' : 'turn_control';
      r.status = 'done';
      continue;
    }
    if (r.turns >= limits.maxUserTurns) {
      r.ended = 'max_user_turns';
      r.status = 'done';
      continue;
    }
    const next = referenceUserMessages(examples.get(r.uuid)!)[r.turns];
    if (!next) {
      r.ended = 'final_turn';
      r.status = 'done';
      continue;
    }
    r.messages.push(structuredClone(next));
    r.turns++;
    r.status = 'generate';
  }
}

/** A 32-bit seed from a step seed and a round (splitmix-style mixing). */
export function mixSeed(seed: number, round: number): number {
  let x = (Math.imul(seed >>> 0, 0x9e3779b1) ^ Math.imul(round + 1, 0x85ebca6b)) >>> 0;
  x ^= x >>> 16;
  x = Math.imul(x, 0x7feb352d) >>> 0;
  x ^= x >>> 15;
  return x >>> 0;
}

/** The sampling seed of one generation of one episode: a function of the step seed, the episode id and the generation index only. */
export function episodeSeed(seed: number, id: string, generation: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 0x01000193) >>> 0;
  return mixSeed(mixSeed(seed, h), generation);
}
