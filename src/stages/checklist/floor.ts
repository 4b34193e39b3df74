/** The checklist stage's output floor (`checklist.minAnnotated`, src/kernel/floor.ts): pure. */
import { belowFloor, formatReasons } from '../../kernel/floor';

/** The stage's failure message when fewer than `min` examples were annotated (`checklist.minAnnotated`), else undefined. */
export function checklistShortfall(r: { annotated: number; total: number; failed: number; failureReasons: Readonly<Record<string, number>>; inputErrors: number }, min: number): string | undefined {
  return belowFloor({
    stage: 'checklist',
    usable: r.annotated,
    of: r.total,
    what: 'examples annotated',
    min,
    setting: 'checklist.minAnnotated',
    lost: [r.failed ? `${r.failed} failed: ${formatReasons(r.failureReasons)}` : '', r.inputErrors ? `${r.inputErrors} input line(s) not examples, skipped` : ''],
  });
}
