/**
 * The offline judge's decision procedure: machine-checkable `ItemCheck`s (schema.ts) evaluated on exactly the view
 * an LLM judge gets (spec §6.4), so offline rewards and LLM rewards are computed over the same evidence.
 *
 * Judge view of assistant step s of turn t: "Previous Messages" = everything before the turn's user message;
 * "Current Messages" = the turn from its user message through the assistant message at step s and the tool
 * messages that follow it. Later steps are invisible, so "true at step s" means "satisfied by the prefix through
 * s" and an item is satisfied in a turn when it is true at some step (OR over steps, spec §6.5/§6.6).
 *
 * Decisions (the schema's doc comment fixes the semantics; these are the details it leaves open):
 * - Visible reply. As the reference judge: a message without a complete `<think>…</think>` block is all thinking
 *   and has no reply (an earlier version read such text as the reply; RL on the demo world then learned to emit
 *   unclosed thoughts and tagless fragments that passed reply items). A message whose reply holds a raw
 *   `<tool_call>` has no reply, as in the reference judge, which moves such text to `tool_call`; a lone
 *   `</tool_call>` (a call whose opening tag was lost) is no reply either.
 * - Tool calls. Structured `tool_calls`, or, when there are none, raw `<tool_call>{json}</tool_call>` blocks outside
 *   the thinking (rollouts keep the raw text, spec §6.2); calls that appear only inside thinking do not count
 *   (judge special rule). A call answered by an `error_tool_call` message (parse error, unknown tool, schema
 *   failure) is invalid and counts as not made, like the judge's shortcut; a call the tool answers with a domain
 *   error (`{"error": …}`: out of stock, conflict) was made, but did not succeed.
 * - Arguments match as `argumentsMatch` (src/kernel/arguments.ts) says: every key of the check present with an equal
 *   value; extra keys allowed.
 * - Tool messages answer the calls of the assistant message before them in call order (k-th call ↔ k-th tool
 *   message), matched by `tool_call_id` instead when both sides carry ids (spec §6.3 pairs by position).
 */
import { decodeArguments, type Message } from '../../kernel/schema';
import { argumentsMatch } from '../../kernel/arguments';
import { GroundingContext, isFactToken, tokensOf } from '../../kernel/grounding';
import type { ItemCheck } from './schema';
import { replyPart, turnSpans } from './steps';

/** What the judge sees when judging one assistant step. */
export interface JudgeView {
  /** Every message before the current turn's user message (system message and earlier turns). */
  previous: Message[];
  /** The current turn from its user message (`current[0]`) through the judged assistant step and its tool messages. */
  current: Message[];
}

/**
 * The judge view of the assistant message at `assistantStep` (offset inside the turn, user = 0) of `turn`.
 * Throws a RangeError when the turn does not exist or that step is not an assistant message: judging anything else
 * is a caller bug, not a verdict.
 */
export function judgeViewAt(messages: readonly Message[], turn: number, assistantStep: number): JudgeView {
  const span = turnSpans(messages)[turn];
  if (!span) throw new RangeError(`turn ${turn} does not exist (the dialogue has ${turnSpans(messages).length} turns)`);
  const index = span.start + assistantStep;
  if (assistantStep < 1 || index > span.end || messages[index]?.role !== 'assistant') {
    throw new RangeError(`turn ${turn} step ${assistantStep} is not an assistant message`);
  }
  let end = index;
  while (end + 1 <= span.end && messages[end + 1]?.role === 'tool') end++;
  return { previous: messages.slice(0, span.start), current: messages.slice(span.start, end + 1) };
}

/** Step offsets (user = 0) of the assistant messages of a turn, in order; [] when the turn does not exist. */
export function assistantSteps(messages: readonly Pick<Message, 'role'>[], turn: number): number[] {
  const span = turnSpans(messages)[turn];
  if (!span) return [];
  const steps: number[] = [];
  for (let i = span.start + 1; i <= span.end; i++) if (messages[i]?.role === 'assistant') steps.push(i - span.start);
  return steps;
}

/** Decide one check on one judge view. */
export function evaluateCheck(check: ItemCheck, view: JudgeView): boolean {
  const turn = view.current.slice(1);
  switch (check.kind) {
    case 'tool_called':
      return answeredCalls(turn).some((c) => c.name === check.name && !c.invalid && argumentsMatch(check.arguments, c.args));
    case 'tool_succeeded':
      return answeredCalls(turn).some((c) => c.name === check.name && !c.invalid && c.answer !== undefined && !isToolError(c.answer) && argumentsMatch(check.arguments, c.args));
    case 'reply_states': {
      const value = normalise(check.value);
      return value !== '' && visibleReplies(turn).some((r) => containsOnBoundaries(normalise(r), value));
    }
    case 'no_tool_call':
      return visibleReplies(turn).length > 0 && turn.every((m) => m.role !== 'assistant' || callsOf(m).length === 0);
    case 'reply_asks':
      return visibleReplies(turn).some((r) => r.includes('?'));
    case 'reply_grounded': {
      const replies = visibleReplies(turn);
      if (replies.length === 0) return false;
      const ctx = new GroundingContext();
      for (const m of [...view.previous, ...view.current]) if (m.role === 'user' || m.role === 'tool') ctx.add(m.content);
      return replies.every((r) => tokensOf(r).filter(isFactToken).every((t) => ctx.hasFactToken(t)));
    }
  }
}

/** OR over the turn's assistant steps, each judged on its own prefix view; `firstStep` = the first step that passes. */
export function itemSatisfiedInTurn(check: ItemCheck, messages: readonly Message[], turn: number): { satisfied: boolean; firstStep?: number } {
  for (const step of assistantSteps(messages, turn)) {
    if (evaluateCheck(check, judgeViewAt(messages, turn, step))) return { satisfied: true, firstStep: step };
  }
  return { satisfied: false };
}

// ---------------------------------------------------------------------------------------------------------------
// Messages: visible replies, calls, tool answers

const THINK_BLOCK = /<think>[\s\S]*?<\/think>/;

/** The content outside the thinking: after the think block, after a lone `</think>`, nothing after an unclosed `<think>`, or all of it. */
function outsideThinking(content: string): string {
  if (THINK_BLOCK.test(content)) return replyPart(content);
  // An opened, never closed thought is all thinking (RL policies learned to stop mid-thought to pass reply items).
  if (content.includes('<think>')) return '';
  const close = content.indexOf('</think>');
  return close >= 0 ? content.slice(close + '</think>'.length).trim() : content.trim();
}

/** The user-visible reply of an assistant message for the offline checks (see the module comment). */
export function visibleReplyOf(message: Message): string {
  if (message.role !== 'assistant' || !THINK_BLOCK.test(message.content)) return '';
  const text = outsideThinking(message.content);
  // Tool-call markup (an opening tag, or the closing tag of a call whose opening was lost) is a call attempt, not a
  // reply: RL policies learn to emit such fragments to pass reply items (seen on the demo world).
  return /<\/?tool_call>/.test(text) ? '' : text;
}

/** Non-empty visible replies of the given messages. */
const visibleReplies = (messages: readonly Message[]): string[] => messages.map(visibleReplyOf).filter((r) => r !== '');

interface Call {
  name: string;
  /** Decoded arguments; undefined when they are not a JSON object. */
  args: Record<string, unknown> | undefined;
  id?: string;
}

const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function decodedObject(raw: unknown): Record<string, unknown> | undefined {
  if (typeof raw !== 'string' && !isPlainObject(raw)) return undefined;
  const decoded = decodeArguments(raw);
  return decoded.ok && isPlainObject(decoded.value) ? decoded.value : undefined;
}

const RAW_CALL = /<tool_call>\s*([\s\S]*?)\s*<\/tool_call>/g;

/** The calls an assistant message makes: structured ones, else raw `<tool_call>` blocks outside its thinking. */
function callsOf(message: Message): Call[] {
  if (message.role !== 'assistant') return [];
  const structured = message.tool_calls ?? [];
  if (structured.length > 0) return structured.map((c) => ({ name: c.function.name, args: decodedObject(c.function.arguments), ...(c.id ? { id: c.id } : {}) }));
  const calls: Call[] = [];
  for (const m of outsideThinking(message.content).matchAll(RAW_CALL)) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(m[1] ?? '');
    } catch {
      calls.push({ name: '', args: undefined });
      continue;
    }
    for (const c of Array.isArray(parsed) ? parsed : [parsed]) {
      const name = isPlainObject(c) && typeof c.name === 'string' ? c.name : '';
      const raw = isPlainObject(c) ? (c.parameters ?? c.arguments) : undefined;
      calls.push({ name, args: decodedObject(raw) });
    }
  }
  return calls;
}

/** A call with the tool message answering it (if already in view) and whether that answer makes the call invalid. */
interface AnsweredCall extends Call {
  answer?: string;
  invalid: boolean;
}

/** Every call of the given turn messages, paired with its tool message. */
function answeredCalls(turn: readonly Message[]): AnsweredCall[] {
  const out: AnsweredCall[] = [];
  turn.forEach((m, i) => {
    const calls = callsOf(m);
    if (calls.length === 0) return;
    const tools: Message[] = [];
    for (let j = i + 1; j < turn.length && turn[j]?.role === 'tool'; j++) tools.push(turn[j]!);
    const byId = calls.every((c) => c.id !== undefined) && tools.every((t) => t.tool_call_id !== undefined);
    calls.forEach((c, k) => {
      const answer = (byId ? tools.find((t) => t.tool_call_id === c.id) : tools[k])?.content;
      out.push({ ...c, ...(answer !== undefined ? { answer } : {}), invalid: c.args === undefined || (answer !== undefined && toolErrorKey(answer) === 'error_tool_call') });
    });
  });
  return out;
}

/**
 * Which error key a tool message carries: `error` (the world's `toolResultText`, the simulator's failure text) or
 * `error_tool_call` (the reference environment's parse/unknown-tool/schema errors). Text that is not valid JSON
 * but starts like an error object counts too: the simulator's `{"error": <message>}` is not always valid JSON.
 */
function toolErrorKey(content: string): 'error' | 'error_tool_call' | undefined {
  try {
    const value: unknown = JSON.parse(content);
    if (isPlainObject(value)) {
      if ('error_tool_call' in value) return 'error_tool_call';
      if ('error' in value) return 'error';
    }
    return undefined;
  } catch {
    const m = /^\s*\{\s*"(error_tool_call|error)"\s*:/.exec(content);
    return m ? (m[1] as 'error' | 'error_tool_call') : undefined;
  }
}

/** True when a tool message reports an error (either key). */
export const isToolError = (content: string): boolean => toolErrorKey(content) !== undefined;

// ---------------------------------------------------------------------------------------------------------------
// Values

const normalise = (text: string): string => text.toLowerCase().replace(/\s+/g, ' ').trim();
const isWordChar = (c: string | undefined): boolean => c !== undefined && /[a-z0-9]/i.test(c);
const isDigit = (c: string | undefined): boolean => c !== undefined && c >= '0' && c <= '9';

/**
 * Where `needle` first occurs in `text` on word boundaries, or -1. A number continues across a decimal point or
 * separator followed by a digit, so "12" is not found in "12.5" and "12.5" not in "112.5" or "0.12.5"; an edge of
 * the needle that is not a word character needs no boundary. Case-sensitive: callers lowercase both sides.
 */
export function indexOnBoundaries(text: string, needle: string): number {
  if (needle === '') return -1;
  const startsWord = isWordChar(needle[0]);
  const endsWord = isWordChar(needle[needle.length - 1]);
  for (let at = text.indexOf(needle); at >= 0; at = text.indexOf(needle, at + 1)) {
    const before = text[at - 1];
    const end = at + needle.length;
    const after = text[end];
    if (startsWord) {
      if (isWordChar(before)) continue;
      if (isDigit(needle[0]) && (before === '.' || before === ',') && isDigit(text[at - 2])) continue;
    }
    if (endsWord) {
      if (isWordChar(after)) continue;
      if (isDigit(needle[needle.length - 1]) && (after === '.' || after === ',' || after === ':') && isDigit(text[end + 1])) continue;
    }
    return at;
  }
  return -1;
}

/** `needle` occurs in `text` on word boundaries (both already normalised; see `indexOnBoundaries`). */
export const containsOnBoundaries = (text: string, needle: string): boolean => indexOnBoundaries(text, needle) >= 0;
