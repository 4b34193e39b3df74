/**
 * A study (pure): the held-out mean checklist reward and the BFCL accuracy of a base model, its SFT policy and RL
 * policies trained from that SFT policy (one RL run per seed × granularity), as `scripts/rl-study.ts` gathers them.
 * This module shapes those numbers: the statistics (how many standard errors each RL run is from SFT, the spread
 * across seeds), the Markdown block for docs/rl-results.md and the report data for the HTML page. No I/O.
 *
 * "Standard errors apart" is unpaired, as everywhere in cm2: (RL − SFT) / √(SE_RL² + SE_SFT²), where each SE is the
 * standard error across held-out prompts (src/kernel/heldOut.ts).
 */
import { z } from 'zod';
import { promptMeanStats } from '../kernel/heldOut';
import type { ReportDataInput } from './reportData';

const Accuracy = z.object({ accuracy: z.number(), correct: z.number().int().nonnegative(), total: z.number().int().nonnegative() });

export const StudyPolicy = z.object({
  /** `base`, `sft`, or `<granularity>-s<seed>` for an RL run. */
  label: z.string().min(1),
  kind: z.enum(['base', 'sft', 'rl']),
  /** The run that evaluated (and, for RL, trained) this policy. */
  runId: z.string().min(1),
  granularity: z.string().optional(),
  seed: z.number().int().optional(),
  /** RL steps taken (0 for base and SFT). */
  steps: z.number().int().nonnegative(),
  /** Held-out mean checklist reward of the policy (its last evaluation). */
  mean: z.number(),
  se: z.number().nonnegative().nullable(),
  prompts: z.number().int().nonnegative().nullable(),
  /** Every held-out evaluation of the run (RL: the last one is `mean`). */
  evals: z.array(z.object({ step: z.number().int().nonnegative(), mean: z.number(), se: z.number().nonnegative().nullable() })).default([]),
  /** Training reward per RL step (mean and standard deviation over the step's rollouts). */
  train: z.array(z.object({ step: z.number().int().positive(), mean: z.number(), std: z.number().nonnegative(), kl: z.number().optional(), rollouts: z.number().int().nonnegative(), failed: z.number().int().nonnegative() })).default([]),
});
export type StudyPolicy = z.infer<typeof StudyPolicy>;

export const StudyResult = z.object({
  id: z.string().min(1),
  generatedAt: z.string(),
  /** What was held fixed, for the record (model, data, RL settings), as display strings. */
  settings: z.record(z.string(), z.string()),
  policies: z.array(StudyPolicy),
  bfcl: z.array(z.object({ label: z.string(), overall: Accuracy, categories: z.record(z.string(), Accuracy) })).default([]),
});
export type StudyResult = z.infer<typeof StudyResult>;

/** How many standard errors of the difference `a` lies above `b` (unpaired); null without both standard errors. */
export function seApart(a: Pick<StudyPolicy, 'mean' | 'se'>, b: Pick<StudyPolicy, 'mean' | 'se'>): number | null {
  if (a.se === null || b.se === null) return null;
  const d = Math.sqrt(a.se ** 2 + b.se ** 2);
  return d > 0 ? (a.mean - b.mean) / d : null;
}

export interface GranularitySummary {
  granularity: string;
  runs: number;
  /** Mean over seeds of the runs' held-out means. */
  mean: number;
  /** Sample standard deviation of the runs' means across seeds; null with one run. */
  sdAcrossSeeds: number | null;
  /** The smallest and largest distance from SFT, in standard errors (null without SFT or standard errors). */
  minSe: number | null;
  maxSe: number | null;
  /** Runs more than two standard errors above SFT. */
  beyondTwo: number;
}

/** One row per RL granularity, in the order the runs appear. */
export function granularitySummaries(policies: readonly StudyPolicy[]): GranularitySummary[] {
  const sft = policies.find((p) => p.kind === 'sft');
  const byGranularity = new Map<string, StudyPolicy[]>();
  for (const p of policies) if (p.kind === 'rl') byGranularity.set(p.granularity ?? '?', [...(byGranularity.get(p.granularity ?? '?') ?? []), p]);
  return [...byGranularity].map(([granularity, runs]) => {
    // Each run is one sample: its mean and sample standard deviation across seeds.
    const { mean, sd: sdAcrossSeeds } = promptMeanStats(runs.map((r) => r.mean), runs.map((_, i) => i));
    const apart = sft ? runs.map((r) => seApart(r, sft)).filter((v): v is number => v !== null) : [];
    return {
      granularity,
      runs: runs.length,
      mean,
      sdAcrossSeeds,
      minSe: apart.length ? Math.min(...apart) : null,
      maxSe: apart.length ? Math.max(...apart) : null,
      beyondTwo: apart.filter((v) => v > 2).length,
    };
  });
}

const f4 = (v: number) => v.toFixed(4);
const meanSe = (p: Pick<StudyPolicy, 'mean' | 'se'>) => `${f4(p.mean)}${p.se === null ? '' : ` ± ${f4(p.se)}`}`;
const signedSe = (v: number | null) => (v === null ? '–' : `${v >= 0 ? '+' : '−'}${Math.abs(v).toFixed(1)} SE`);
const pct = (a: { correct: number; total: number }) => (a.total > 0 ? `${((a.correct / a.total) * 100).toFixed(1)}% (${a.correct}/${a.total})` : '–');

/** The study as a Markdown block (tables only; the plots are in the HTML report). */
export function studyMarkdown(r: StudyResult, opts: { reportPath?: string; command?: string } = {}): string {
  const sft = r.policies.find((p) => p.kind === 'sft');
  const lines: string[] = [];
  lines.push(`Study \`${r.id}\` (generated ${r.generatedAt} by \`scripts/rl-study.ts\`).`, '');
  for (const [k, v] of Object.entries(r.settings)) lines.push(`- ${k}: ${v}`);
  lines.push('', '| policy | RL steps | held-out mean checklist reward | vs SFT |', '|---|---|---|---|');
  for (const p of r.policies) {
    const vs = p.kind === 'sft' || !sft ? '–' : signedSe(seApart(p, sft));
    lines.push(`| ${p.label} | ${p.steps} | ${meanSe(p)}${p.prompts ? ` (${p.prompts} prompts)` : ''} | ${vs} |`);
  }
  const summaries = granularitySummaries(r.policies);
  if (summaries.length) {
    lines.push('', '| granularity | runs | mean over seeds | SD across seeds | runs > 2 SE above SFT | range vs SFT |', '|---|---|---|---|---|---|');
    for (const s of summaries) {
      const range = s.minSe === null || s.maxSe === null ? '–' : `${signedSe(s.minSe)} … ${signedSe(s.maxSe)}`;
      lines.push(`| ${s.granularity} | ${s.runs} | ${f4(s.mean)} | ${s.sdAcrossSeeds === null ? '–' : f4(s.sdAcrossSeeds)} | ${s.beyondTwo} of ${s.runs} | ${range} |`);
    }
  }
  if (r.bfcl.length) {
    const categories = [...new Set(r.bfcl.flatMap((b) => Object.keys(b.categories)))];
    lines.push('', `BFCL accuracy (greedy), ${r.bfcl.map((b) => b.label).join(', ')}:`, '');
    lines.push(`| category | ${r.bfcl.map((b) => b.label).join(' | ')} |`, `|---|${r.bfcl.map(() => '---').join('|')}|`);
    for (const c of categories) lines.push(`| ${c} | ${r.bfcl.map((b) => (b.categories[c] ? pct(b.categories[c]) : '–')).join(' | ')} |`);
    lines.push(`| **overall** | ${r.bfcl.map((b) => pct(b.overall)).join(' | ')} |`);
  }
  if (opts.reportPath) lines.push('', `Plots: \`${opts.reportPath}\` (held-out reward per policy, held-out and training reward per RL step, BFCL per category).`);
  if (opts.command) lines.push('', 'Reproduce:', '', '```bash', opts.command, '```');
  return lines.join('\n');
}

/** Replaces the block of study `id` in a Markdown document (between its markers), or appends it under `heading`. */
export function upsertStudyBlock(doc: string, id: string, block: string, heading: string): string {
  const begin = `<!-- study:${id} -->`;
  const end = `<!-- /study:${id} -->`;
  const wrapped = `${begin}\n${block}\n${end}`;
  const i = doc.indexOf(begin);
  const j = doc.indexOf(end);
  if (i >= 0 && j > i) return doc.slice(0, i) + wrapped + doc.slice(j + end.length);
  return `${doc.replace(/\s*$/, '')}\n\n${heading}\n\n${wrapped}\n`;
}

/**
 * The report page's input for a study: RL series per run (training reward per step; held-out evaluations with the
 * SFT policy's as step 0), every policy's BFCL accuracy, the study table. The headline compares SFT with the mean of
 * the RL runs; its RL standard error, √(Σ SE_i²) / n, counts the prompt sampling of each run, not the seed spread
 * (the study section shows that).
 */
export function studyReportData(r: StudyResult): ReportDataInput {
  const sft = r.policies.find((p) => p.kind === 'sft');
  const rl = r.policies.filter((p) => p.kind === 'rl');
  const rlMean = rl.length ? rl.reduce((a, p) => a + p.mean, 0) / rl.length : undefined;
  const rlSe = rl.length && rl.every((p) => p.se !== null) ? Math.sqrt(rl.reduce((a, p) => a + p.se! ** 2, 0)) / rl.length : undefined;
  const sftEval = sft ? [{ step: 0, rewardMean: sft.mean, ...(sft.se !== null ? { rewardSe: sft.se } : {}), ...(sft.prompts !== null ? { prompts: sft.prompts } : {}) }] : [];
  return {
    runId: r.id,
    generatedAt: r.generatedAt,
    heldOut: {
      ...(sft ? { sft: sft.mean, ...(sft.se !== null ? { sftSe: sft.se } : {}) } : {}),
      ...(rlMean !== undefined ? { rl: rlMean, ...(rlSe !== undefined ? { rlSe } : {}) } : {}),
      ...(sft?.prompts ? { prompts: sft.prompts } : {}),
    },
    rl: {
      steps: rl.flatMap((p) => p.train.map((t) => ({ series: p.label, step: t.step, rewardMean: t.mean, rewardStd: t.std, ...(t.kl !== undefined ? { kl: t.kl } : {}), failedSamples: t.failed, rollouts: t.rollouts, judgeCalls: 0, cacheHits: 0 }))),
      evals: rl.flatMap((p) => [...sftEval, ...p.evals.filter((e) => e.step > 0).map((e) => ({ step: e.step, rewardMean: e.mean, ...(e.se !== null ? { rewardSe: e.se } : {}) }))].map((e) => ({ series: p.label, ...e }))),
      passByFocus: [],
    },
    bfcl: r.bfcl.map((b) => ({ policy: b.label, overall: b.overall, categories: b.categories })),
    study: {
      settings: r.settings,
      policies: r.policies.map((p) => ({
        label: p.label,
        kind: p.kind,
        ...(p.granularity ? { granularity: p.granularity } : {}),
        ...(p.seed !== undefined ? { seed: p.seed } : {}),
        steps: p.steps,
        mean: p.mean,
        ...(p.se !== null ? { se: p.se } : {}),
        ...(p.kind === 'rl' && sft ? { seApart: seApart(p, sft) ?? undefined } : {}),
      })),
    },
  };
}
