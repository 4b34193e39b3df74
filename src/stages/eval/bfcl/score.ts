/**
 * Scoring examples and aggregating results (pure).
 *
 * Accuracy is a fraction in [0, 1]. Per category: correct / total. Overall: pooled over every evaluated example
 * (`sum correct / sum total`), which is not BFCL's leaderboard "overall" (a weighted mean of category groups).
 */
import { z } from 'zod';
import { categoryKind, categoryLanguage } from './categories';
import { checkAst, checkerMode, checkRelevance, isCallList, type CheckResult } from './checker';
import type { BfclExample } from './data';
import type { Decoded } from './decode';

export interface ScoreOptions {
  /** The policy saw `a_b` for `a.b` (OpenAI tool names); the checker expects it so. */
  underscoreToDot?: boolean;
}

/** The verdict on one example given the policy's decoded output. */
export function scoreExample(example: BfclExample, decoded: Decoded, opts: ScoreOptions = {}): CheckResult {
  const kind = categoryKind(example.category);
  if (kind !== 'ast') return checkRelevance(decoded.error ? [] : decoded.calls, kind === 'relevance');
  if (decoded.error) return { valid: false, reason: 'decode_error', bfcl: 'ast_decoder:decoder_failed', detail: decoded.error };
  if (!isCallList(decoded.calls)) {
    return { valid: false, reason: 'wrong_output_format', bfcl: 'ast_decoder:decoder_wrong_output_format', detail: 'calls must be a list of {"function_name": {"param": value}}' };
  }
  return checkAst(example.functions, decoded.calls, example.groundTruth ?? [], checkerMode(example.category), {
    language: categoryLanguage(example.category),
    underscoreToDot: opts.underscoreToDot ?? false,
  });
}

export const Accuracy = z.object({ accuracy: z.number().min(0).max(1), correct: z.number().int().nonnegative(), total: z.number().int().nonnegative() });
export type Accuracy = z.infer<typeof Accuracy>;

export const ExampleResult = z.object({
  id: z.string(),
  category: z.string(),
  valid: z.boolean(),
  reason: z.string().optional(),
  /** The BFCL error_type of the failure. */
  bfcl: z.string().optional(),
  detail: z.string().optional(),
  /** The decoded calls of the policy. */
  calls: z.array(z.unknown()).optional(),
  /** The policy's raw text (model output or endpoint message content), shortened. */
  text: z.string().optional(),
  /** Generated tokens (the project's model) or completion tokens (endpoint). */
  tokens: z.number().int().optional(),
});
export type ExampleResult = z.infer<typeof ExampleResult>;

export const CategoryResult = Accuracy.extend({
  /** Failures by reason. */
  reasons: z.record(z.string(), z.number().int()),
});
export type CategoryResult = z.infer<typeof CategoryResult>;

/** The results file (`--out`, or the activity's S3 object). */
export const BfclResults = z.object({
  benchmark: z.literal('BFCL_v4'),
  /** What was evaluated, without secrets (an endpoint is its URL and model; a key is never recorded). */
  policy: z.record(z.string(), z.unknown()),
  dataDir: z.string(),
  limit: z.number().int().positive().optional(),
  /** Only these examples were asked for (`--ids`). */
  ids: z.array(z.string()).optional(),
  createdAt: z.string(),
  seconds: z.number(),
  categories: z.record(z.string(), CategoryResult),
  overall: Accuracy,
  examples: z.array(ExampleResult),
  /** Multi-turn categories were executed and scored by this bfcl-eval (its version and data folder). */
  multiTurn: z.object({ bfclEval: z.string(), data: z.string() }).optional(),
});
export type BfclResults = z.infer<typeof BfclResults>;

const ratio = (correct: number, total: number): Accuracy => ({ accuracy: total === 0 ? 0 : correct / total, correct, total });

/** Per-category and overall accuracy, and failure counts by reason. Categories keep the given order. */
export function aggregate(categories: readonly string[], results: readonly ExampleResult[]): { categories: Record<string, CategoryResult>; overall: Accuracy } {
  const out: Record<string, CategoryResult> = {};
  for (const c of categories) {
    const rs = results.filter((r) => r.category === c);
    const reasons: Record<string, number> = {};
    for (const r of rs) if (!r.valid) reasons[r.reason ?? 'unknown'] = (reasons[r.reason ?? 'unknown'] ?? 0) + 1;
    out[c] = { ...ratio(rs.filter((r) => r.valid).length, rs.length), reasons };
  }
  return { categories: out, overall: ratio(results.filter((r) => r.valid).length, results.length) };
}

/** The result record of one example. */
export function exampleResult(example: BfclExample, decoded: Decoded, verdict: CheckResult, extra: { text?: string; tokens?: number } = {}): ExampleResult {
  const r: ExampleResult = { id: example.id, category: example.category, valid: verdict.valid };
  if (!verdict.valid) {
    if (verdict.reason) r.reason = verdict.reason;
    if (verdict.bfcl) r.bfcl = verdict.bfcl;
    if (verdict.detail) r.detail = verdict.detail;
  }
  r.calls = decoded.calls;
  if (extra.text !== undefined) r.text = extra.text.length > 2000 ? `${extra.text.slice(0, 2000)}…` : extra.text;
  if (extra.tokens !== undefined) r.tokens = extra.tokens;
  return r;
}

/** A one-screen summary: a line per category, the overall line, and the most frequent failure reasons. */
export function formatSummary(results: Pick<BfclResults, 'categories' | 'overall'>): string {
  const pct = (a: Accuracy) => `${(100 * a.accuracy).toFixed(1).padStart(5)}%  ${String(a.correct).padStart(4)}/${String(a.total).padEnd(4)}`;
  const width = Math.max(8, ...Object.keys(results.categories).map((c) => c.length));
  const lines = Object.entries(results.categories).map(([c, r]) => {
    // Failure kinds (`value_error:unit` and `value_error:date` count as `value_error`).
    const kinds: Record<string, number> = {};
    for (const [reason, n] of Object.entries(r.reasons)) kinds[reason.split(':')[0]!] = (kinds[reason.split(':')[0]!] ?? 0) + n;
    const top = Object.entries(kinds).sort((a, b) => b[1] - a[1]).slice(0, 4).map(([k, n]) => `${k} ${n}`).join(', ');
    return `${c.padEnd(width)}  ${pct(r)}${top ? `  failures: ${top}` : ''}`;
  });
  lines.push(`${'overall'.padEnd(width)}  ${pct(results.overall)}`);
  return lines.join('\n');
}
