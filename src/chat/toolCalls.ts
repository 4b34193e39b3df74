/**
 * Parsing of generated assistant text (spec §6.2 step 3, §8.1) and the judge's think split (§6.4).
 *
 * Reference behaviour reproduced here, including its quirks:
 * - Detection is a plain `<tool_call>` substring test; extraction is the regex `\n<tool_call>\n(.*?)\n</tool_call>`
 *   (dot matches newline) over the **whole** text, think block included. So a call written inside `<think>…</think>`
 *   is still extracted and executed, and a call without the surrounding newlines is detected but not extracted
 *   (→ "No tool call found" error, which ends the rollout).
 * - Each block must be JSON: an object, or a list of objects. Arguments come from `parameters`, else `arguments`;
 *   a JSON string holding an object is decoded. Arguments must end up as a JSON object.
 * - Any error ends the rollout in the reference: the caller appends the assistant message and one tool message
 *   `errorToolCallText(errors)`, and stops. `calls` still lists the blocks that did parse, for diagnostics.
 */

/** One parsed call: the name and the decoded argument object. */
export interface ParsedToolCall {
  name: string;
  arguments: Record<string, unknown>;
}

export interface ToolCallParse {
  /** The text contains `<tool_call>` (the detector's test): the assistant message is a tool step, not a reply. */
  hasToolCall: boolean;
  /** Text before the first `\n<tool_call>\n` (the whole text when there is none), not stripped. */
  normalText: string;
  /** Calls parsed successfully, in order of appearance (a list block contributes its calls in list order). */
  calls: ParsedToolCall[];
  /** One message per unparsable block / call, or the "no tool call found" error. Empty when everything parsed. */
  errors: string[];
}

const TOOL_CALL_BLOCK = /\n<tool_call>\n([\s\S]*?)\n<\/tool_call>/g;
const BLOCK_OPEN = '\n<tool_call>\n';

export const NO_TOOL_CALL_FOUND =
  'No tool call found. Please check your output format: each call must be "\\n<tool_call>\\n{\\"name\\": ..., \\"arguments\\": {...}}\\n</tool_call>".';

/** Parse a generated assistant text for tool calls (§8.1). */
export function parseToolCalls(text: string): ToolCallParse {
  const first = text.indexOf(BLOCK_OPEN);
  const normalText = first === -1 ? text : text.slice(0, first);
  if (!text.includes('<tool_call>')) return { hasToolCall: false, normalText, calls: [], errors: [] };

  const calls: ParsedToolCall[] = [];
  const errors: string[] = [];
  const blocks = [...text.matchAll(TOOL_CALL_BLOCK)].map((m) => m[1] ?? '');
  if (blocks.length === 0) return { hasToolCall: true, normalText, calls, errors: [NO_TOOL_CALL_FOUND] };

  blocks.forEach((block, b) => {
    let parsed: unknown;
    try {
      parsed = JSON.parse(block);
    } catch (e) {
      errors.push(`Tool call ${b} is not valid JSON: ${(e as Error).message}`);
      return;
    }
    const items = Array.isArray(parsed) ? parsed : [parsed];
    if (items.length === 0) errors.push(`Tool call ${b} is an empty list.`);
    items.forEach((item, k) => {
      const where = Array.isArray(parsed) ? `Tool call ${b}[${k}]` : `Tool call ${b}`;
      const call = parseOneCall(item, where);
      if ('error' in call) errors.push(call.error);
      else calls.push(call);
    });
  });
  return { hasToolCall: true, normalText, calls, errors };
}

function parseOneCall(item: unknown, where: string): ParsedToolCall | { error: string } {
  if (!isObject(item)) return { error: `${where} is not a JSON object.` };
  const name = item['name'];
  if (typeof name !== 'string' || name.length === 0) return { error: `${where} has no valid "name" (a non-empty string).` };
  // The reference takes `parameters` first, then `arguments`.
  const raw = item['parameters'] ?? item['arguments'];
  if (raw === undefined || raw === null) return { error: `No argumets found in ${where.toLowerCase()} ("${name}"): give "arguments" as a JSON object.` };
  let args: unknown = raw;
  if (typeof raw === 'string') {
    try {
      args = JSON.parse(raw);
    } catch {
      args = undefined;
    }
  }
  if (!isObject(args)) {
    return { error: `Tool call tag detected but no one success: the arguments of ${where.toLowerCase()} ("${name}") are not a JSON object.` };
  }
  return { name, arguments: args };
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The tool message text the reference appends after an unparsable call (then ends the rollout): a JSON object
 * with an `error_tool_call` key, the same shape as the environment's own call errors.
 */
export function errorToolCallText(errors: readonly string[]): string {
  return JSON.stringify({ error_tool_call: { code: 'TOOL_CALL_PARSE_ERROR', message: errors.join(' ') } });
}

/**
 * The judge's think split (§6.4, §8.1): the first `<think>(.*?)</think>` (dot matches newline) is the thinking;
 * the reply is the text after `thinking + "</think>"`, stripped. Without a think block the whole content is
 * treated as thinking and the reply is empty.
 */
export function splitThinking(content: string): { thinking: string; reply: string } {
  const m = /<think>([\s\S]*?)<\/think>/.exec(content);
  if (!m) return { thinking: content, reply: '' };
  const thinking = m[1] ?? '';
  // Python: content.split(thinking + "</think>", 1)[1] — the first occurrence of that string, which is the match's
  // own end except in contrived texts that repeat it earlier.
  const sep = `${thinking}</think>`;
  const at = content.indexOf(sep);
  return { thinking, reply: content.slice(at + sep.length).trim() };
}

/**
 * Remove lone UTF-16 surrogates (U+D800–DFFF not part of a valid pair), as the reference strips surrogate code
 * points before tokenising or sending text to the simulator (§8.1). Valid pairs (astral characters) are kept.
 */
export function stripLoneSurrogates(text: string): string {
  return text.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '');
}
