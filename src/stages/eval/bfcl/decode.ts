/**
 * From a policy's output to BFCL's decoded form `[{name: {param: value}}, ...]` (pure).
 *
 * - The project's model writes Qwen3-style text. As BFCL's Qwen function-calling handler: only the text after the
 *   last `</think>` counts; calls are the `<tool_call>\n{...}\n</tool_call>` blocks; a block that is not valid JSON
 *   is skipped; a block that is JSON but not `{"name": str, "arguments": {...}}` makes the whole output
 *   undecodable. (The RL rollout parser of src/chat/toolCalls.ts differs on purpose: it also reads calls inside
 *   `<think>` and accepts `parameters`, as the reference RL code does.)
 * - An OpenAI-compatible endpoint returns native `tool_calls`; each `arguments` string is parsed as JSON. No
 *   `tool_calls` means no call. Arguments that are not valid JSON make the output undecodable.
 * JSON is parsed with `parsePyJson`, keeping float literals apart (./pyValue.ts).
 */
import { parsePyJson, type PyValue } from './pyValue';

/** A decoded policy output: the calls, or why it could not be decoded (then it counts as no call for relevance). */
export interface Decoded {
  calls: PyValue[];
  /** Set when the output could not be decoded into calls (BFCL's decoder failure). */
  error?: string;
}

const BLOCK = /<tool_call>\n([\s\S]*?)\n<\/tool_call>/g;

/** Decodes generated Qwen3-style text. `<|im_end|>` at the end, if any, is ignored. */
export function decodeQwenText(text: string): Decoded {
  let body = text.replace(/<\|im_end\|>\s*$/, '');
  if (body.includes('</think>')) body = body.split('</think>').pop()!.replace(/^\n+/, '');
  const calls: PyValue[] = [];
  for (const m of body.matchAll(BLOCK)) {
    let parsed: PyValue;
    try {
      parsed = parsePyJson(m[1]!);
    } catch {
      continue; // BFCL skips blocks that are not JSON
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return { calls: [], error: `a <tool_call> block is not a JSON object: ${m[1]!.slice(0, 200)}` };
    const { name, arguments: args } = parsed as Record<string, PyValue>;
    if (typeof name !== 'string') return { calls: [], error: `a <tool_call> block has no string "name": ${m[1]!.slice(0, 200)}` };
    if (typeof args !== 'object' || args === null || Array.isArray(args)) return { calls: [], error: `the "arguments" of ${name} are not a JSON object` };
    calls.push({ [name]: args });
  }
  return { calls };
}

/** The parts of an OpenAI chat-completion message this module reads. */
export interface ToolCallMessage {
  content?: string | null;
  tool_calls?: { function?: { name?: string; arguments?: string } }[] | null;
}

/** Decodes an OpenAI-compatible assistant message with native tool calls. */
export function decodeOpenAiMessage(message: ToolCallMessage): Decoded {
  const calls: PyValue[] = [];
  for (const tc of message.tool_calls ?? []) {
    const name = tc.function?.name;
    if (typeof name !== 'string') return { calls: [], error: 'a tool call has no function name' };
    try {
      calls.push({ [name]: parsePyJson(tc.function?.arguments ?? '') });
    } catch (e) {
      return { calls: [], error: `the arguments of ${name} are not valid JSON: ${(e as Error).message}` };
    }
  }
  return { calls };
}

/** An answers-file result (./data.ts `parseAnswers`): a list of calls; a string is a text answer (no call). */
export function decodeAnswerResult(result: PyValue): Decoded {
  if (Array.isArray(result)) return { calls: result };
  if (typeof result === 'string') {
    return result.trim() === '' ? { calls: [] } : { calls: [], error: 'a string result is a text answer; give decoded calls [{"name": {...}}] (Python-syntax results are not decoded)' };
  }
  return { calls: [], error: `result is not a list of calls: ${JSON.stringify(result)?.slice(0, 200)}` };
}
