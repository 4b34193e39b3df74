/**
 * Turn/step addressing of a dialogue for checklists (spec §5.3): turn t = the t-th user message and everything up
 * to the next one; step s of turn t = the message at offset s from that user message (user = step 0, then each
 * assistant or tool message in order). Messages before the first user message belong to no turn.
 *
 * Also the parts of a message an evidence pointer or a focus names (`from` / `focus_on`), split as the reference's
 * judge splits them (spec §6.4): thinking = the first `<think>…</think>`; the user-visible reply = the text after it,
 * trimmed; a message without a think block is all thinking and has an empty reply.
 */
import type { Message, ToolCall } from '../../kernel/schema';
import type { EvidenceFrom } from './schema';
import { fromJs, parsePyJson, pyDumps, type PyJson, type PyObject } from '../../kernel/pyjson';

export interface TurnSpan {
  turn: number;
  /** Index in `messages` of the user message (step 0). */
  start: number;
  /** Index of the last message of the turn (inclusive). */
  end: number;
}

/** The turns of a dialogue, by user message. */
export function turnSpans(messages: readonly Pick<Message, 'role'>[]): TurnSpan[] {
  const spans: TurnSpan[] = [];
  messages.forEach((m, i) => {
    if (m.role === 'user') {
      const last = spans[spans.length - 1];
      if (last) last.end = i - 1;
      spans.push({ turn: spans.length, start: i, end: i });
    } else if (spans.length > 0) {
      spans[spans.length - 1]!.end = i;
    }
  });
  return spans;
}

/** The message at (turn, step), with its index in `messages`, or undefined when there is none. */
export function messageAt<M extends Pick<Message, 'role'>>(messages: readonly M[], turn: number, step: number): { index: number; message: M } | undefined {
  const span = turnSpans(messages)[turn];
  if (!span || step < 0 || span.start + step > span.end) return undefined;
  const index = span.start + step;
  return { index, message: messages[index]! };
}

/** The thinking of an assistant message (whole content when there is no think block). */
export function thinkingPart(content: string): string {
  const m = /<think>([\s\S]*?)<\/think>/.exec(content);
  return m ? m[1]!.trim() : content.trim();
}

/** The user-visible reply of an assistant message ("" when there is no think block, as in the reference judge). */
export function replyPart(content: string): string {
  const m = /<think>[\s\S]*?<\/think>/.exec(content);
  return m ? content.slice(m.index + m[0].length).trim() : '';
}

/**
 * `json.dumps(…, ensure_ascii=False)` from `pyDumps`' ASCII-escaped text: its `\uXXXX` escapes of characters from
 * U+007F up are undone (an escape preceded by an escaped backslash, `\\u00e9`, is literal text and stays).
 */
function keepNonAscii(text: string): string {
  return text.replace(/(?<!\\)((?:\\\\)*)\\u([0-9a-fA-F]{4})/g, (whole, before: string, hex: string) => {
    const code = parseInt(hex, 16);
    return code >= 0x7f ? before + String.fromCharCode(code) : whole;
  });
}

/** A JSON rendering in both escape modes: `ensure_ascii=True` (the default) and `ensure_ascii=False`. */
function bothEscapes(ascii: string): string[] {
  return [ascii, keepNonAscii(ascii)];
}

/** A string as it appears inside serialized JSON (quoted, escaped), in both escape modes. */
const quoted = (text: string): string[] => bothEscapes(pyDumps(text));

/** A JSON object or array in the text, decoded with Python's number semantics (`17.5`, `1.0` kept); else undefined. */
function jsonContainer(text: string): PyJson | undefined {
  if (!/^\s*[[{]/.test(text)) return undefined;
  try {
    return parsePyJson(text);
  } catch {
    return undefined;
  }
}

/** A JSON value on one line (`json.dumps` default separators) and pretty-printed (`indent=4`), both escape modes. */
const dumped = (value: PyJson): string[] => [...bothEscapes(pyDumps(value)), ...bothEscapes(pyDumps(value, { indent: 4 }))];

/** A text, the text escaped as inside serialized JSON, and, when it holds a JSON object or array, that JSON re-serialized. */
function textRenderings(text: string): string[] {
  const json = jsonContainer(text);
  return [text, ...quoted(text), ...(json !== undefined ? dumped(json) : [])];
}

/** One tool call as the reference's messages hold it (`{"id", "type", "function": {"name", "arguments"}}`). */
function callObject(call: ToolCall): PyObject {
  const out: PyObject = new Map();
  if (call.id !== undefined) out.set('id', call.id);
  out.set('type', call.type);
  const args = typeof call.function.arguments === 'string' ? call.function.arguments : fromJs(call.function.arguments);
  out.set('function', new Map<string, PyJson>([['name', call.function.name], ['arguments', args]]));
  return out;
}

/** The renderings of one tool call (see `partTexts`). */
function callRenderings(call: ToolCall): string[] {
  const name = call.function.name;
  const args = typeof call.function.arguments === 'string' ? call.function.arguments : JSON.stringify(call.function.arguments);
  const ours = new Map<string, PyJson>([['name', name], ['arguments', args]]);
  return [name, ...textRenderings(args), `${name}(${args})`, ...dumped(callObject(call)), ...dumped(ours), JSON.stringify(call)];
}

/** Renderings per message object and part; messages are not mutated once they are validated. */
const renderingCache = new WeakMap<Message, Map<EvidenceFrom, string[]>>();

/**
 * Texts an evidence snippet for `from` may be quoted from: every faithful rendering of that part of the message.
 * A real labeller quotes what it was shown: the reference shows it `json.dumps(messages, indent=4)` (spec §5.2), so
 * snippets come escaped as inside JSON strings (`\"`, `\n`, `\u00e9`, or non-ASCII kept), tool calls come as the
 * serialized call object (`"name": "f", "arguments": "{\"k\": \"v\"}"`) and JSON contents pretty-printed; our own
 * prompt shows `{name, arguments}` per call. Offered, for a text part (content, thinking, reply): the raw text, the
 * text as a JSON string literal in both escape modes, and, when it holds a JSON object or array, that JSON on one line
 * and with indent 4 (both escape modes); tool content also with its `"content": ` key. For each tool call: the name,
 * the renderings of its arguments string, `name(arguments)`, the call object and our `{name, arguments}` on one line
 * and with indent 4 (both escape modes), and compact; for the message's calls together, the `"tool_calls": [...]`
 * list. No other part's text is ever offered, so a snippet quoted from another part or message does not match.
 */
export function partTexts(message: Message, from: EvidenceFrom): string[] {
  let byPart = renderingCache.get(message);
  if (!byPart) renderingCache.set(message, (byPart = new Map()));
  let texts = byPart.get(from);
  if (!texts) {
    texts = [...new Set(renderPart(message, from))];
    byPart.set(from, texts);
  }
  return texts;
}

function renderPart(message: Message, from: EvidenceFrom): string[] {
  switch (from) {
    case 'user.content':
    case 'tool.content':
      return [...textRenderings(message.content), ...quoted(message.content).map((q) => `"content": ${q}`)];
    case 'assistant.content.thinking':
      return textRenderings(thinkingPart(message.content));
    case 'assistant.content.user_visible_reply':
      return textRenderings(replyPart(message.content));
    case 'assistant.tool_calls': {
      const calls = message.tool_calls ?? [];
      if (calls.length === 0) return [];
      const list = calls.map(callObject);
      return [...calls.flatMap(callRenderings), ...dumped(list).map((d) => `"tool_calls": ${d}`)];
    }
  }
}

/**
 * The cheap first renderings of a part, tried before `partTexts` builds the serialized ones: the raw text, or for
 * tool calls each call's name, arguments string, `name(arguments)` and compact JSON.
 */
export function rawPartTexts(message: Message, from: EvidenceFrom): string[] {
  switch (from) {
    case 'user.content':
    case 'tool.content':
      return [message.content];
    case 'assistant.content.thinking':
      return [thinkingPart(message.content)];
    case 'assistant.content.user_visible_reply':
      return [replyPart(message.content)];
    case 'assistant.tool_calls':
      return (message.tool_calls ?? []).flatMap((c) => {
        const args = typeof c.function.arguments === 'string' ? c.function.arguments : JSON.stringify(c.function.arguments);
        return [c.function.name, args, `${c.function.name}(${args})`, JSON.stringify(c)];
      });
  }
}

/** True when the part has nothing to quote: no tool calls, or an empty (whitespace-only) text. */
export function partIsEmpty(message: Message, from: EvidenceFrom): boolean {
  switch (from) {
    case 'user.content':
    case 'tool.content':
      return message.content.trim() === '';
    case 'assistant.content.thinking':
      return thinkingPart(message.content) === '';
    case 'assistant.content.user_visible_reply':
      return replyPart(message.content) === '';
    case 'assistant.tool_calls':
      return (message.tool_calls ?? []).length === 0;
  }
}

/** Whitespace-normalised text for snippet matching: runs of whitespace become one space; trimmed. */
export const normaliseWs = (text: string): string => text.replace(/\s+/g, ' ').trim();
