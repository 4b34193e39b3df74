/**
 * `cm2 checklist run|validate|show`.
 * - `run --config FILE`: starts (or attaches to) the annotation workflow of the run and follows its progress;
 * - `validate FILE`: checks a JSON / JSONL file of annotated examples (stored form) and prints every violation;
 *   exit code 1 if any error (warnings alone exit 0);
 * - `show RUN UUID`: prints an example's checklist next to its dialogue, read from the run's S3 prefix.
 */
import { readFileSync } from 'node:fs';
import type { Cm2Config } from '../run/config';
import { ObjectStore } from '../storage/store';
import { FailedAnnotation } from '../stages/checklist/shapes';
import { AnnotatedExample } from '../stages/checklist/schema';
import { renderChecklist } from '../stages/checklist/showChecklist';
import { formatViolation, validateAnnotatedExample } from '../stages/checklist/validate';
import { type ChecklistReport, runStageCommand, startChecklist } from './stages';
import { checklistKeys } from '../run/layout';

export function checklistRunCommand(cfg: Cm2Config, wait: boolean): Promise<void> {
  return runStageCommand<ChecklistReport>(cfg, wait, startChecklist, printChecklistReport);
}

export function printChecklistReport(report: ChecklistReport, cfg: Cm2Config): void {
  console.log(`checklists: ${report.annotated}/${report.total} annotated, ${report.failed} failed (annotator: ${report.annotator})`);
  for (const [reason, n] of Object.entries(report.failureReasons)) console.log(`  failed ${String(n).padStart(5)}  ${reason}`);
  console.log(`  ${report.turns} turns, ${report.items} items (${report.meanItemsPerTurn.toFixed(1)} per turn), ${report.variants} variant(s)`);
  const attempts = Object.entries(report.attempts).map(([k, v]) => `${k}:${v}`).join(' ');
  if (attempts) console.log(`  answers per variant: ${attempts}`);
  console.log(`  LLM usage: ${report.usage.calls} calls (${report.usage.cacheHits} cached), ${report.usage.promptTokens + report.usage.completionTokens} tokens, $${report.usage.costUsd.toFixed(4)} ($${report.meanCostPerExampleUsd.toFixed(4)}/example)`);
  console.log(`annotated:  s3://${cfg.s3.bucket}/${report.annotatedKey}`);
  console.log(`report:     s3://${cfg.s3.bucket}/${report.reportKey}`);
}

/** Rows of a JSON array, a single JSON object, or JSONL, with their line numbers. */
function readRows(file: string): { line: number; value?: unknown; error?: string }[] {
  const text = readFileSync(file, 'utf8');
  const trimmed = text.trim();
  if (trimmed.startsWith('[') || (trimmed.startsWith('{') && !trimmed.includes('\n{'))) {
    try {
      const v: unknown = JSON.parse(trimmed);
      return (Array.isArray(v) ? v : [v]).map((value, i) => ({ line: i + 1, value }));
    } catch {
      // fall through to JSONL
    }
  }
  return text.split('\n').flatMap((l, i): { line: number; value?: unknown; error?: string }[] => {
    if (!l.trim()) return [];
    try {
      return [{ line: i + 1, value: JSON.parse(l) as unknown }];
    } catch (e) {
      return [{ line: i + 1, error: `not JSON: ${(e as Error).message}` }];
    }
  });
}

/** Returns the exit code: 0 when no example has an error. */
export function checklistValidateCommand(file: string, print: (line: string) => void = console.log): number {
  const rows = readRows(file);
  let errors = 0;
  let warnings = 0;
  let bad = 0;
  for (const row of rows) {
    const where = `${file}:${row.line}`;
    if (row.error !== undefined) {
      print(`${where}: error ${row.error}`);
      errors++;
      bad++;
      continue;
    }
    const result = validateAnnotatedExample(row.value);
    const id = result.uuid ? ` (${result.uuid})` : '';
    for (const v of result.violations) {
      print(`${where}${id}: ${formatViolation(v)}`);
      if (v.severity === 'error') errors++;
      else warnings++;
    }
    if (!result.ok) bad++;
  }
  print(`${rows.length} example(s): ${rows.length - bad} valid, ${bad} invalid; ${errors} error(s), ${warnings} warning(s)`);
  return errors > 0 ? 1 : 0;
}

export async function checklistShowCommand(cfg: Cm2Config, runId: string, uuid: string, variant: number): Promise<number> {
  const store = ObjectStore.fromConfig(cfg.s3);
  const key = checklistKeys.example(runId, uuid);
  if (await store.exists(key)) {
    const example = await store.getJson(key, AnnotatedExample);
    console.log(renderChecklist(example, { variant, width: process.stdout.columns || 120 }));
    return 0;
  }
  const failKey = checklistKeys.failedExample(runId, uuid);
  if (await store.exists(failKey)) {
    const failed = await store.getJson(failKey, FailedAnnotation);
    console.log(`example ${uuid} of run ${runId} has no checklist: annotation failed after ${failed.attempts} answer(s):\n  ${failed.reason}`);
    return 1;
  }
  console.error(`cm2: no checklist for example ${uuid} in run ${runId} (s3://${cfg.s3.bucket}/${key})`);
  return 1;
}
