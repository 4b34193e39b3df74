/**
 * Dialogue segmentation and per-example statistics (spec §1.2 "turn"/"step", §5.1 statistics).
 *
 * A *turn* starts at a user message and runs to the assistant message without tool calls that answers it (the
 * final reply); a *step* is one assistant message plus the tool messages that follow it. Later stages (checklist
 * labelling, judging, turn-level rewards) must segment dialogues exactly like this, so they all use `splitTurns`.
 */
import type { Example, Message } from '../../kernel/schema';

/** One assistant message and the tool messages answering its calls. Indices are positions in `messages`. */
export interface Step {
  /** 0-based position of the step within its turn. */
  index: number;
  assistantIndex: number;
  toolIndices: number[];
  /** First and last message index of the step (inclusive). */
  start: number;
  end: number;
  /** Number of tool calls the assistant message makes. */
  toolCalls: number;
}

/** One user-anchored turn. Indices are positions in `messages`; `start..end` is inclusive. */
export interface Turn {
  /** 0-based turn number. */
  index: number;
  /** Index of the user message that opens the turn (= `start`). */
  userIndex: number;
  start: number;
  /** Last message before the next user message (or the end of the dialogue). */
  end: number;
  steps: Step[];
  /**
   * Index of the first assistant message of the turn without tool calls (the reply that ends the turn), or
   * undefined when the turn never reaches one (a malformed or truncated dialogue).
   */
  finalReplyIndex?: number;
}

type SegmentableMessage = Pick<Message, 'role'> & { tool_calls?: readonly unknown[] | undefined };

const callCount = (m: SegmentableMessage | undefined): number => (Array.isArray(m?.tool_calls) ? m.tool_calls.length : 0);

/**
 * Split a dialogue into user-anchored turns, each with its assistant steps. Messages before the first user message
 * (a system prompt) belong to no turn. In a well-formed dialogue a turn ends at its final reply; on malformed input a
 * turn simply extends to the message before the next user message, so segmentation never fails.
 */
export function splitTurns(messages: readonly SegmentableMessage[]): Turn[] {
  const turns: Turn[] = [];
  let current: Turn | undefined;
  let step: Step | undefined;
  messages.forEach((message, i) => {
    if (message.role === 'user') {
      current = { index: turns.length, userIndex: i, start: i, end: i, steps: [] };
      step = undefined;
      turns.push(current);
      return;
    }
    if (!current) return;
    current.end = i;
    if (message.role === 'assistant') {
      const toolCalls = callCount(message);
      step = { index: current.steps.length, assistantIndex: i, toolIndices: [], start: i, end: i, toolCalls };
      current.steps.push(step);
      if (toolCalls === 0 && current.finalReplyIndex === undefined) current.finalReplyIndex = i;
    } else if (message.role === 'tool' && step) {
      step.toolIndices.push(i);
      step.end = i;
    }
  });
  return turns;
}

/** The statistics of spec §5.1, named as in the reference. */
export interface ExampleStats {
  num_turns: number;
  tool_calls_total: number;
  max_parallel_tool_calls: number;
  num_candidate_tools: number;
  num_selected_tools: number;
  max_assistant_steps: number;
  num_assistant_messages: number;
}

export const STAT_NAMES = [
  'num_turns',
  'tool_calls_total',
  'max_parallel_tool_calls',
  'num_candidate_tools',
  'num_selected_tools',
  'max_assistant_steps',
  'num_assistant_messages',
] as const satisfies readonly (keyof ExampleStats)[];
export type StatName = (typeof STAT_NAMES)[number];

function calledName(call: unknown): string | undefined {
  if (typeof call !== 'object' || call === null) return undefined;
  const fn = (call as { function?: unknown }).function;
  if (typeof fn !== 'object' || fn === null) return undefined;
  const name = (fn as { name?: unknown }).name;
  return typeof name === 'string' && name !== '' ? name : undefined;
}

/**
 * Per-example statistics (reference `compute_statistics`):
 * - `num_turns`: user-anchored turns (= user messages);
 * - `tool_calls_total` / `max_parallel_tool_calls`: all calls / most calls in one assistant message;
 * - `num_candidate_tools`: length of the tool list; `num_selected_tools`: distinct tool names called;
 * - `max_assistant_steps`: most assistant messages within one turn; `num_assistant_messages`: all of them.
 */
export function computeStats(example: Pick<Example, 'messages' | 'tools'>): ExampleStats {
  const messages = Array.isArray(example.messages) ? example.messages : [];
  const turns = splitTurns(messages);
  let toolCallsTotal = 0;
  let maxParallel = 0;
  let assistantMessages = 0;
  const selected = new Set<string>();
  for (const message of messages) {
    if (message.role !== 'assistant') continue;
    assistantMessages++;
    const calls = Array.isArray(message.tool_calls) ? message.tool_calls : [];
    toolCallsTotal += calls.length;
    maxParallel = Math.max(maxParallel, calls.length);
    for (const call of calls) {
      const name = calledName(call);
      if (name) selected.add(name);
    }
  }
  return {
    num_turns: turns.length,
    tool_calls_total: toolCallsTotal,
    max_parallel_tool_calls: maxParallel,
    num_candidate_tools: Array.isArray(example.tools) ? example.tools.length : 0,
    num_selected_tools: selected.size,
    max_assistant_steps: turns.reduce((max, turn) => Math.max(max, turn.steps.length), 0),
    num_assistant_messages: assistantMessages,
  };
}
