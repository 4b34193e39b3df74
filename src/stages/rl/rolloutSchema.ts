/**
 * Shared data shapes of the RL stage (spec §6). Pure: no I/O.
 *
 * Addressing follows the checklist module (src/stages/checklist/steps.ts): `turn` counts user messages from 0; within a
 * turn the assistant generations are numbered 0, 1, … in order ("step index" below, NOT the message offset used
 * by evidence pointers). One assistant generation = one "segment" of policy tokens (spec §6.6 step 4).
 */
import { z } from 'zod';
import { Message } from '../../kernel/schema';

/** The verdict of one judge decision on one (assistant step, item). `ok` false = the judge call failed. */
export const Verdict = z.object({ pass: z.boolean(), ok: z.boolean() });
export type Verdict = z.infer<typeof Verdict>;

/**
 * Verdicts of one turn of one checklist variant: `steps[s][c]` = item c (in the turn's item order) judged on the
 * turn prefix through assistant step s. `steps.length` = number of assistant generations of that turn in the
 * rollout (may be 0 only for a turn whose user message was appended but never answered — not produced by the
 * rollout loop, which always generates after a user message).
 */
export const TurnVerdicts = z.object({ turn: z.number().int().nonnegative(), steps: z.array(z.array(Verdict)) });
export type TurnVerdicts = z.infer<typeof TurnVerdicts>;

/** All verdicts of one rollout: `[variant][reached turn]`. */
export const RolloutVerdicts = z.array(z.array(TurnVerdicts));
export type RolloutVerdicts = z.infer<typeof RolloutVerdicts>;

/** Why an episode ended (spec §6.2). */
export const EndReason = z.enum([
  'final_turn', // final reply on the last reference turn
  'turn_control', // a required item was not satisfied (or a judge call failed) after a final reply
  'error_tool_call', // unparsable call, unknown tool, schema violation
  'tool_failed', // the environment failed (simulator error): sample failed
  'length', // generation hit max_new_tokens / the context cap
  'max_assistant_turns',
  'max_user_turns',
]);
export type EndReason = z.infer<typeof EndReason>;

/** One assistant generation inside the token sequence of a rollout: tokens [start, end) are policy tokens. */
export const Segment = z.object({
  /** Index into `messages` of the assistant message this generation produced. */
  message: z.number().int().nonnegative(),
  turn: z.number().int().nonnegative(),
  start: z.number().int().nonnegative(),
  end: z.number().int().nonnegative(),
});
export type Segment = z.infer<typeof Segment>;

/** One rollout (episode) as stored in S3 and as every later phase reads it. */
export const Rollout = z.object({
  /** `<example uuid>#<group member>`: stable across retries of the same RL step. */
  id: z.string(),
  uuid: z.string(),
  /** Index of the prompt (group) inside the RL step: the GRPO `uid`. */
  group: z.number().int().nonnegative(),
  member: z.number().int().nonnegative(),
  /** The conversation: prompt messages (through the first user message), then generated/tool/replayed-user ones. */
  messages: z.array(Message),
  /** Token ids of the whole conversation as the policy saw it (prompt, generations, tool and user insertions). */
  tokens: z.array(z.number().int().nonnegative()),
  /**
   * Log-probabilities of the policy tokens under the sampling policy, concatenated over segments in order: one per
   * segment token, of softmax(logits / T) at the sampling temperature (since issue 29; before, of the raw distribution,
   * with zeros for the `<|im_end|>\n` then counted in segments).
   */
  logprobs: z.array(z.number()),
  segments: z.array(Segment),
  /** User turns reached (1 + replayed user messages). */
  turns: z.number().int().positive(),
  /** Number of reference turns L_ref (spec §6.6 step 5). */
  refTurns: z.number().int().positive(),
  /**
   * Where the episode stands: `generate` = the policy speaks next; `judge` = a turn is complete (final reply) or the
   * episode ended mid-turn, and its unjudged turn awaits the judge; `done` = ended and fully judged.
   */
  status: z.enum(['generate', 'judge', 'done']),
  /** Assistant generations so far (cap: max_assistant_turns, across the whole dialogue). */
  generations: z.number().int().nonnegative(),
  ended: EndReason.optional(),
  /** Some tool result came from a failed environment call (metrics success false): the sample is failed. */
  toolFailed: z.boolean(),
  /** Tool calls by how they were answered: replay / executable / simulated / schema_error / unknown_tool / parse_error / failed. */
  toolSources: z.record(z.string(), z.number().int().nonnegative()),
  verdicts: RolloutVerdicts.optional(),
});
export type Rollout = z.infer<typeof Rollout>;

