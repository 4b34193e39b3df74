/**
 * The RL data (pure): which lines of the annotated file RL uses (spec §6.1's length filter), which are held out, and
 * why the others were left out. The first `eval.prompts` usable examples (file order, as the reference's validation
 * split) are held out, the next `eval.validation` are validation prompts (never trained on either: hyperparameters are
 * chosen on them), always leaving at least one to train on; a held-out set smaller than asked for is said so.
 */
import { AnnotatedExample } from '../checklist/schema';
import { belowFloor, formatReasons } from '../../kernel/floor';

export interface RlDataSelection {
  /** Usable examples in file order: the first `heldOut` are held out, the next `validation` validate, the rest train. */
  kept: AnnotatedExample[];
  train: number;
  heldOut: number;
  validation: number;
  /** Validation prompts asked for (`rl.eval.validation`). */
  validationRequested: number;
  /** Held-out prompts asked for (`rl.eval.prompts`). */
  heldOutRequested: number;
  /** Prompt longer than maxModelLen − promptMargin. */
  tooLong: number;
  /** Lines that are not usable annotated examples, by reason (`not JSON`, the schema field, `no user message`). */
  invalidReasons: Record<string, number>;
  invalid: number;
}

export interface RlDataOptions {
  /** Prompt tokens of an example's first user turn (with its tools). */
  promptLength: (ex: AnnotatedExample) => number;
  maxPromptTokens: number;
  heldOut: number;
  validation?: number;
}

/** The selection of the non-empty `lines` of the annotated file. */
export function selectRlData(lines: readonly string[], opts: RlDataOptions): RlDataSelection {
  const kept: AnnotatedExample[] = [];
  const invalidReasons: Record<string, number> = {};
  const invalid = (reason: string) => void (invalidReasons[reason] = (invalidReasons[reason] ?? 0) + 1);
  let tooLong = 0;
  for (const line of lines) {
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      invalid('not JSON');
      continue;
    }
    const parsed = AnnotatedExample.safeParse(value);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      invalid(`${issue?.path.join('.') || '(row)'}: ${issue?.message ?? 'invalid'}`);
      continue;
    }
    if (!parsed.data.messages.some((m) => m.role === 'user')) {
      invalid('no user message');
      continue;
    }
    if (opts.promptLength(parsed.data) > opts.maxPromptTokens) tooLong++;
    else kept.push(parsed.data);
  }
  const heldOut = Math.min(opts.heldOut, Math.max(0, kept.length - 1));
  const validation = Math.min(opts.validation ?? 0, Math.max(0, kept.length - heldOut - 1));
  return {
    kept,
    train: kept.length - heldOut - validation,
    heldOut,
    validation,
    validationRequested: opts.validation ?? 0,
    heldOutRequested: opts.heldOut,
    tooLong,
    invalidReasons,
    invalid: Object.values(invalidReasons).reduce((a, b) => a + b, 0),
  };
}

/** `held-out prompts: 3 of 24 asked for (rl.eval.prompts; only 4 usable examples, one at least is trained on)`, or undefined. */
export function heldOutShrunk(s: Pick<RlDataSelection, 'heldOut' | 'heldOutRequested' | 'kept'>): string | undefined {
  if (s.heldOut >= s.heldOutRequested) return undefined;
  return `held-out prompts: ${s.heldOut} of ${s.heldOutRequested} asked for (rl.eval.prompts; only ${s.kept.length} usable example(s), one at least is trained on)`;
}

/** The stage's failure message when fewer than `min` examples are left to train on (`rl.minExamples`), else undefined. */
export function rlDataShortfall(s: Omit<RlDataSelection, 'kept'> & { lines: number }, min: number, source: string, maxPromptTokens: number): string | undefined {
  return belowFloor({
    stage: 'rl data',
    usable: s.train,
    of: s.lines,
    what: `lines of ${source} left to train on`,
    min,
    setting: 'rl.minExamples',
    lost: [
      s.invalid ? `${s.invalid} invalid: ${formatReasons(s.invalidReasons)}` : '',
      s.tooLong ? `${s.tooLong} too long: prompt over ${maxPromptTokens} tokens (rl.rollout.maxModelLen − promptMargin)` : '',
      s.heldOut ? `${s.heldOut} held out (rl.eval.prompts)` : '',
      s.validation ? `${s.validation} for validation (rl.eval.validation)` : '',
    ],
  });
}
