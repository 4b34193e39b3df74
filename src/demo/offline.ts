/**
 * Deterministic offline implementations of the stage 1–2 LLM roles (src/kernel/roleContracts.ts), used when no LLM endpoint
 * is configured. They make the whole pipeline (and its tests) run offline on the demo tool world.
 *
 * Like the real roles they see only what an LLM would see — the messages and the candidate tools — and never
 * `meta` (the generator's labels). They are heuristics, good enough to behave like a strict filter and a careful
 * compressor on the demo world; they are no substitute for an LLM on real data.
 *
 * Usage accounting: every answer reports `zeroUsage()` (0 calls, 0 tokens, cost 0) and `attempts: 1`. No model is
 * called, so reports should show no LLM calls and no cost; `attempts` still says the role ran once.
 */
import { decodeArguments, type Example, type Message } from '../kernel/schema';
import { zeroUsage, type CompressorRole, type DataRoles, type Effort, type FilterVerdict, type LlmFilterRole, type RoleOutcome } from '../kernel/roleContracts';
import { GroundingContext, isFactToken, thinkingOf, tokensOf, visibleReply } from '../kernel/grounding';
import { isPlainObject, parametersOfTools } from './worldTypes';

// ---------------------------------------------------------------------------------------------------------------
// LLM filter

interface ParamInfo {
  enum?: unknown[];
  default?: unknown;
}

/** Parameter schemas by tool name (a name listed twice: its parameters merged), read defensively from the candidate tool list. */
function parameterInfo(tools: readonly unknown[]): Map<string, Record<string, ParamInfo>> {
  const out = new Map<string, Record<string, ParamInfo>>();
  const read = (schema: Record<string, unknown>): ParamInfo => ({ ...(Array.isArray(schema.enum) ? { enum: schema.enum } : {}), ...('default' in schema ? { default: schema.default } : {}) });
  for (const [name, info] of parametersOfTools(tools, read)) out.set(name, { ...(out.get(name) ?? {}), ...info });
  return out;
}

/** Every string/number leaf of an argument value, with its path ("flights[0].id"); booleans and nulls are not judged. */
function leaves(value: unknown, path: string): { path: string; value: string | number }[] {
  if (typeof value === 'string' || typeof value === 'number') return [{ path, value }];
  if (Array.isArray(value)) return value.flatMap((v, i) => leaves(v, `${path}[${i}]`));
  if (isPlainObject(value)) return Object.entries(value).flatMap(([k, v]) => leaves(v, `${path}.${k}`));
  return [];
}

/**
 * The offline filter's check, as a pure function: the first ungrounded value found, or undefined.
 *
 * 1. Every string/number argument of every tool call must be grounded in the user's messages and the tool results
 *    that came before the call — unless it is one of the parameter's enumerated values or its default, which the
 *    schema itself supplies. A value the user never gave and no tool returned is a hallucinated argument.
 * 2. Every fact a visible reply states in a checkable form (a token with a digit: amounts, temperatures, ids,
 *    times, seats) must be grounded in the user's messages and tool results so far. A number that appears nowhere
 *    contradicts the tool results or is invented.
 * The thinking is ignored, as the reference filter prompt asks (it is hidden from the user).
 */
export function findUngrounded(example: Pick<Example, 'messages' | 'tools'>): string | undefined {
  const params = parameterInfo(example.tools);
  const ctx = new GroundingContext();
  for (const [i, m] of example.messages.entries()) {
    if (m.role === 'user' || m.role === 'tool') {
      ctx.add(m.content);
      continue;
    }
    if (m.role !== 'assistant') continue;
    for (const call of m.tool_calls ?? []) {
      const decoded = decodeArguments(call.function.arguments);
      if (!decoded.ok || !isPlainObject(decoded.value)) return `message ${i}: the arguments of ${call.function.name} are not a JSON object`;
      const info = params.get(call.function.name) ?? {};
      for (const [key, value] of Object.entries(decoded.value)) {
        const p = info[key];
        if (p?.enum?.includes(value) || (p && 'default' in p && p.default === value)) continue;
        for (const leaf of leaves(value, key)) {
          if (!ctx.hasValue(leaf.value)) {
            return `message ${i}: ${call.function.name} is called with ${leaf.path}=${JSON.stringify(leaf.value)}, which appears neither in the user's messages nor in earlier tool results (hallucinated argument)`;
          }
        }
      }
    }
    if ((m.tool_calls?.length ?? 0) === 0) {
      const reply = visibleReply(m.content);
      for (const token of tokensOf(reply).filter(isFactToken)) {
        if (!ctx.hasFactToken(token)) {
          return `message ${i}: the reply states "${token}", which no tool result or user message supports (contradicts or invents a fact)`;
        }
      }
    }
  }
  return undefined;
}

export class OfflineLlmFilter implements LlmFilterRole {
  /** Identical for every pass and effort: the check is deterministic, so repeating it cannot change the verdict. */
  async judge(example: Example, _opts: { pass: number; effort: Effort }): Promise<RoleOutcome<FilterVerdict>> {
    const problem = findUngrounded(example);
    const value: FilterVerdict = problem
      ? { noError: false, reasoning: problem }
      : { noError: true, reasoning: 'Every tool-call argument and every number or id in the replies is grounded in the user messages or the tool results.' };
    return { ok: true, value, usage: zeroUsage(), attempts: 1 };
  }
}

// ---------------------------------------------------------------------------------------------------------------
// CoT compressor

/** Longest compressed thought; long enough for two or three key sentences. */
export const MAX_COMPRESSED_LENGTH = 240;

/** Sentences of a thought (split after . ! ? and at line breaks). */
const sentencesOf = (text: string): string[] =>
  text
    .split(/(?<=[.!?])\s+|\n+/)
    .map((s) => s.trim())
    .filter(Boolean);

/** Cut at a word boundary so the result is at most `max` characters. */
function cap(text: string, max: number): string {
  if (text.length <= max) return text;
  const cut = text.slice(0, max + 1);
  const space = cut.lastIndexOf(' ');
  return (space > max / 2 ? cut.slice(0, space) : text.slice(0, max)).trim();
}

/** A thought for a message that has none (the compression prompt asks for one): what the message does. */
function writeThought(m: Message): string {
  const calls = m.tool_calls ?? [];
  if (calls.length === 0) return 'I have what I need and will answer the user.';
  const parts = calls.map((c) => {
    const decoded = decodeArguments(c.function.arguments);
    const args = decoded.ok && isPlainObject(decoded.value) ? Object.entries(decoded.value).map(([k, v]) => `${k} ${typeof v === 'string' ? v : JSON.stringify(v)}`) : [];
    return args.length > 0 ? `${c.function.name} with ${args.join(', ')}` : c.function.name;
  });
  return `I will call ${parts.join(' and ')}.`;
}

/**
 * Compress one assistant message's thinking: keep the sentences that carry the decision — those naming a tool,
 * an argument value of this message's calls, or a number — in their original order, capped in length. Filler
 * ("Let me think about what the user needs.") goes. Never longer than the original; never empty.
 */
export function compressThinking(m: Message, toolNames: ReadonlySet<string>): string {
  const original = thinkingOf(m.content);
  if (original === '') return writeThought(m);
  const keys = new Set<string>();
  for (const c of m.tool_calls ?? []) {
    keys.add(c.function.name.toLowerCase());
    const decoded = decodeArguments(c.function.arguments);
    if (decoded.ok && isPlainObject(decoded.value)) {
      for (const leaf of leaves(decoded.value, '')) keys.add(String(leaf.value).toLowerCase());
    }
  }
  const sentences = sentencesOf(original);
  const keep = sentences.filter((s) => {
    const lower = s.toLowerCase();
    return /\d/.test(s) || [...toolNames].some((n) => lower.includes(n.toLowerCase())) || [...keys].some((k) => k !== '' && lower.includes(k));
  });
  const chosen = cap((keep.length > 0 ? keep : sentences.slice(0, 1)).join(' '), Math.min(MAX_COMPRESSED_LENGTH, original.length));
  return chosen === '' ? cap(original, MAX_COMPRESSED_LENGTH) : chosen;
}

export class OfflineCompressor implements CompressorRole {
  async compress(example: Example): Promise<RoleOutcome<string[]>> {
    const names = new Set<string>();
    for (const tool of example.tools) {
      if (isPlainObject(tool) && isPlainObject(tool.function) && typeof tool.function.name === 'string') names.add(tool.function.name);
    }
    const value = example.messages.filter((m) => m.role === 'assistant').map((m) => compressThinking(m, names));
    return { ok: true, value, usage: zeroUsage(), attempts: 1 };
  }
}

/** The offline roles, for `makeDataRoles` when no endpoint is configured. */
export function offlineDataRoles(): DataRoles {
  return {
    filter: new OfflineLlmFilter(),
    compressor: new OfflineCompressor(),
    describe: () => ({ filter: 'offline grounding check (demo world)', compressor: 'offline extractive compressor (demo world)' }),
  };
}
