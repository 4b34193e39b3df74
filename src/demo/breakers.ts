/**
 * Deliberate defects for the demo dataset. Each breaker changes a clean example in ONE way that one specific filter
 * must catch, and returns a short description of the change. The label (`meta.broken`) is the code of that filter:
 * the rule filters of spec §2.1, or `llm_filter` for a semantic error that passes every rule (§2.2).
 *
 * The defects imitate what the reference's rule-filter counts show in real distilled data (calls with wrong names
 * or arguments, broken role order, missing tool responses, invalid JSON, duplicate tools, empty messages, broken
 * think tags) plus the two errors an LLM filter is for: a tool argument the user never gave (hallucinated), and a
 * reply that contradicts the tool results.
 */
import type { Example, Message, ToolCall } from '../kernel/schema';
import { ACCOUNT_IDS, CITY_NAMES, DAYS, EVENT_TITLES, NEW_EVENT_TITLES, PEOPLE, PRODUCT_KINDS, PRODUCTS } from './catalog';
import { GroundingContext, isFactToken, tokensOf, visibleReply } from '../kernel/grounding';
import type { Rng } from './random';
import { executeTool, toolResultText, WORLD_TOOLS } from './tools';
import { DEFAULT_ENABLED_FILTERS } from '../stages/prepare/filters';

/** The defects the generator plants: one per filter the reference enables, so that each is caught by the filter named. */
export const RULE_BROKEN_CODES = DEFAULT_ENABLED_FILTERS;
export type RuleBrokenCode = (typeof RULE_BROKEN_CODES)[number];
export type BrokenCode = RuleBrokenCode | 'llm_filter';
export const BROKEN_CODES: readonly BrokenCode[] = [...RULE_BROKEN_CODES, 'llm_filter'];

/** Apply the defect `code` to `ex` in place; returns what was changed. Throws if the example offers no place for it. */
export function breakExample(ex: Example, code: BrokenCode, rng: Rng, worldSeed: number): string {
  return BREAKERS[code](ex, rng, worldSeed);
}

type Breaker = (ex: Example, rng: Rng, worldSeed: number) => string;

// ---------------------------------------------------------------------------------------------------------------
// Accessors

interface CallRef {
  message: number;
  call: number;
  tc: ToolCall;
}

const callsOf = (ex: Example): CallRef[] =>
  ex.messages.flatMap((m, message) => (m.role === 'assistant' ? (m.tool_calls ?? []).map((tc, call) => ({ message, call, tc })) : []));

const indicesOf = (ex: Example, pred: (m: Message) => boolean): number[] => ex.messages.flatMap((m, i) => (pred(m) ? [i] : []));

function pickOr<T>(rng: Rng, items: readonly T[], what: string): T {
  if (items.length === 0) throw new Error(`cannot break example: no ${what}`);
  return rng.pick(items);
}

const argsOf = (tc: ToolCall): Record<string, unknown> =>
  typeof tc.function.arguments === 'string' ? (JSON.parse(tc.function.arguments) as Record<string, unknown>) : { ...tc.function.arguments };

const at = (ex: Example, i: number): Message => {
  const m = ex.messages[i];
  if (!m) throw new Error(`no message at index ${i}`);
  return m;
};

/** The user and tool messages before message `i`: what the assistant had seen when it wrote message `i`. */
function contextBefore(ex: Example, i: number): GroundingContext {
  const ctx = new GroundingContext();
  for (const m of ex.messages.slice(0, i)) if (m.role === 'user' || m.role === 'tool') ctx.add(m.content);
  return ctx;
}

// ---------------------------------------------------------------------------------------------------------------
// Rule-filter defects

const BREAKERS: Record<BrokenCode, Breaker> = {
  tool_schema(ex, rng) {
    const ref = pickOr(rng, callsOf(ex), 'tool call');
    const name = ref.tc.function.name;
    const args = argsOf(ref.tc);
    const kind = rng.pick(['unknown_tool', 'missing_required', 'undeclared_argument'] as const);
    if (kind === 'unknown_tool') {
      // A plausible but wrong name, as a model that misremembers the tool list would write it.
      const wrong = `fetch_${name.split('_').slice(1).join('_') || name}`;
      ref.tc.function.name = wrong;
      return `message ${ref.message}: call to unknown tool "${wrong}" instead of "${name}"`;
    }
    if (kind === 'missing_required') {
      const required = WORLD_TOOLS[name]?.schema.function.parameters.required ?? [];
      const key = pickOr(rng, required, 'required argument');
      delete args[key];
      ref.tc.function.arguments = JSON.stringify(args);
      return `message ${ref.message}: call to ${name} without required argument "${key}"`;
    }
    const key = rng.pick(['note', 'priority', 'language']);
    args[key] = rng.pick(['fast', 'high', 'english']);
    ref.tc.function.arguments = JSON.stringify(args);
    return `message ${ref.message}: call to ${name} with undeclared argument "${key}"`;
  },

  role_order(ex, rng) {
    const last = ex.messages.length - 1;
    if (rng.chance(0.5) && at(ex, last - 1).role !== 'user') {
      // The dialogue stops before the final reply: it ends with a tool message.
      ex.messages.pop();
      return `removed the final reply (message ${last}); the dialogue now ends with a ${at(ex, last - 1).role} message`;
    }
    const u = rng.pick(indicesOf(ex, (m) => m.role === 'user'));
    ex.messages.splice(u + 1, 0, { role: 'user', content: rng.pick(['Please be quick.', 'Also, thank you in advance.', 'Is that possible?']) });
    return `inserted a second user message after message ${u}`;
  },

  tool_call_response_match(ex, rng) {
    const parallel = indicesOf(ex, (m) => m.role === 'assistant' && (m.tool_calls?.length ?? 0) >= 2);
    if (parallel.length > 0) {
      const a = rng.pick(parallel);
      const drop = a + 1 + rng.int(0, (at(ex, a).tool_calls?.length ?? 1) - 1);
      ex.messages.splice(drop, 1);
      return `message ${a} makes ${at(ex, a).tool_calls?.length} calls but one tool message (${drop}) was removed`;
    }
    const a = pickOr(rng, indicesOf(ex, (m) => m.role === 'assistant' && (m.tool_calls?.length ?? 0) > 0), 'tool-call message');
    const n = at(ex, a).tool_calls?.length ?? 0;
    ex.messages.splice(a + 1 + n, 0, { ...at(ex, a + n) });
    return `message ${a} makes ${n} call(s) but is followed by ${n + 1} tool messages`;
  },

  no_tool_response_in_assistant_message(ex, rng) {
    const tool = at(ex, rng.pick(indicesOf(ex, (m) => m.role === 'tool')));
    const replies = indicesOf(ex, (m) => m.role === 'assistant');
    const a = rng.pick(replies);
    const m = at(ex, a);
    // The model wrote the tool's answer itself instead of waiting for it.
    m.content = `${m.content}\n\n<tool_response>\n${tool.content}\n</tool_response>`;
    return `assistant message ${a} contains a <tool_response> block`;
  },

  tool_response_json_valid(ex, rng) {
    const i = rng.pick(indicesOf(ex, (m) => m.role === 'tool'));
    const m = at(ex, i);
    if (rng.chance(0.5)) {
      m.content = m.content.slice(0, -1); // truncated JSON
      return `tool message ${i} is truncated JSON`;
    }
    const parsed = JSON.parse(m.content) as Record<string, unknown>;
    m.content = `Result: ${Object.entries(parsed).map(([k, v]) => `${k} = ${typeof v === 'string' ? v : JSON.stringify(v)}`).join(', ')}`;
    return `tool message ${i} is plain text instead of JSON`;
  },

  duplicate_tools_by_name(ex, rng) {
    const tool = structuredClone(pickOr(rng, ex.tools, 'tool')) as { function: { name: string; description?: string } };
    if (rng.chance(0.5)) tool.function.description = `${tool.function.description ?? ''} (new version)`.trim();
    const pos = rng.int(0, ex.tools.length);
    ex.tools.splice(pos, 0, tool);
    return `tool "${tool.function.name}" appears twice in the tool list`;
  },

  non_empty_content(ex, rng) {
    const i = rng.pick(indicesOf(ex, (m) => m.role === 'user'));
    at(ex, i).content = rng.pick(['', ' ', '\n']);
    return `user message ${i} is empty`;
  },

  think_tags(ex, rng) {
    const i = rng.pick(indicesOf(ex, (m) => m.role === 'assistant'));
    const m = at(ex, i);
    if (rng.chance(0.5)) {
      m.content = m.content.replace('</think>', '');
      return `assistant message ${i} has no </think>`;
    }
    m.content = m.content.replace('<think>\n', '<think>\n<think>\n');
    return `assistant message ${i} has two <think> tags`;
  },

  llm_filter(ex, rng, worldSeed) {
    const kinds = rng.chance(0.6) ? [hallucinateArgument, contradictFact] : [contradictFact, hallucinateArgument];
    for (const kind of kinds) {
      const detail = kind(ex, rng, worldSeed);
      if (detail !== undefined) return detail;
    }
    throw new Error(`cannot break example ${ex.uuid} semantically`);
  },
};

// ---------------------------------------------------------------------------------------------------------------
// Semantic defects (pass every rule filter)

/** Values of the same kind as an argument, to swap in: a different city, account, product, ... */
function alternativesFor(key: string, rng: Rng): string[] {
  switch (key) {
    case 'city':
    case 'origin':
    case 'destination':
      return [...CITY_NAMES];
    case 'query':
      return [...PRODUCT_KINDS];
    case 'product_id':
      return PRODUCTS.map((p) => p.id);
    case 'account_id':
    case 'from_account':
    case 'to_account':
      return [...ACCOUNT_IDS];
    case 'order_id':
      return Array.from({ length: 5 }, () => `ord-${rng.int(1000, 9999)}`);
    case 'flight_id':
      return Array.from({ length: 5 }, () => `FL${rng.int(1000, 2343)}`);
    case 'passenger':
      return [...PEOPLE];
    case 'day':
      return [...DAYS];
    case 'title':
      return [...NEW_EVENT_TITLES, ...EVENT_TITLES];
    case 'time':
      return ['09:30', '10:30', '11:30', '13:30', '14:30', '15:30'];
    default:
      return [];
  }
}

/**
 * Swap one tool-call argument for a value of the same kind that appears nowhere in the user's messages or the
 * earlier tool results, then re-execute the call so the tool message matches the (wrong) call: the trajectory is
 * internally consistent, but the assistant acted on something the user never said.
 */
function hallucinateArgument(ex: Example, rng: Rng, worldSeed: number): string | undefined {
  const candidates: { ref: CallRef; key: string; value: string | number }[] = [];
  for (const ref of callsOf(ex)) {
    const props = WORLD_TOOLS[ref.tc.function.name]?.schema.function.parameters.properties ?? {};
    for (const [key, value] of Object.entries(argsOf(ref.tc))) {
      const prop = props[key];
      // Enumerated values and defaults are legitimately ungrounded (the schema supplies them): skip them.
      if (!prop || prop.enum || prop.default === value) continue;
      if (typeof value === 'string' || typeof value === 'number') candidates.push({ ref, key, value });
    }
  }
  for (const { ref, key, value } of rng.shuffle(candidates)) {
    const ctx = contextBefore(ex, ref.message);
    const prop = WORLD_TOOLS[ref.tc.function.name]?.schema.function.parameters.properties[key];
    let replacement: string | number | undefined;
    if (typeof value === 'string') {
      replacement = rng.shuffle(alternativesFor(key, rng)).find((v) => v.toLowerCase() !== value.toLowerCase() && !ctx.hasPhrase(v));
    } else {
      const lo = prop?.minimum ?? 0;
      const hi = prop?.maximum ?? Number.MAX_SAFE_INTEGER;
      const step = prop?.type === 'integer' && hi - lo < 20 ? 1 : 10;
      replacement = rng
        .shuffle([1, 2, 3, 4, 5, -1, -2, -3].map((d) => value + d * step))
        .find((v) => v >= lo && v <= hi && v !== value && !ctx.hasNumber(v));
    }
    if (replacement === undefined) continue;
    const args = argsOf(ref.tc);
    args[key] = replacement;
    ref.tc.function.arguments = JSON.stringify(args);
    const toolMessage = ex.messages[ref.message + 1 + ref.call];
    if (toolMessage?.role === 'tool') toolMessage.content = toolResultText(executeTool(ref.tc.function.name, args, worldSeed));
    return `message ${ref.message}: ${ref.tc.function.name} called with hallucinated ${key}=${JSON.stringify(replacement)} instead of ${JSON.stringify(value)}`;
  }
  return undefined;
}

/** Change one number/id the final reply states to a value no tool result (or user message) contains. */
function contradictFact(ex: Example, rng: Rng): string | undefined {
  const replies = indicesOf(ex, (m) => m.role === 'assistant' && (m.tool_calls?.length ?? 0) === 0);
  for (const i of rng.shuffle(replies)) {
    const m = at(ex, i);
    const reply = visibleReply(m.content);
    const ctx = contextBefore(ex, i);
    const facts = [...new Set((reply.match(/[A-Za-z0-9]+(?:[.:_-][A-Za-z0-9]+)*/g) ?? []).filter((t) => isFactToken(t.toLowerCase()) && ctx.hasFactToken(t)))];
    for (const fact of rng.shuffle(facts)) {
      const wrong = alter(fact, rng, (t) => !ctx.hasFactToken(t) && !tokensOf(reply).includes(t.toLowerCase()));
      if (wrong === undefined) continue;
      const close = m.content.indexOf('</think>') + '</think>'.length;
      const visible = m.content.slice(close);
      const re = new RegExp(`(?<![A-Za-z0-9])${fact.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?![A-Za-z0-9]|[.:_-][A-Za-z0-9])`);
      m.content = m.content.slice(0, close) + visible.replace(re, wrong);
      return `reply ${i} states ${wrong} where the tool result says ${fact}`;
    }
  }
  return undefined;
}

/** A different token of the same shape: a clock time shifted by hours, or the digits changed. */
function alter(token: string, rng: Rng, acceptable: (t: string) => boolean): string | undefined {
  for (let attempt = 0; attempt < 30; attempt++) {
    let out: string;
    const clock = /^(\d{2}):(\d{2})$/.exec(token);
    if (clock) {
      const h = (Number(clock[1]) + rng.pick([1, 2, 3, -1, -2]) + 24) % 24;
      out = `${String(h).padStart(2, '0')}:${clock[2]}`;
    } else {
      // Change one to all digits, keeping the first digit non-zero so the number keeps its length.
      out = token.replace(/\d/g, (d, pos: number) => {
        if (!rng.chance(0.5) && attempt < 10) return d;
        const first = pos === 0 || !/\d/.test(token[pos - 1] ?? '');
        return String(first ? rng.int(1, 9) : rng.int(0, 9));
      });
    }
    if (out !== token && acceptable(out)) return out;
  }
  return undefined;
}
