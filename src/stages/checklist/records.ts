/**
 * The checklist stage's records, read and summed (pure): the lines of the examples to annotate (each bad line an error
 * naming its file, line and field), and the report's totals over the annotated and failed examples.
 */
import { addUsage, type Usage, zeroUsage } from '../../kernel/roleContracts';
import { Example } from '../../kernel/schema';
import type { AnnotatedExample } from './schema';

export interface InputLineError {
  file: string;
  line: number;
  field: string;
  message: string;
}

/** The examples of a JSONL text (`file` names it in errors): a line that is not JSON, not an example or a repeated uuid is an error and skipped. */
export function parseExampleLines(text: string, file: string): { examples: Example[]; errors: InputLineError[] } {
  const examples: Example[] = [];
  const errors: InputLineError[] = [];
  const seen = new Set<string>();
  for (const [i, line] of text.split('\n').entries()) {
    if (!line.trim()) continue;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (e) {
      errors.push({ file, line: i + 1, field: '(line)', message: `not JSON: ${(e as Error).message}` });
      continue;
    }
    const parsed = Example.safeParse(value);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      errors.push({ file, line: i + 1, field: issue?.path.join('.') || '(row)', message: issue?.message ?? 'invalid' });
      continue;
    }
    if (seen.has(parsed.data.uuid)) {
      errors.push({ file, line: i + 1, field: 'uuid', message: `duplicate uuid ${parsed.data.uuid} (first occurrence kept)` });
      continue;
    }
    seen.add(parsed.data.uuid);
    examples.push(parsed.data);
  }
  return { examples, errors };
}

/** A failure reason's key in the report: its text up to the first colon, at most 80 characters. */
export const reasonKey = (reason: string): string => reason.replace(/:.*$/s, '').slice(0, 80);

/** The report's sums: usage of both sides, attempts per variant, turns and items of the first variant, the annotators, the most variants, failures by reason. */
export function reportTotals(annotated: readonly AnnotatedExample[], failed: readonly { reason: string; usage: Usage }[]) {
  let usage: Usage = zeroUsage();
  const attempts: Record<string, number> = {};
  let turns = 0;
  let items = 0;
  const annotators = new Set<string>();
  let variants = 0;
  for (const a of annotated) {
    if (a.annotation) {
      usage = addUsage(usage, a.annotation.usage);
      annotators.add(a.annotation.annotator);
      for (const v of a.annotation.variants) attempts[String(v.attempts)] = (attempts[String(v.attempts)] ?? 0) + 1;
    }
    variants = Math.max(variants, a.checklists.length);
    const first = a.checklists[0] ?? [];
    turns += first.length;
    items += first.reduce((n, t) => n + t.length, 0);
  }
  const failureReasons: Record<string, number> = {};
  for (const f of failed) {
    usage = addUsage(usage, f.usage);
    failureReasons[reasonKey(f.reason)] = (failureReasons[reasonKey(f.reason)] ?? 0) + 1;
  }
  return { usage, attempts, turns, items, annotators: [...annotators], variants, failureReasons };
}
