/**
 * Checklist schema (spec §5.4): the reference's code schema, not the paper's Figure 2.
 *
 * Two forms:
 * - the **annotator form** — what a labeller (LLM or offline) produces: one block per user turn with the items, a
 *   `dependence` map and a `weight` map (`ChecklistOutput`);
 * - the **stored form** — per example, `checklists[variant][turn][item]`, each item carrying its own `dependence`
 *   list, `weight` and `extra_info.price_usd` (`StoredItem`, `AnnotatedExample`). Later stages (judge, rewards,
 *   advantages) read only the stored form.
 *
 * Indices: `turn` counts user messages from 0; `step` is the position of a message inside its turn, the user message
 * being step 0 and every following message (assistant or tool) one more (spec §5.3: "step indices restart each turn
 * (user is step 0)"); see `steps.ts`.
 *
 * `check` is this project's addition: a machine-checkable condition that the offline judge decides without an LLM
 * (the offline annotator of the demo world sets it). LLM-made items have none; an LLM judge ignores it.
 */
import { z } from 'zod';
import { Example } from '../../kernel/schema';
import { UsageSchema } from '../../kernel/roleContracts';

export const EVIDENCE_FROM = [
  'user.content',
  'assistant.content.thinking',
  'assistant.content.user_visible_reply',
  'assistant.tool_calls',
  'tool.content',
] as const;
export const EvidenceFrom = z.enum(EVIDENCE_FROM);
export type EvidenceFrom = z.infer<typeof EvidenceFrom>;

export const FOCUS_ON = ['assistant.tool_calls', 'assistant.content.thinking', 'assistant.content.user_visible_reply', 'tool.content'] as const;
export const FocusOn = z.enum(FOCUS_ON);
export type FocusOn = z.infer<typeof FocusOn>;

/** Weights of one turn must sum to 1 within this tolerance (reference: `abs(sum - 1.0) <= 1e-6`). */
export const WEIGHT_TOLERANCE = 1e-6;

export const Evidence = z.object({
  turn: z.number().int().nonnegative(),
  step: z.number().int().nonnegative(),
  from: EvidenceFrom,
  snippet: z.string(),
});
export type Evidence = z.infer<typeof Evidence>;

const JsonValue: z.ZodType<unknown> = z.json();

/**
 * Machine-checkable conditions (offline judge). Each is decided on the judge's view of one step: the messages of
 * earlier turns and the current turn from its user message through the judged step and its tool messages.
 * - `tool_called`: some assistant message of the turn so far calls `name` with arguments that contain every given
 *   key with an equal value (strings compared trimmed and case-insensitively, numbers by value);
 * - `tool_succeeded`: as `tool_called`, and the tool message answering that call is not an error;
 * - `reply_states`: a user-visible reply of the turn so far states `value` (case-insensitive, on word boundaries,
 *   whitespace-normalised);
 * - `no_tool_call`: the turn so far has a user-visible reply and no tool call;
 * - `reply_asks`: a user-visible reply of the turn so far asks the user a question (contains "?");
 * - `reply_grounded`: the turn so far has a user-visible reply, and every number or id it states occurs in the user
 *   messages or tool results seen so far.
 */
export const ItemCheck = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('tool_called'), name: z.string().min(1), arguments: z.record(z.string(), JsonValue) }),
  z.object({ kind: z.literal('tool_succeeded'), name: z.string().min(1), arguments: z.record(z.string(), JsonValue) }),
  z.object({ kind: z.literal('reply_states'), value: z.string().min(1) }),
  z.object({ kind: z.literal('no_tool_call') }),
  z.object({ kind: z.literal('reply_asks') }),
  z.object({ kind: z.literal('reply_grounded') }),
]);
export type ItemCheck = z.infer<typeof ItemCheck>;

/** One checklist item as the annotator writes it. */
export const ChecklistItem = z.object({
  id: z.string().min(1),
  evidence: z.array(Evidence),
  focus_on: FocusOn,
  question: z.string().min(1),
  pass_condition: z.string().min(1),
  failure_examples: z.array(z.string()),
  required_for_next_turn: z.boolean(),
  check: ItemCheck.optional(),
});
export type ChecklistItem = z.infer<typeof ChecklistItem>;

/** One block per user turn (annotator form). */
export const TurnBlock = z.object({
  turn: z.number().int().nonnegative(),
  checklist: z.array(ChecklistItem),
  /** Item id → ids it depends on; keys must equal the item ids exactly. */
  dependence: z.record(z.string(), z.array(z.string())),
  /** Item id → weight; the weights of a turn sum to 1. */
  weight: z.record(z.string(), z.number()),
});
export type TurnBlock = z.infer<typeof TurnBlock>;

/** The annotator's whole answer: a JSON array of turn blocks (spec §5.4). */
export const ChecklistOutput = z.array(TurnBlock);
export type ChecklistOutput = z.infer<typeof ChecklistOutput>;

/** Stored per-item form (spec §5.4 "Stored form"). */
export const StoredItem = ChecklistItem.extend({
  dependence: z.array(z.string()),
  weight: z.number(),
  extra_info: z.looseObject({ price_usd: z.number().nonnegative() }),
});
export type StoredItem = z.infer<typeof StoredItem>;

/** One checklist variant of one example: turn → items. */
export const ChecklistVariant = z.array(z.array(StoredItem));
export type ChecklistVariant = z.infer<typeof ChecklistVariant>;

/** How an example was annotated: by whom, at what cost, after how many repair attempts per variant. */
export const AnnotationInfo = z.object({
  annotator: z.string(),
  variants: z.array(z.object({ attempts: z.number().int().positive(), usage: UsageSchema })),
  usage: UsageSchema,
});
export type AnnotationInfo = z.infer<typeof AnnotationInfo>;

/** An example with its checklists (`{uuid, messages, tools, checklists}` plus our provenance fields). */
export const AnnotatedExample = Example.extend({
  checklists: z.array(ChecklistVariant).min(1),
  annotation: AnnotationInfo.optional(),
});
export type AnnotatedExample = z.infer<typeof AnnotatedExample>;

/**
 * Annotator form → stored form (one variant). Assumes a validated output; `priceUsd` is the cost of the call that
 * produced it, written to every item's `extra_info.price_usd` as the reference does.
 */
export function toStoredVariant(blocks: ChecklistOutput, priceUsd: number): ChecklistVariant {
  return [...blocks]
    .sort((a, b) => a.turn - b.turn)
    .map((block) =>
      block.checklist.map((item) => ({
        ...item,
        dependence: [...(block.dependence[item.id] ?? [])],
        weight: block.weight[item.id] ?? 0,
        extra_info: { price_usd: priceUsd },
      })),
    );
}

/** Stored form → annotator form (for re-validating stored files). */
export function fromStoredVariant(variant: ChecklistVariant): ChecklistOutput {
  return variant.map((items, turn) => ({
    turn,
    checklist: items.map(({ dependence: _d, weight: _w, extra_info: _e, ...item }) => item),
    dependence: Object.fromEntries(items.map((i) => [i.id, [...i.dependence]])),
    weight: Object.fromEntries(items.map((i) => [i.id, i.weight])),
  }));
}
