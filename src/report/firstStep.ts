/**
 * What a policy did at the first step of an evaluated episode, against the reference dialogue (pure): the diagnosis
 * behind a held-out reward. A policy that "does not call tools right" may write broken calls, pick the wrong tool
 * (often the first one offered: position bias), fill the right tool with other arguments, or answer where the
 * reference calls; each asks for a different fix (format SFT, more demonstrations, RL), so the study records the
 * counts per policy.
 *
 * The generated first assistant message is parsed as the rollout parses it (src/chat/toolCalls.ts); the reference's
 * first assistant message is the example's. Arguments match as the checklist's tool-call checks match them
 * (`argumentsMatch`: text ignoring case and surrounding spaces, numbers by value, arguments the reference does not
 * give may be there or not). No I/O.
 */
import { parseToolCalls } from '../chat/toolCalls';
import { decodeArguments, toolName, type Example, type Message } from '../kernel/schema';
import { argumentsMatch } from '../kernel/arguments';

/** The first-step outcomes, in the order the study shows them. */
export const FIRST_STEP_KINDS = [
  'right tool, same arguments',
  'right tool, other arguments',
  'wrong tool, the first offered',
  'wrong tool, another offered',
  'tool not offered',
  'broken call',
  'reply where the reference calls',
  'call where the reference replies',
  'reply, as the reference',
] as const;
export type FirstStepKind = (typeof FIRST_STEP_KINDS)[number];

/** The names of an example's candidate tools, in the order the prompt lists them (malformed entries skipped). */
export function offeredTools(tools: Example['tools']): string[] {
  return tools.flatMap((t) => toolName(t) ?? []);
}

/**
 * The outcome of one episode's first step: `generated` is the episode's first assistant message as generated (raw
 * text, calls as `<tool_call>` blocks), `reference` the example. Undefined when the example has no assistant message.
 */
export function firstStepOf(generated: string, reference: Pick<Example, 'messages' | 'tools'>): FirstStepKind | undefined {
  const ref = reference.messages.find((m) => m.role === 'assistant');
  if (!ref) return undefined;
  const refCall = ref.tool_calls?.[0];
  const parsed = parseToolCalls(generated);
  if (!refCall) return parsed.hasToolCall ? 'call where the reference replies' : 'reply, as the reference';
  if (!parsed.hasToolCall) return 'reply where the reference calls';
  const call = parsed.calls[0];
  if (parsed.errors.length || !call) return 'broken call';
  const offered = offeredTools(reference.tools);
  if (call.name === refCall.function.name) {
    const expected = decodeArguments(refCall.function.arguments);
    const args = expected.ok && expected.value && typeof expected.value === 'object' && !Array.isArray(expected.value) ? (expected.value as Record<string, unknown>) : {};
    return argumentsMatch(args, call.arguments) ? 'right tool, same arguments' : 'right tool, other arguments';
  }
  if (!offered.includes(call.name)) return 'tool not offered';
  return offered[0] === call.name ? 'wrong tool, the first offered' : 'wrong tool, another offered';
}

/**
 * The first-step outcomes of evaluated episodes (`messages` as the rollouts keep them: the replayed user turn first),
 * counted per kind, against the examples by uuid. An episode without an example or without an assistant message is
 * counted as `unmatched`.
 */
export function firstStepCounts(
  episodes: ReadonlyArray<{ uuid: string; messages: ReadonlyArray<Pick<Message, 'role' | 'content'>> }>,
  examples: ReadonlyMap<string, Pick<Example, 'messages' | 'tools'>>,
): { counts: Partial<Record<FirstStepKind, number>>; unmatched: number } {
  const counts: Partial<Record<FirstStepKind, number>> = {};
  let unmatched = 0;
  for (const e of episodes) {
    const ex = examples.get(e.uuid);
    const first = e.messages.find((m) => m.role === 'assistant');
    const kind = ex && first ? firstStepOf(first.content, ex) : undefined;
    if (kind) counts[kind] = (counts[kind] ?? 0) + 1;
    else unmatched++;
  }
  return { counts, unmatched };
}
