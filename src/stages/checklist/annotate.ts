/**
 * Checklist annotation of one example (spec §5.2): K variants, each validated, with validation errors fed back to
 * the model for repair up to `maxAttempts` answers. Pure orchestration over an `ask` function (the LLM call lives in
 * the activity's adapter), so the repair loop is unit-testable without a server.
 *
 * Failure is a value: an example whose checklist is still invalid after the last attempt comes back as
 * `{ ok: false, reason, violations }` for the stage to record; only transport errors (thrown by `ask`) propagate.
 *
 * Cache salts: answer k of variant v uses `checklist/v<v>/a<k>`. The messages of a repair attempt already differ
 * (they contain the bad answer and the violations), and variants with identical prompts must get independent
 * samples; a retried activity re-sends the same requests and is answered from the response cache, never paid twice.
 */
import { addUsage, zeroUsage, type Usage } from '../../kernel/roleContracts';
import type { Example } from '../../kernel/schema';
import type { ChatMessage, LlmAsk } from '../../llm/client';
import { buildChecklistMessages, buildRepairMessage, CHECKLIST_JSON_SCHEMA, extractChecklistBlocks } from './annotatorPrompt';
import { toStoredVariant, type AnnotatedExample, type ChecklistOutput } from './schema';
import { formatViolation, validateChecklist, violationsForRepair, type Violation } from './validate';

export type Ask = (messages: ChatMessage[], cacheSalt: string) => Promise<{ text: string; usage: Usage }>;

/** The annotator role's call on an LLM (structured output: the checklist schema); `signal` is read per call. */
export function annotatorAsk(llm: LlmAsk, signal: () => AbortSignal | undefined = () => undefined): Ask {
  return async (messages, cacheSalt) => {
    const s = signal();
    const res = await llm.chat({ role: 'annotator', messages, jsonSchema: CHECKLIST_JSON_SCHEMA, cacheSalt, ...(s ? { signal: s } : {}) });
    return { text: res.text, usage: res.usage };
  };
}

export interface AnnotateOptions {
  /** Checklist variants per example (reference `--num_checklists`, 1 in the released setup). */
  variants: number;
  /** Answers per variant, the first included (reference `--retry 3`). */
  maxAttempts: number;
}

export interface VariantResult {
  ok: boolean;
  blocks?: ChecklistOutput;
  attempts: number;
  usage: Usage;
  /** Errors of the last answer when not ok; warnings of the accepted answer when ok. */
  violations: Violation[];
  error?: string;
  /** The last raw answer of a failed variant (for the failure record). */
  raw?: string;
}

export type ExampleAnnotation =
  | { ok: true; annotated: AnnotatedExample; usage: Usage; warnings: Violation[] }
  | { ok: false; reason: string; violations: Violation[]; usage: Usage; variants: VariantResult[]; raw?: string };

export interface ChecklistAnnotator {
  /** Shown in reports and stored in `annotation.annotator` (model name, or the offline annotator's name). */
  readonly name: string;
  annotate(example: Example, opts: AnnotateOptions): Promise<ExampleAnnotation>;
}

export const checklistCacheSalt = (variant: number, attempt: number): string => `checklist/v${variant}/a${attempt}`;

/** One variant: ask, validate, repair. */
export async function annotateVariant(example: Example, ask: Ask, opts: { variant: number; maxAttempts: number }): Promise<VariantResult> {
  let messages = buildChecklistMessages(example);
  let usage = zeroUsage();
  let last: { violations: Violation[]; error: string; raw: string } | undefined;
  for (let attempt = 1; attempt <= opts.maxAttempts; attempt++) {
    const res = await ask(messages, checklistCacheSalt(opts.variant, attempt));
    usage = addUsage(usage, res.usage);
    const extracted = extractChecklistBlocks(res.text);
    let problems: string;
    if (!extracted.ok) {
      problems = `- the answer is not the requested JSON: ${extracted.error}`;
      last = { violations: [], error: extracted.error, raw: res.text };
    } else {
      const checked = validateChecklist(extracted.value, example);
      if (checked.ok && checked.value) {
        return { ok: true, blocks: checked.value, attempts: attempt, usage, violations: checked.violations };
      }
      const errors = checked.violations.filter((v) => v.severity === 'error');
      problems = violationsForRepair(checked.violations);
      last = { violations: errors, error: `${errors.length} violation(s): ${errors.slice(0, 3).map(formatViolation).join('; ')}`, raw: res.text };
    }
    messages = [...messages, { role: 'assistant', content: res.text }, buildRepairMessage(problems)];
  }
  return {
    ok: false,
    attempts: opts.maxAttempts,
    usage,
    violations: last?.violations ?? [],
    error: `invalid checklist after ${opts.maxAttempts} attempt(s): ${last?.error ?? 'no answer'}`,
    ...(last ? { raw: last.raw } : {}),
  };
}

/** Assemble the stored example from successful variants. */
function assemble(example: Example, name: string, variants: VariantResult[]): AnnotatedExample {
  const usage = variants.reduce((u, v) => addUsage(u, v.usage), zeroUsage());
  return {
    ...example,
    checklists: variants.map((v) => toStoredVariant(v.blocks ?? [], v.usage.costUsd)),
    annotation: { annotator: name, variants: variants.map((v) => ({ attempts: v.attempts, usage: v.usage })), usage },
  };
}

function settle(example: Example, name: string, variants: VariantResult[]): ExampleAnnotation {
  const usage = variants.reduce((u, v) => addUsage(u, v.usage), zeroUsage());
  const failed = variants.findIndex((v) => !v.ok);
  if (failed >= 0) {
    const v = variants[failed]!;
    return {
      ok: false,
      reason: variants.length > 1 ? `variant ${failed}: ${v.error}` : (v.error ?? 'invalid checklist'),
      violations: v.violations,
      usage,
      variants,
      ...(v.raw !== undefined ? { raw: v.raw } : {}),
    };
  }
  return { ok: true, annotated: assemble(example, name, variants), usage, warnings: variants.flatMap((v) => v.violations) };
}

/** LLM annotator: K variants, each with its own repair loop. */
export class LlmChecklistAnnotator implements ChecklistAnnotator {
  constructor(
    readonly name: string,
    private readonly ask: Ask,
  ) {}

  async annotate(example: Example, opts: AnnotateOptions): Promise<ExampleAnnotation> {
    const variants: VariantResult[] = [];
    // Sequential: a failed variant stops the example (the others would be paid for nothing).
    for (let variant = 0; variant < opts.variants; variant++) {
      const result = await annotateVariant(example, this.ask, { variant, maxAttempts: opts.maxAttempts });
      variants.push(result);
      if (!result.ok) break;
    }
    return settle(example, this.name, variants);
  }
}

/**
 * Offline annotator: a deterministic function of the example (the demo world's ground truth). Its output goes
 * through the same validator, so a bug there is a recorded failure, not a bad checklist. All variants are equal.
 */
export class OfflineChecklistAnnotator implements ChecklistAnnotator {
  constructor(
    readonly name: string,
    private readonly derive: (example: Example) => ChecklistOutput,
  ) {}

  async annotate(example: Example, opts: AnnotateOptions): Promise<ExampleAnnotation> {
    let blocks: ChecklistOutput;
    try {
      blocks = this.derive(example);
    } catch (e) {
      const result: VariantResult = { ok: false, attempts: 1, usage: zeroUsage(), violations: [], error: (e as Error).message };
      return settle(example, this.name, [result]);
    }
    const checked = validateChecklist(blocks, example);
    const one: VariantResult = checked.ok
      ? { ok: true, blocks: checked.value ?? blocks, attempts: 1, usage: zeroUsage(), violations: checked.violations }
      : { ok: false, attempts: 1, usage: zeroUsage(), violations: checked.violations, error: `offline checklist invalid: ${checked.violations.filter((v) => v.severity === 'error').slice(0, 3).map(formatViolation).join('; ')}` };
    return settle(example, this.name, Array.from({ length: Math.max(1, opts.variants) }, () => one));
  }
}
