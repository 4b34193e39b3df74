/**
 * The demo dataset: multi-turn (1–3 user turns), multi-step tool-use dialogues over the demo tool world, in the
 * spec's raw message format (§1.2), with their ground truth in `meta.world` and, for a share of them, one
 * deliberate defect labelled in `meta.broken`.
 *
 * Message format (what the rule filters, the LLM filter and the compressor expect):
 *  - `{role:'user', content}`
 *  - tool-call step: `{role:'assistant', content:'<think>\n…\n</think>', tool_calls:[{id, type:'function',
 *    function:{name, arguments:<JSON string>}}]}` — one or two calls (two = parallel calls);
 *  - its tool messages, one per call, in call order: `{role:'tool', content:<JSON text of the executed result>}`;
 *  - final reply: `{role:'assistant', content:'<think>\n…\n</think>\n\n<visible reply>'}`.
 *
 * Determinism: example `i` is a pure function of (seed, i) — its own random stream, world seed and uuid — so
 * generating 10 examples gives the first 10 of 1,000, and whether an example is broken never changes the content of
 * the clean ones. Each example has its own world seed (`meta.world.seed`), so numbers differ between dialogues and a
 * policy must read the tool results instead of memorising facts; `executeTool(name, args, meta.world.seed)`
 * reproduces every tool message of a clean example.
 */
import { indexOnBoundaries } from '../stages/checklist/check';
import type { Example, Message, ToolCall } from '../kernel/schema';
import { breakExample, RULE_BROKEN_CODES, type BrokenCode } from './breakers';
import { deterministicUuid, hash32, Rng } from './random';
import { closingScenario, SCENARIOS, TurnContext, type DraftTurn, type Memory, type Scenario } from './scenarios';
import { toolNamesOf, toolResultText, toolSchema, toolSchemasOf } from './tools';
import { DOMAINS, type Domain, type JsonValue, type ToolSchema } from './worldTypes';

export { BROKEN_CODES, RULE_BROKEN_CODES, type BrokenCode } from './breakers';

/** A call a correct assistant makes in a turn (the reference trajectory's call). */
export interface WorldExpectedCall {
  name: string;
  arguments: Record<string, JsonValue>;
  /**
   * 0-based index of the assistant message within the turn that makes the call (`splitTurns(...)[t].steps[k].index`).
   * Calls with the same index are parallel; a call with a higher index may use results of lower ones.
   */
  assistantStep: number;
}

/** Ground truth of one user turn. */
export interface WorldTurn {
  intent: string;
  /** What a correct assistant achieves in the turn, in plain words. */
  goal: string;
  /** False when a correct assistant answers without any tool (asking back, saying goodbye). */
  requiresTool: boolean;
  expectedCalls: WorldExpectedCall[];
  /** Values the final reply must state, exactly as the tool results give them (numbers as JSON prints them). */
  answerFacts: string[];
}

/** `meta.world`: everything an offline checklist annotator or judge needs about the intended dialogue. */
export interface WorldMeta {
  /** Domain of the first turn. */
  domain: Domain;
  /** Domains of all turns (a dialogue may switch domain once), in order of first use. */
  domains: Domain[];
  /** World seed: pass it to `executeTool` to reproduce or extend this dialogue's tool results. */
  seed: number;
  turns: WorldTurn[];
}

export interface DemoMeta {
  generator: 'cm2-demo-world';
  datasetSeed: number;
  index: number;
  world: WorldMeta;
  /** Domains whose tools were offered only as distractors. */
  distractorDomains: Domain[];
  /** The one defect this example carries, named by the filter that must catch it. Absent on clean examples. */
  broken?: BrokenCode;
  /** What exactly was broken (message index, value), for debugging filters. */
  brokenDetail?: string;
  /**
   * Present when this dialogue's demonstrator was terse (`GenerateOptions.terseRate`): its final replies state only
   * the first of the facts the user asked for. Well formed and grounded, so no filter drops it.
   */
  demonstrator?: 'terse';
}

export interface GenerateOptions {
  seed: number;
  count: number;
  /** Share of examples with one deliberate defect (default 0.15). */
  brokenRate?: number;
  /** Share of the broken examples whose defect is semantic (`llm_filter`) rather than a rule violation (default 1/3). */
  llmBrokenShare?: number;
  /**
   * Share of dialogues written by a terse demonstrator (default 0): each final reply that should state several facts
   * states only the first (`terseReply`). Real cold-start data is imperfect in such ways — a plausible, well-formed,
   * grounded answer that no filter flags — and SFT imitates it; the checklist, written from the world's ground truth,
   * still asks for every fact, so RL with checklist rewards has something SFT cannot teach. Decided by its own random
   * stream: the rest of the dialogue is the same at any rate.
   */
  terseRate?: number;
}

export const DEFAULT_BROKEN_RATE = 0.15;
export const DEFAULT_LLM_BROKEN_SHARE = 1 / 3;

/** Generate `count` demo dialogues (indices 0..count-1). */
export function generateDemoDataset(opts: GenerateOptions): Example[] {
  if (!Number.isInteger(opts.count) || opts.count < 0) throw new RangeError(`count must be a non-negative integer, got ${opts.count}`);
  const rate = opts.brokenRate ?? DEFAULT_BROKEN_RATE;
  if (!(rate >= 0 && rate <= 1)) throw new RangeError(`brokenRate must be in [0, 1], got ${rate}`);
  const terse = opts.terseRate ?? 0;
  if (!(terse >= 0 && terse <= 1)) throw new RangeError(`terseRate must be in [0, 1], got ${terse}`);
  return Array.from({ length: opts.count }, (_, index) => generateDemoExample(opts.seed, index, opts));
}

/** One demo dialogue; `generateDemoDataset` is this for every index. */
export function generateDemoExample(seed: number, index: number, opts: Pick<GenerateOptions, 'brokenRate' | 'llmBrokenShare' | 'terseRate'> = {}): Example {
  const terseRate = opts.terseRate ?? 0;
  const terse = terseRate > 0 && new Rng(hash32('cm2-demo-terse', seed, index)).chance(terseRate);
  const clean = cleanExample(seed, index, terse);
  const world = (clean.meta as unknown as DemoMeta).world;
  // A separate stream decides and applies the defect, so the clean content never depends on brokenRate.
  const rb = new Rng(hash32('cm2-demo-broken', seed, index));
  if (!rb.chance(opts.brokenRate ?? DEFAULT_BROKEN_RATE)) return clean;
  const code: BrokenCode = rb.chance(opts.llmBrokenShare ?? DEFAULT_LLM_BROKEN_SHARE) ? 'llm_filter' : rb.pick(RULE_BROKEN_CODES);
  const broken = structuredClone(clean);
  const detail = breakExample(broken, code, rb, world.seed);
  broken.meta = { ...(broken.meta ?? {}), broken: code, brokenDetail: detail };
  return broken;
}

// ---------------------------------------------------------------------------------------------------------------

/** How many user turns a dialogue has. */
const TURN_COUNTS: readonly (readonly [number, number])[] = [
  [1, 0.3],
  [2, 0.4],
  [3, 0.3],
];

/** Choose the next scenario given what the dialogue has so far. */
function nextScenario(rng: Rng, first: Domain, memory: Memory, turnsSoFar: number, remaining: number): Scenario {
  const fits = (s: Scenario) => s.turns <= remaining;
  if (turnsSoFar === 0) return rng.pick(SCENARIOS[first].filter((s) => s.role === 'opener' && fits(s)));
  if (remaining === 1 && rng.chance(0.3)) return closingScenario;
  const current = memory.lastDomain === 'general' || memory.lastDomain === undefined ? first : memory.lastDomain;
  const followups = SCENARIOS[current].filter((s) => s.role === 'followup' && fits(s) && (s.applicable?.(memory) ?? true));
  const r = rng.float();
  if (followups.length > 0 && r < 0.6) return rng.pick(followups);
  if (r < 0.85) return rng.pick(SCENARIOS[current].filter((s) => s.role === 'opener' && fits(s)));
  // Switch domain: the user moves on to something else in the same conversation.
  const other = rng.pick(DOMAINS.filter((d) => d !== current));
  return rng.pick(SCENARIOS[other].filter((s) => s.role === 'opener' && fits(s)));
}

function cleanExample(seed: number, index: number, terse: boolean): Example {
  const rng = new Rng(hash32('cm2-demo', seed, index));
  const worldSeed = hash32('cm2-demo-world', seed, index);
  const first = rng.pick(DOMAINS);
  const target = rng.weighted(TURN_COUNTS);
  const memory: Memory = {};
  const ctx = new TurnContext(rng, worldSeed, memory);
  const drafts: DraftTurn[] = [];
  const domains: Domain[] = [];
  while (drafts.length < target) {
    const scenario = nextScenario(rng, first, memory, drafts.length, target - drafts.length);
    if (scenario.domain !== 'general' && !domains.includes(scenario.domain)) domains.push(scenario.domain);
    for (const turn of scenario.build(ctx)) {
      drafts.push(turn);
      memory.lastIntent = turn.intent;
      memory.lastDomain = scenario.domain;
    }
  }

  // Candidate tools: every tool of the domains used, and sometimes distractors from one other domain.
  const tools: ToolSchema[] = toolSchemasOf(domains);
  const distractorDomains: Domain[] = [];
  if (rng.chance(0.4)) {
    const other = rng.pick(DOMAINS.filter((d) => !domains.includes(d)));
    const names = toolNamesOf(other);
    distractorDomains.push(other);
    tools.push(...rng.sample(names, rng.int(1, names.length)).map(toolSchema));
  }

  const meta: DemoMeta = {
    generator: 'cm2-demo-world',
    datasetSeed: seed,
    index,
    world: { domain: first, domains, seed: worldSeed, turns: drafts.map(worldTurn) },
    distractorDomains,
    ...(terse ? { demonstrator: 'terse' as const } : {}),
  };
  if (terse) for (const turn of drafts) turn.reply = terseReply(turn.reply, turn.answerFacts);
  return {
    uuid: deterministicUuid('cm2-demo', seed, index),
    messages: render(drafts, (turn, step, k) => `call_${hash32('call', seed, index, turn, step, k).toString(16).padStart(8, '0')}`),
    tools: rng.shuffle(tools),
    meta: meta as unknown as Record<string, unknown>,
  };
}

function worldTurn(turn: DraftTurn): WorldTurn {
  return {
    intent: turn.intent,
    goal: turn.goal,
    requiresTool: turn.requiresTool,
    expectedCalls: turn.steps.flatMap((step, assistantStep) => step.calls.map((c) => ({ name: c.name, arguments: structuredClone(c.arguments), assistantStep }))),
    answerFacts: [...turn.answerFacts],
  };
}

/** Render draft turns as messages in the spec's raw format. */
function render(drafts: readonly DraftTurn[], callId: (turn: number, step: number, k: number) => string): Message[] {
  const messages: Message[] = [];
  drafts.forEach((turn, t) => {
    messages.push({ role: 'user', content: turn.user });
    turn.steps.forEach((step, s) => {
      const toolCalls: ToolCall[] = step.calls.map((c, k) => ({ id: callId(t, s, k), type: 'function', function: { name: c.name, arguments: JSON.stringify(c.arguments) } }));
      messages.push({ role: 'assistant', content: `<think>\n${step.think}\n</think>`, tool_calls: toolCalls });
      for (const c of step.calls) messages.push({ role: 'tool', content: toolResultText(c.outcome) });
    });
    messages.push({ role: 'assistant', content: `<think>\n${turn.replyThink}\n</think>\n\n${turn.reply}` });
  });
  return messages;
}

/**
 * What a terse demonstrator replies: `reply` cut at the first clause boundary (a sentence end, a comma or colon,
 * " and ", " with ", " while ", " but ", " at ", " for ") after the first of `facts` it states (word boundaries,
 * ignoring case) and before the second, ending with a full stop. A reply that states fewer than two facts, or has no
 * such boundary between them, is returned unchanged.
 *   "It is foggy in Lyon with 21 degrees celsius and 34 percent humidity." → "It is foggy in Lyon."
 */
export function terseReply(reply: string, facts: readonly string[]): string {
  const lower = reply.toLowerCase();
  const found = facts
    .map((f) => ({ at: indexOnBoundaries(lower, f.trim().toLowerCase()), len: f.trim().length }))
    .filter((f) => f.at >= 0 && f.len > 0)
    .sort((a, b) => a.at - b.at);
  const first = found[0];
  const second = found.find((f) => first !== undefined && f.at >= first.at + first.len);
  if (!first || !second) return reply;
  const head = reply.slice(0, second.at);
  const firstEnd = first.at + first.len;
  for (const m of head.matchAll(/[.!?](?=\s)|[,;:](?=\s)|\s+(?:and|with|while|but|at|for)\s/g)) {
    const at = m.index ?? 0;
    if (at < firstEnd) continue;
    return /[.!?]/.test(m[0]) ? head.slice(0, at + 1) : `${head.slice(0, at).trimEnd()}.`;
  }
  return reply;
}

/** `meta.world` of a generated example (throws if the example was not generated here). */
export function worldMetaOf(example: Example): WorldMeta {
  const world = (example.meta as Partial<DemoMeta> | undefined)?.world;
  if (!world) throw new Error(`example ${example.uuid} has no meta.world (not a demo-world example)`);
  return world;
}
