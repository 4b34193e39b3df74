/**
 * Gathers the numbers of a run from S3 into `ReportData` (src/report/reportData.ts) for the HTML report: the stage
 * reports (prepare, checklist, SFT), the RL metrics JSONL, BFCL results. Every source is optional: a run that is
 * still going, or one with stages disabled, gives a report with what exists. Reading only; the shaping is pure
 * (`buildReport`), so it is tested without servers.
 */
import { z } from 'zod';
import { ifExists as optional, type ObjectStore } from '../storage/store';
import { checklistKeys, evalKeys, prepareKeys, rlKeys, sftKeys } from '../run/layout';
import type { ReportData } from './reportData';
import { promptRewards } from './studyFile';

export interface StageInfo {
  name: string;
  state: string;
  seconds?: number;
  workflowId?: string;
  detail?: string;
}

const Usage = z.looseObject({ calls: z.number(), promptTokens: z.number(), completionTokens: z.number(), costUsd: z.number() });
const PrepareReport = z.looseObject({
  total: z.number(),
  importErrors: z.number(),
  steps: z.array(z.looseObject({ name: z.string(), in: z.number(), kept: z.number(), failed: z.number(), reasons: z.record(z.string(), z.number()), usage: Usage })),
  coldStart: z.looseObject({ count: z.number() }),
  rl: z.looseObject({ count: z.number() }),
});
const ChecklistReport = z.looseObject({
  annotator: z.string(),
  failed: z.number(),
  failureReasons: z.record(z.string(), z.number()),
  usage: Usage,
});
const Share = z.looseObject({ wellFormedShare: z.number(), correctNameShare: z.number() });
const SftReport = z.looseObject({
  train: z.looseObject({ losses: z.array(z.number()), seconds: z.number().optional() }),
  base: Share.optional(),
  sft: Share.optional(),
});
const JudgeStats = z.looseObject({ calls: z.number().default(0), cacheHits: z.number().default(0), failed: z.number().default(0), promptTokens: z.number().default(0), completionTokens: z.number().default(0), costUsd: z.number().default(0) });
const PassByFocus = z.record(z.string(), z.object({ passed: z.number(), total: z.number() }));
const RlRow = z.union([
  z.looseObject({
    kind: z.literal('step'),
    step: z.number(),
    granularity: z.string(),
    reward: z.object({ mean: z.number(), std: z.number() }),
    failedSamples: z.number(),
    rollouts: z.number(),
    kl: z.number().optional(),
    loss: z.number().optional(),
    logprobGap: z.looseObject({ mean: z.number(), max: z.number() }).optional(),
    judge: JudgeStats.optional(),
    tokens: z.looseObject({ policy: z.number().optional(), generated: z.number().optional() }).optional(),
    passByFocus: PassByFocus.optional(),
    seconds: z.record(z.string(), z.number()).optional(),
  }),
  z.looseObject({
    kind: z.literal('eval'),
    step: z.number(),
    rewardMean: z.number(),
    /** Standard error across held-out prompts (absent in runs recorded before it was kept; null with < 2 prompts). */
    rewardSe: z.number().nullable().optional(),
    prompts: z.number().optional(),
    rollouts: z.number().optional(),
    /** Rollouts that failed (judge or tool environment), scored 0 in `rewardMean`. */
    failed: z.number().optional(),
    judge: JudgeStats.optional(),
    passByFocus: PassByFocus.optional(),
    /** How the evaluated episodes ended, counted per reason. */
    endReasons: z.record(z.string(), z.number()).optional(),
    seconds: z.record(z.string(), z.number()).optional(),
  }),
]);
export type RlRow = z.infer<typeof RlRow>;

/** One held-out evaluation: the policy after RL step `step` (0 = the SFT policy). */
export interface HeldOutEval {
  step: number;
  mean: number;
  /** Standard error of `mean` across prompts; null when unknown (older runs) or fewer than two prompts. */
  se: number | null;
  /** Held-out prompts (null when unknown). */
  n: number | null;
  rollouts: number | null;
  /** Failed rollouts, scored 0 in `mean` (null when unknown). */
  failed: number | null;
}

/** The held-out rewards of a run: the SFT policy (step 0), the latest RL policy, every evaluation. */
export interface HeldOutSummary {
  sft: number | null;
  sftSe: number | null;
  rl: number | null;
  rlSe: number | null;
  rlStep: number | null;
  /** Held-out prompts of the latest evaluation. */
  prompts: number | null;
  /** Failed rollouts of the SFT and RL evaluations (scored 0 in their means) and their rollouts; null when unknown. */
  sftFailed: number | null;
  sftRollouts: number | null;
  rlFailed: number | null;
  rlRollouts: number | null;
  /** (RL − SFT) / √(SE_SFT² + SE_RL²): how many standard errors apart the two means are (unpaired); null without SEs. */
  z: number | null;
  evals: HeldOutEval[];
}

/**
 * The format figures of a run's last evaluation: checklist items passed per focus and the episodes' end reasons
 * (undefined when its row predates them).
 */
export function lastEvalEpisodes(rows: readonly RlRow[]): { passByFocus: Record<string, { passed: number; total: number }>; endReasons: Record<string, number> } | undefined {
  const last = rows.filter((r): r is Extract<RlRow, { kind: 'eval' }> => r.kind === 'eval').at(-1);
  if (!last?.passByFocus || !last.endReasons) return undefined;
  return { passByFocus: last.passByFocus, endReasons: last.endReasons };
}

/** The held-out summary of RL metrics rows (pure; a step evaluated twice, e.g. after a retry, counts once: the last). */
export function heldOutSummary(rows: readonly RlRow[]): HeldOutSummary {
  const byStep = new Map<number, HeldOutEval>();
  for (const r of rows) {
    if (r.kind !== 'eval') continue;
    byStep.set(r.step, { step: r.step, mean: r.rewardMean, se: r.rewardSe ?? null, n: r.prompts ?? null, rollouts: r.rollouts ?? null, failed: r.failed ?? null });
  }
  const evals = [...byStep.values()].sort((a, b) => a.step - b.step);
  const first = evals.find((e) => e.step === 0);
  const last = evals.filter((e) => e.step > 0).pop();
  const z = first && last && first.se !== null && last.se !== null && (first.se > 0 || last.se > 0) ? (last.mean - first.mean) / Math.sqrt(first.se ** 2 + last.se ** 2) : null;
  return {
    sft: first?.mean ?? null,
    sftSe: first?.se ?? null,
    rl: last?.mean ?? null,
    rlSe: last?.se ?? null,
    rlStep: last?.step ?? null,
    prompts: (last ?? first)?.n ?? null,
    sftFailed: first?.failed ?? null,
    sftRollouts: first?.rollouts ?? null,
    rlFailed: last?.failed ?? null,
    rlRollouts: last?.rollouts ?? null,
    z,
    evals,
  };
}
/** The mean reward per held-out prompt of a run's evaluation at `step`, from its advantage rows. */
export async function evalPromptRewards(store: ObjectStore, runId: string, step: number): Promise<Record<string, number>> {
  const key = rlKeys.advantages(rlKeys.eval(runId, step));
  return promptRewards((await store.getJson<{ rows?: { id: string; reward?: number }[] }>(key)).rows ?? [], key);
}
const BfclResult = z.looseObject({
  label: z.string(),
  overall: z.object({ accuracy: z.number(), correct: z.number(), total: z.number() }),
  categories: z.record(z.string(), z.object({ accuracy: z.number(), correct: z.number(), total: z.number() })),
});

const Tau2RoleUsage = z.looseObject({ calls: z.number(), promptTokens: z.number(), completionTokens: z.number(), costUsd: z.number() });
const Tau2Summary = z.looseObject({
  label: z.string(),
  usage: z.looseObject({ agent: Tau2RoleUsage.optional(), user: Tau2RoleUsage.optional() }).optional(),
  tau2: z.string(),
  average: z.number(),
  domains: z.record(z.string(), z.looseObject({ tasks: z.number(), trials: z.number(), avg_reward: z.number(), pass_hat_k: z.record(z.string(), z.number()) })),
});

export interface RunSources {
  prepare?: z.infer<typeof PrepareReport>;
  checklist?: z.infer<typeof ChecklistReport>;
  sft?: z.infer<typeof SftReport>;
  /** RL metrics rows per run; `series` names the run's lines (its granularity unless several runs share one). */
  rl: Array<{ runId: string; rows: RlRow[] }>;
  bfcl: z.infer<typeof BfclResult>[];
  /** τ²-Bench summaries per evaluated policy (`eval.tau2.enabled`); absent in sources written before it existed. */
  tau2?: z.infer<typeof Tau2Summary>[];
}

export async function readRlRows(store: ObjectStore, runId: string): Promise<RlRow[]> {
  const text = await optional(() => store.getText(rlKeys.metrics(runId)));
  if (!text) return [];
  const rows: RlRow[] = [];
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    const parsed = RlRow.safeParse(JSON.parse(line));
    if (parsed.success) rows.push(parsed.data);
  }
  return rows;
}

/** Reads what exists of a run (and of extra RL runs to compare, e.g. one per granularity). */
export async function readSources(store: ObjectStore, runId: string, extraRlRuns: readonly string[] = []): Promise<RunSources> {
  const [prepare, checklist, sft] = await Promise.all([
    optional(() => store.getJson(prepareKeys.report(runId), PrepareReport)),
    optional(() => store.getJson(checklistKeys.report(runId), ChecklistReport)),
    optional(() => store.getJson(sftKeys.report(runId), SftReport)),
  ]);
  const rl = await Promise.all([runId, ...extraRlRuns].map(async (id) => ({ runId: id, rows: await readRlRows(store, id) })));
  const bfclKeys = (await store.list(evalKeys.folder(runId))).filter((k) => k.endsWith('.summary.json'));
  const bfcl = (await Promise.all(bfclKeys.map((k) => optional(() => store.getJson(k, BfclResult))))).filter((x): x is z.infer<typeof BfclResult> => x !== undefined);
  // Only the folder's own files: each policy's episodes lie in `<label>/<domain>/`, one object each.
  const tau2Folder = evalKeys.tau2Folder(runId);
  const tau2Keys = (await store.list(tau2Folder)).filter((k) => k.endsWith('.summary.json') && !k.slice(tau2Folder.length + 1).includes('/'));
  const tau2 = (await Promise.all(tau2Keys.map((k) => optional(() => store.getJson(k, Tau2Summary))))).filter((x): x is z.infer<typeof Tau2Summary> => x !== undefined);
  return {
    ...(prepare ? { prepare } : {}),
    ...(checklist ? { checklist } : {}),
    ...(sft ? { sft } : {}),
    rl: rl.filter((r) => r.rows.length > 0),
    bfcl,
    ...(tau2.length ? { tau2 } : {}),
  };
}

const add = (into: Record<string, number>, key: string, v: number) => {
  if (v) into[key] = (into[key] ?? 0) + v;
};

/** Shapes the sources into the report's input (pure). */
export function buildReport(runId: string, src: RunSources, opts: { stages: StageInfo[]; uiUrl?: string; generatedAt?: string }): ReportData {
  const data: ReportData = {
    runId,
    generatedAt: opts.generatedAt ?? new Date().toISOString(),
    ...(opts.uiUrl ? { uiUrl: opts.uiUrl } : {}),
    stages: opts.stages.map((s) => ({ name: s.name, state: s.state, ...(s.seconds !== undefined ? { seconds: s.seconds } : {}), ...(s.workflowId ? { workflowId: s.workflowId } : {}), ...(s.detail ? { detail: s.detail } : {}) })),
    heldOut: {},
    failures: [],
    usage: [],
    phases: [],
  };
  const stageSeconds = new Map(opts.stages.map((s) => [s.name, s.seconds]));

  if (src.prepare) {
    const p = src.prepare;
    const filterSteps = p.steps.filter((s) => s.name === 'rule_filter' || s.name.startsWith('llm_filter'));
    data.data = {
      imported: p.total,
      kept: filterSteps.length ? filterSteps[filterSteps.length - 1]!.kept : p.total,
      coldStart: p.coldStart.count,
      rl: p.rl.count,
      // Each step against its own input: compression runs on the cold-start split, selection on the RL split.
      funnel: [{ step: 'imported', kept: p.total }, ...p.steps.map((s) => ({ step: s.name, in: s.in, kept: s.kept }))],
    };
    const reasons: Record<string, number> = {};
    add(reasons, 'import_error', p.importErrors);
    for (const s of p.steps) add(reasons, `${s.name}: failed`, s.failed);
    const count = Object.values(reasons).reduce((a, b) => a + b, 0);
    data.failures.push({ stage: 'prepare', count, reasons });
    for (const s of p.steps) if (s.usage.calls > 0) data.usage.push({ stage: 'prepare', role: s.name, calls: s.usage.calls, promptTokens: s.usage.promptTokens, completionTokens: s.usage.completionTokens, costUsd: s.usage.costUsd });
    if (!p.steps.some((s) => s.usage.calls > 0)) data.usage.push({ stage: 'prepare', calls: 0, promptTokens: 0, completionTokens: 0, costUsd: 0 });
    const sec = stageSeconds.get('prepare');
    if (sec !== undefined) data.phases.push({ stage: 'prepare', phase: 'prepare', seconds: sec });
  }
  if (src.checklist) {
    const c = src.checklist;
    data.failures.push({ stage: 'checklist', count: c.failed, reasons: c.failureReasons });
    data.usage.push({ stage: 'checklist', role: c.annotator, calls: c.usage.calls, promptTokens: c.usage.promptTokens, completionTokens: c.usage.completionTokens, costUsd: c.usage.costUsd });
    const sec = stageSeconds.get('checklist');
    if (sec !== undefined) data.phases.push({ stage: 'checklist', phase: 'annotate', seconds: sec });
  }
  if (src.sft) {
    const s = src.sft;
    data.sft = {
      losses: s.train.losses,
      ...(s.base ? { base: { wellFormedShare: s.base.wellFormedShare, correctNameShare: s.base.correctNameShare } } : {}),
      ...(s.sft ? { final: { wellFormedShare: s.sft.wellFormedShare, correctNameShare: s.sft.correctNameShare } } : {}),
    };
    const total = stageSeconds.get('sft');
    const train = s.train.seconds;
    if (train !== undefined) data.phases.push({ stage: 'sft', phase: 'train', seconds: train });
    if (total !== undefined && train !== undefined && total > train) data.phases.push({ stage: 'sft', phase: 'eval + orchestration', seconds: total - train });
  }

  if (src.rl.length) {
    const firstGranularity = (run: { rows: RlRow[] }) => run.rows.find((x): x is Extract<RlRow, { kind: 'step' }> => x.kind === 'step')?.granularity;
    const distinct = new Set(src.rl.map(firstGranularity)).size === src.rl.length;
    // One run: its granularity; runs to compare: their granularities when those differ, else their ids.
    const seriesName = (run: { runId: string; rows: RlRow[] }) =>
      (src.rl.length === 1 || distinct ? firstGranularity(run) : undefined) ?? run.runId;
    const steps: NonNullable<ReportData['rl']>['steps'] = [];
    const evals: NonNullable<ReportData['rl']>['evals'] = [];
    const focus: Record<string, { passed: number; total: number }> = {};
    const rlPhases: Record<string, number> = {};
    const judge = { calls: 0, promptTokens: 0, completionTokens: 0, costUsd: 0 };
    let failed = 0;
    for (const run of src.rl) {
      const series = seriesName(run);
      for (const row of run.rows) {
        if (row.judge) {
          judge.calls += row.judge.calls;
          judge.promptTokens += row.judge.promptTokens;
          judge.completionTokens += row.judge.completionTokens;
          judge.costUsd += row.judge.costUsd;
        }
        if (row.kind === 'eval') {
          evals.push({
            series,
            step: row.step,
            rewardMean: row.rewardMean,
            ...(typeof row.rewardSe === 'number' ? { rewardSe: row.rewardSe } : {}),
            ...(row.prompts !== undefined ? { prompts: row.prompts } : {}),
            ...(row.failed !== undefined ? { failed: row.failed, ...(row.rollouts !== undefined ? { rollouts: row.rollouts } : {}) } : {}),
          });
          for (const [k, v] of Object.entries(row.seconds ?? {})) add(rlPhases, `eval ${k}`, v);
          continue;
        }
        failed += row.failedSamples;
        steps.push({
          series,
          step: row.step,
          rewardMean: row.reward.mean,
          rewardStd: row.reward.std,
          failedSamples: row.failedSamples,
          rollouts: row.rollouts,
          ...(row.kl !== undefined ? { kl: row.kl } : {}),
          ...(row.loss !== undefined ? { loss: row.loss } : {}),
          ...(row.logprobGap ? { logprobGap: row.logprobGap.mean, logprobGapMax: row.logprobGap.max } : {}),
          judgeCalls: row.judge?.calls ?? 0,
          cacheHits: row.judge?.cacheHits ?? 0,
          ...(row.tokens?.generated !== undefined ? { tokens: row.tokens.generated } : {}),
        });
        for (const [k, v] of Object.entries(row.passByFocus ?? {})) {
          const slot = (focus[k] ??= { passed: 0, total: 0 });
          slot.passed += v.passed;
          slot.total += v.total;
        }
        for (const [k, v] of Object.entries(row.seconds ?? {})) if (k !== 'total') add(rlPhases, k, v);
      }
    }
    data.rl = {
      steps,
      evals,
      passByFocus: Object.entries(focus).sort(([a], [b]) => a.localeCompare(b)).map(([f, v]) => ({ focus: f, passed: v.passed, total: v.total })),
    };
    for (const [phase, seconds] of Object.entries(rlPhases)) data.phases.push({ stage: 'rl', phase, seconds });
    data.usage.push({ stage: 'rl', role: 'judge', ...judge });
    data.failures.push({ stage: 'rl', count: failed, reasons: failed ? { 'failed samples (judge or tool environment)': failed } : {} });
    // Held-out reward of this run's own RL: step 0 = the SFT policy, the latest evaluation = the latest RL policy.
    const ownRun = src.rl.find((r) => r.runId === runId);
    const own = ownRun ? evals.filter((e) => e.series === seriesName(ownRun)) : [];
    const first = own.find((e) => e.step === 0);
    const last = own.length ? own.reduce((a, b) => (b.step >= a.step ? b : a)) : undefined;
    if (first) {
      data.heldOut.sft = first.rewardMean;
      if (first.rewardSe !== undefined) data.heldOut.sftSe = first.rewardSe;
      if (first.failed !== undefined) Object.assign(data.heldOut, { sftFailed: first.failed }, first.rollouts !== undefined ? { sftRollouts: first.rollouts } : {});
    }
    if (last && last.step > 0) {
      data.heldOut.rl = last.rewardMean;
      if (last.rewardSe !== undefined) data.heldOut.rlSe = last.rewardSe;
      if (last.failed !== undefined) Object.assign(data.heldOut, { rlFailed: last.failed }, last.rollouts !== undefined ? { rlRollouts: last.rollouts } : {});
    }
    const n = (last ?? first)?.prompts;
    if (n !== undefined) data.heldOut.prompts = n;
  }
  if (src.bfcl.length) data.bfcl = src.bfcl.map((b) => ({ policy: b.label, overall: b.overall, categories: b.categories }));
  if (src.tau2?.length) {
    // The user simulator (and an endpoint agent) of each evaluated policy: LLM calls the run paid for.
    for (const t of src.tau2) {
      for (const [role, u] of [['τ² user', t.usage?.user], ['τ² agent', t.usage?.agent]] as const) {
        if (u) data.usage.push({ stage: `eval ${t.label}`, role, calls: u.calls, promptTokens: u.promptTokens, completionTokens: u.completionTokens, costUsd: u.costUsd });
      }
    }
    data.tau2 = src.tau2.map((t) => ({
      policy: t.label,
      version: t.tau2,
      average: t.average,
      domains: Object.fromEntries(Object.entries(t.domains).map(([d, m]) => [d, { tasks: m.tasks, trials: m.trials, reward: m.avg_reward, passHatK: m.pass_hat_k }])),
    }));
  }
  return data;
}

export async function collectReport(store: ObjectStore, runId: string, opts: { stages: StageInfo[]; uiUrl?: string; extraRlRuns?: string[] }): Promise<ReportData> {
  const src = await readSources(store, runId, opts.extraRlRuns ?? []);
  return buildReport(runId, src, { stages: opts.stages, ...(opts.uiUrl ? { uiUrl: opts.uiUrl } : {}) });
}
