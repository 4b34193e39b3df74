/**
 * Stage 2b — chain-of-thought compression of the cold-start split (spec §1.3, §3.1, §3.2), as pure
 * functions: the structured cold-start form, prompt building, answer parsing and reassembly.
 *
 * Data flow for one example:
 *   raw example ──toStructuredColdStart──▶ {thinking, reply} per assistant message
 *               ──buildCompressionMessages──▶ LLM ──parseCompression──▶ one thinking per assistant message
 *               ──reassembleCompressed──▶ raw example with `<think>\n…\n</think>[\n\nreply]` contents
 */
import { z } from 'zod';
import { ToolCall, type Example, type Message } from '../../kernel/schema';
import { extractJson } from '../../kernel/jsonExtract';
import { type ChatMessage, systemThenUser, closedObject } from '../../llm/prompting';

// ---------------------------------------------------------------------------------------------------
// Structured cold-start form (§1.3)

export const ThinkingReply = z.object({
  /** Text between the first `<think>` and `</think>`, stripped. */
  thinking: z.string(),
  /** Text after `</think>`, stripped, for messages without tool calls; "" for tool-call messages. */
  reply: z.string(),
});
export type ThinkingReply = z.infer<typeof ThinkingReply>;

/** A message of the cold-start JSON: only `role`, `content` and `tool_calls`, as in the reference. */
export const ColdStartMessage = z.object({
  role: z.string(),
  content: z.union([z.string(), ThinkingReply]),
  tool_calls: z.array(ToolCall),
});
export type ColdStartMessage = z.infer<typeof ColdStartMessage>;

export const ColdStartExample = z.object({
  uuid: z.string(),
  messages: z.array(ColdStartMessage),
  tools: z.array(z.unknown()),
});
export type ColdStartExample = z.infer<typeof ColdStartExample>;

const THINK_OPEN = '<think>';
const THINK_CLOSE = '</think>';

/**
 * Split an assistant content into thinking and reply (§3.1). Text after `</think>` is the reply only
 * when the message has no tool calls; in tool-call messages it is discarded, as the reference does.
 *
 * The think_tags rule filter guarantees exactly one well-formed `<think>…</think>` pair before this
 * stage. For malformed input (which the reference would crash on) we are lenient: no `<think>` → empty
 * thinking and the whole content as reply; no `</think>` → everything after `<think>` is thinking.
 */
export function splitThinking(content: string, hasToolCalls: boolean): ThinkingReply {
  const open = content.indexOf(THINK_OPEN);
  if (open === -1) return { thinking: '', reply: hasToolCalls ? '' : content.trim() };
  const start = open + THINK_OPEN.length;
  const close = content.indexOf(THINK_CLOSE, start);
  if (close === -1) return { thinking: content.slice(start).trim(), reply: '' };
  const thinking = content.slice(start, close).trim();
  const reply = hasToolCalls ? '' : content.slice(close + THINK_CLOSE.length).trim();
  return { thinking, reply };
}

const hasCalls = (m: Message): boolean => (m.tool_calls?.length ?? 0) > 0;

/**
 * The structured cold-start form of an example (§1.3/§3.1): assistant contents become
 * `{thinking, reply}`; every message keeps only `role`, `content`, `tool_calls` (`[]` for non-assistant
 * messages). A `system` message (the reference split raises on it) is passed through unchanged.
 */
export function toStructuredColdStart(example: Pick<Example, 'uuid' | 'messages' | 'tools'>): ColdStartExample {
  const messages = example.messages.map((m): ColdStartMessage => {
    if (m.role === 'assistant') {
      return { role: 'assistant', content: splitThinking(m.content, hasCalls(m)), tool_calls: m.tool_calls ?? [] };
    }
    return { role: m.role, content: m.content, tool_calls: [] };
  });
  return { uuid: example.uuid, messages, tools: example.tools };
}

export const countAssistantMessages = (example: Pick<Example, 'messages'>): number =>
  example.messages.filter((m) => m.role === 'assistant').length;

// ---------------------------------------------------------------------------------------------------
// Prompt

/**
 * Our wording of the reference prompt's intent (§3.2). The output is wrapped in an object
 * (`{"thinkings": [...]}`) rather than the reference's bare array, because strict structured output and
 * JSON-object mode both require an object at the top level; `parseCompression` accepts both forms.
 */
export const COMPRESSION_SYSTEM_PROMPT = `You will receive a conversation between a user, an assistant and tools, together with the tools the assistant could use. Each assistant message has a "thinking" part (its private reasoning) and, when it answers the user, a "reply" part; tool calls are listed under "tool_calls".

Your task: for EVERY assistant message, in order, rewrite its thinking to be more concise.

Rules:
- Keep all essential reasoning: the decisions made, the constraints considered, how ambiguities were resolved, and the tool names and parameter values that matter.
- Do not add facts that are not in the original thinking or the conversation.
- Do not change any conclusion, and do not change which tools are selected or how they are called.
- Do not compress so aggressively that the justification for a tool call or reply is lost.
- If a thinking is already minimal, keep it as it is.
- If a thinking is missing or empty, write a short one that justifies what the assistant does in that message.

Output strict JSON only, with exactly one entry per assistant message, in the same order and with the same count as the assistant messages in the input:
{"thinkings": [{"thinking": "<concise thinking of assistant message 1>"}, {"thinking": "<concise thinking of assistant message 2>"}]}`;


/** System + user message; the user message is `{"tools", "messages"}` (structured form) as 4-space JSON. */
export function buildCompressionMessages(example: Pick<Example, 'uuid' | 'messages' | 'tools'>): ChatMessage[] {
  const structured = toStructuredColdStart(example);
  const user = JSON.stringify({ tools: structured.tools, messages: structured.messages }, null, 4);
  return systemThenUser(COMPRESSION_SYSTEM_PROMPT, user);
}

/** Structured-output schema for the wrapped answer (strict-mode compatible). */
export const COMPRESSION_JSON_SCHEMA = {
  name: 'compressed_thinkings',
  schema: closedObject({ thinkings: { type: 'array', items: closedObject({ thinking: { type: 'string' } }) } }),
} as const satisfies { name: string; schema: Record<string, unknown> };

export type CompressionParse = { ok: true; value: string[] } | { ok: false; error: string };

/**
 * Parse and validate the compressor's answer: a list (bare, or under `thinkings`) of exactly
 * `expectedCount` objects, each with a string `thinking` that is non-empty after trimming (§3.2).
 * Returns the trimmed thinkings.
 */
export function parseCompression(text: string, expectedCount: number): CompressionParse {
  const extracted = extractJson(text);
  if (!extracted.ok) return extracted;
  const value = extracted.value;
  let items: unknown[];
  if (Array.isArray(value)) {
    items = value;
  } else if (typeof value === 'object' && value !== null && Array.isArray((value as Record<string, unknown>)['thinkings'])) {
    items = (value as Record<string, unknown[]>)['thinkings']!;
  } else {
    return { ok: false, error: 'top-level output must be an array or an object with a "thinkings" array' };
  }
  if (items.length !== expectedCount) {
    return { ok: false, error: `assistant message count mismatch: parsed=${items.length} vs expected=${expectedCount}` };
  }
  const out: string[] = [];
  for (const [i, item] of items.entries()) {
    if (typeof item !== 'object' || item === null || Array.isArray(item)) return { ok: false, error: `item ${i} must be an object` };
    const thinking = (item as Record<string, unknown>)['thinking'];
    if (typeof thinking !== 'string') return { ok: false, error: `item ${i}.thinking must be a string` };
    if (thinking.trim() === '') return { ok: false, error: `item ${i}.thinking must be non-empty` };
    out.push(thinking.trim());
  }
  return { ok: true, value: out };
}

// ---------------------------------------------------------------------------------------------------
// Reassembly (§1.3)

/**
 * Put the compressed thinkings back: each assistant content becomes `"<think>\n" + thinking + "\n</think>"`,
 * plus `"\n\n" + reply` when the message has a non-empty reply. Tool-call messages keep their
 * `tool_calls`, and any text after `</think>` in them is dropped (as in the reference). Messages keep
 * `role`, `content`, `tool_calls` (plus `tool_call_id`/`name` when the input had them); `uuid`, `tools`
 * and `meta` are unchanged.
 *
 * Throws if the number of thinkings differs from the number of assistant messages: parseCompression
 * checks that, so a mismatch here is a programming error.
 */
export function reassembleCompressed(example: Example, thinkings: readonly string[]): Example {
  const expected = countAssistantMessages(example);
  if (thinkings.length !== expected) {
    throw new Error(`reassembleCompressed(${example.uuid}): ${thinkings.length} thinkings for ${expected} assistant messages`);
  }
  let next = 0;
  const messages = example.messages.map((m): Message => {
    const extra: Partial<Pick<Message, 'tool_call_id' | 'name'>> = {};
    if (m.tool_call_id !== undefined) extra.tool_call_id = m.tool_call_id;
    if (m.name !== undefined) extra.name = m.name;
    if (m.role !== 'assistant') return { role: m.role, content: m.content, tool_calls: [], ...extra };
    const { reply } = splitThinking(m.content, hasCalls(m));
    let content = `${THINK_OPEN}\n${thinkings[next++]!.trim()}\n${THINK_CLOSE}`;
    if (reply !== '') content += `\n\n${reply}`;
    return { role: 'assistant', content, tool_calls: m.tool_calls ?? [], ...extra };
  });
  return { ...example, messages };
}
