/**
 * The judge's prompts (one item, or a batch of items of one step), their structured-output schemas and the parsing of
 * the answers (spec §6.4; the wording is ours, `JUDGE_PROMPT_VERSION` in judge.ts names it).
 */
import { type JsonSchemaSpec } from '../../../llm/client';
import { type JudgeView } from '../../checklist/check';
import { type RenderedView, renderJudgeView } from './judgeView';
import { StoredItem } from '../../checklist/schema';
import { extractJson } from '../../../kernel/jsonExtract';
import { fromJs, pyDumps } from '../../../kernel/pyjson';
import { closedObject } from '../../../llm/prompting';

/** The five fields of one verdict, in order (the reference's output keys). */
export const VERDICT_FIELDS = [
  'high_level_understanding_of_the_question',
  'analysis_of_if_focus_on',
  'analysis_of_pass_condition',
  'analysis_of_failure_examples',
  'answer',
] as const;

export const asciiJson = (value: unknown): string => pyDumps(fromJs(value), { indent: 2 });

export function criterionLines(item: StoredItem): string[] {
  return [
    `**Question:** ${item.question}`,
    `**Focus on:** ${item.focus_on}`,
    `**Pass condition:** ${item.pass_condition}`,
    `**Failure examples:** ${asciiJson(item.failure_examples)}`,
    `**Reference snippets:** ${asciiJson(item.evidence.map((e) => e.snippet))}`,
  ];
}

export const asRendered = (view: JudgeView | RenderedView): RenderedView => (typeof view.previous === 'string' ? (view as RenderedView) : renderJudgeView(view as JudgeView));

export function messagesSection(view: RenderedView | JudgeView): string {
  const r = asRendered(view);
  return `# Previous Messages\n${r.previous}# Current Messages to Evaluate\n${r.current}`;
}

export const SPECIAL_RULE = [
  '# Special rule for tool calls',
  '- An assistant step whose tool_call field is "None" but whose content.thinking contains tool calls wrote them in a wrong format: none of those calls counts as made.',
  '- When a tool response reports an error, the tool calls of the latest assistant step (that step only) are invalid.',
].join('\n');

export const STEPS = [
  '1. high_level_understanding_of_the_question:',
  '   - In a sentence or two, what the question checks and what satisfying it means here.',
  '2. analysis_of_if_focus_on:',
  '   - Whether the part named by "Focus on" is present in the Current Messages to Evaluate.',
  '3. analysis_of_pass_condition:',
  '   - Whether the pass condition is met completely.',
  '4. analysis_of_failure_examples:',
  '   - For every failure example: "triggered" or "not triggered", with a short reason.',
  '5. answer:',
  '   - true only when the focus-on part is present, the pass condition is met completely and no failure example is triggered;',
  '   - false in every other case.',
];

export const VERDICT_SHAPE = [
  '  "high_level_understanding_of_the_question": str,',
  '  "analysis_of_if_focus_on": str,',
  '  "analysis_of_pass_condition": str,',
  '  "analysis_of_failure_examples": str,',
  '  "answer": bool',
];

/** The one-item prompt (reference form: one call per item). */
export function judgePrompt(item: StoredItem, view: JudgeView | RenderedView): string {
  return [
    '# Role',
    'You are a strict checklist judge. Your only task is to decide whether the messages exchanged between a user, an assistant and tools meet the criterion below.',
    '',
    '# Objective',
    'Reply with one JSON verdict and nothing else, following the instructions below.',
    '',
    '# Criterion',
    ...criterionLines(item),
    '',
    messagesSection(view),
    SPECIAL_RULE,
    '',
    '# Evaluation process (each step fills one field of the JSON output)',
    ...STEPS,
    '',
    '# Output format',
    'Reply with exactly one JSON object with exactly these keys:',
    '{',
    ...VERDICT_SHAPE,
    '}',
  ].join('\n');
}

/** The ids the batch prompt gives `items`: their own ids, made unique with `#k` where they repeat. */
export function batchItemIds(items: readonly StoredItem[]): string[] {
  const seen = new Map<string, number>();
  return items.map((item) => {
    const n = seen.get(item.id) ?? 0;
    seen.set(item.id, n + 1);
    return n === 0 ? item.id : `${item.id}#${n}`;
  });
}

/** The batched prompt (our addition): several items of the same step, judged independently, in one call. */
export function judgeBatchPrompt(items: readonly StoredItem[], view: JudgeView | RenderedView): string {
  const ids = batchItemIds(items);
  return [
    '# Role',
    'You are a strict checklist judge. Your only task is to decide, for each criterion below, whether the messages exchanged between a user, an assistant and tools meet it.',
    '',
    '# Objective',
    'Reply with one JSON object holding one verdict per criterion and nothing else, following the instructions below. Judge every criterion on its own: one criterion never changes the verdict of another.',
    '',
    '# Criteria',
    ...items.flatMap((item, k) => [`## Criterion item_id: ${JSON.stringify(ids[k])}`, ...criterionLines(item), '']),
    messagesSection(view),
    SPECIAL_RULE,
    '',
    '# Evaluation process (for each criterion; each step fills one field of its verdict)',
    ...STEPS,
    '',
    '# Output format',
    `Reply with exactly one JSON object {"verdicts": [...]} whose list holds exactly one verdict per criterion, in the order above (${ids.length} in all), each with exactly these keys:`,
    '{',
    '  "item_id": str (the criterion\'s item_id),',
    ...VERDICT_SHAPE,
    '}',
  ].join('\n');
}

export const verdictProperties = {
  high_level_understanding_of_the_question: { type: 'string' },
  analysis_of_if_focus_on: { type: 'string' },
  analysis_of_pass_condition: { type: 'string' },
  analysis_of_failure_examples: { type: 'string' },
  answer: { type: 'boolean' },
} as const;

/** Structured output of the one-item prompt (strict). */
export const JUDGE_JSON_SCHEMA: JsonSchemaSpec = {
  name: 'evaluation_verdict',
  strict: true,
  schema: closedObject(verdictProperties),
};

/** Structured output of the batched prompt (strict); `item_id` is restricted to the batch's ids. */
export function judgeBatchJsonSchema(items: readonly StoredItem[]): JsonSchemaSpec {
  return {
    name: 'evaluation_verdicts',
    strict: true,
    schema: closedObject({
      verdicts: { type: 'array', items: closedObject({ item_id: { type: 'string', enum: batchItemIds(items) }, ...verdictProperties }) },
    }),
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Parsing answers

export const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The `answer` of a one-item answer; an error when the text holds no JSON object or `answer` is not a boolean. */
export function parseJudgeAnswer(text: string): { ok: true; value: boolean } | { ok: false; error: string } {
  const parsed = extractJson(text, { expect: 'object' });
  if (!parsed.ok) return parsed;
  const answer = (parsed.value as Record<string, unknown>)['answer'];
  return typeof answer === 'boolean' ? { ok: true, value: answer } : { ok: false, error: `"answer" is not a boolean: ${JSON.stringify(answer) ?? 'missing'}` };
}

/**
 * The answers of a batch answer, by batch id (`batchItemIds`). Ids missing from the result failed this attempt: no
 * entry, an entry without a boolean `answer`, entries that contradict each other, or no usable JSON at all. A bare
 * list of verdicts is accepted as well as `{"verdicts": [...]}`.
 */
export function parseJudgeBatchAnswer(text: string, ids: readonly string[]): Map<string, boolean> {
  const out = new Map<string, boolean>();
  const parsed = extractJson(text);
  if (!parsed.ok) return out;
  const list = Array.isArray(parsed.value) ? parsed.value : isPlainObject(parsed.value) ? parsed.value['verdicts'] : undefined;
  if (!Array.isArray(list)) return out;
  const wanted = new Set(ids);
  const conflicting = new Set<string>();
  for (const entry of list) {
    if (!isPlainObject(entry)) continue;
    const id = entry['item_id'];
    const answer = entry['answer'];
    if (typeof id !== 'string' || !wanted.has(id) || typeof answer !== 'boolean') continue;
    const before = out.get(id);
    if (before !== undefined && before !== answer) conflicting.add(id);
    out.set(id, answer);
  }
  for (const id of conflicting) out.delete(id);
  return out;
}
