/**
 * Turn/step addressing of a dialogue for checklists (spec §5.3): turn t = the t-th user message and everything up
 * to the next one; step s of turn t = the message at offset s from that user message (user = step 0, then each
 * assistant or tool message in order). Messages before the first user message belong to no turn.
 *
 * Also the parts of a message an evidence pointer or a focus names (`from` / `focus_on`), split as the reference's
 * judge splits them (spec §6.4): thinking = the first `<think>…</think>`; the user-visible reply = the text after it,
 * trimmed; a message without a think block is all thinking and has an empty reply.
 */
import type { Message } from '../data/schema';
import type { EvidenceFrom } from './schema';

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
 * Texts an evidence snippet for `from` may be quoted from. Tool calls have several faithful renderings (the raw
 * arguments string, the call as JSON, `name(arguments)`), so each is offered.
 */
export function partTexts(message: Message, from: EvidenceFrom): string[] {
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
        let pretty = args;
        try {
          pretty = JSON.stringify(JSON.parse(args), null, 2);
        } catch {
          // keep the raw string
        }
        return [c.function.name, args, pretty, `${c.function.name}(${args})`, JSON.stringify({ name: c.function.name, arguments: args }), JSON.stringify(c)];
      });
  }
}

/** Whitespace-normalised text for snippet matching: runs of whitespace become one space; trimmed. */
export const normaliseWs = (text: string): string => text.replace(/\s+/g, ' ').trim();
