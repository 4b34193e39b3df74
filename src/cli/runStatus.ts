/**
 * A run's status (`cm2 status`), read from what outlives workers: Temporal's descriptions of the pipeline and stage
 * workflows, the stages' S3 markers and the RL metrics in S3, so it works with no worker running (queries, which need a
 * worker, only add live progress when one answers within a few seconds).
 */
import { WorkflowNotFoundError, type Client, type WorkflowHandle } from '@temporalio/client';
import { Cm2Config } from '../run/config';
import { type HeldOutSummary, heldOutSummary, readRlRows } from '../report/collect';
import { ifExists, ObjectStore } from '../storage/store';
import { type PipelineInput, type PipelineStatus, pipelineStatusQuery, summarize } from '../stages/pipeline/workflow';
import { type RlResult } from '../stages/rl/workflow';
import { pipelineKeys, pipelineWorkflowId, STAGES, stageWorkflowId } from '../run/layout';
import { StageMarker } from '../stages/pipeline/shapes';
import { type StageProgress } from '../run/workflowShapes';
import { failureText } from './watch';
import { formatProgress } from './stages';
import { stageProgressQuery } from '../run/workflowUtil';
import { formatFailed, formatMeanSe, logprobGapLine } from '../kernel/heldOut';

/** A query answered within `ms` (a closed workflow with no worker never answers), else undefined. */
export async function quickQuery<T>(handle: WorkflowHandle, query: string | { name: string }, ms = 3000): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      handle.query<T>(typeof query === 'string' ? query : query.name),
      new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), ms))),
    ]);
  } catch {
    return undefined;
  } finally {
    clearTimeout(timer);
  }
}

export async function describeWorkflow(client: Client, workflowId: string) {
  try {
    return await client.workflow.getHandle(workflowId).describe();
  } catch (e) {
    if (e instanceof WorkflowNotFoundError) return undefined;
    throw e;
  }
}

export interface StageRow {
  name: string;
  /** completed | running | paused | stopped | failed | pending | disabled | terminated */
  state: string;
  workflowId: string;
  /** Temporal's status of the stage workflow's latest execution, if any. */
  temporalStatus?: string;
  startedAt?: string;
  closedAt?: string;
  seconds?: number;
  summary: Record<string, number | string>;
  progress?: StageProgress;
  error?: string;
}

export interface RunStatus {
  runId: string;
  pipeline: { workflowId: string; status: string; state?: string; startedAt?: string; closedAt?: string } | null;
  stages: StageRow[];
  /**
   * Held-out mean checklist reward of the SFT policy (RL step 0) and of the latest RL policy, each with its standard
   * error across the held-out prompts; `z` = how many standard errors of the difference RL is above SFT; `evals` every
   * evaluation (step, mean, se, n prompts).
   */
  heldOut: HeldOutSummary;
  /** The last RL step's sampler/trainer log-probability gap line (steps recorded since issue 29). */
  logprobGap?: string;
  /** The evaluation stage's BFCL results per policy (label, overall, per category), side by side in the status. */
  bfcl?: Array<{ label: string; overall: BfclAccuracy; categories: Record<string, BfclAccuracy> }>;
  /** τ²-Bench per evaluated policy (the eval stage with `eval.tau2.enabled`): per-domain average reward and pass^k. */
  tau2?: Array<{ label: string; average: number; domains: Record<string, { tasks: number; trials: number; avg_reward: number; pass_hat_k: Record<string, number> }> }>;
  reportKey?: string;
}

interface BfclAccuracy {
  accuracy: number;
  correct: number;
  total: number;
}

/** The BFCL summaries of an evaluation stage's result, if it has any (anything else: none). */
function bfclOf(result: unknown): RunStatus['bfcl'] {
  const rows = (result as { bfcl?: unknown } | undefined)?.bfcl;
  if (!Array.isArray(rows)) return undefined;
  const ok = rows.filter((r): r is NonNullable<RunStatus['bfcl']>[number] => typeof r === 'object' && r !== null && typeof (r as { label?: unknown }).label === 'string' && typeof (r as { categories?: unknown }).categories === 'object');
  return ok.length ? ok : undefined;
}

function tau2Of(result: unknown): RunStatus['tau2'] {
  const rows = (result as { tau2?: unknown } | undefined)?.tau2;
  if (!Array.isArray(rows)) return undefined;
  const ok = rows.filter((r): r is NonNullable<RunStatus['tau2']>[number] => typeof r === 'object' && r !== null && typeof (r as { label?: unknown }).label === 'string' && typeof (r as { domains?: unknown }).domains === 'object' && typeof (r as { average?: unknown }).average === 'number');
  return ok.length ? ok : undefined;
}

/** τ²-Bench side by side (`cm2 status`): per domain the average reward and pass^k (%), then the average of the domains. */
export function tau2Lines(rows: NonNullable<RunStatus['tau2']>): string[] {
  const domains = [...new Set(rows.flatMap((r) => Object.keys(r.domains)))];
  const cell = (r: (typeof rows)[number], d: string) => {
    const m = r.domains[d];
    if (!m) return '–';
    const ks = Object.keys(m.pass_hat_k).map(Number).filter((k) => k > 1).sort((a, b) => a - b);
    return `${(100 * m.avg_reward).toFixed(1)}${ks.length ? ` (pass^${ks.at(-1)} ${(100 * m.pass_hat_k[String(ks.at(-1))]!).toFixed(1)})` : ''} ${m.tasks}×${m.trials}`;
  };
  const table = [['τ²-Bench', ...rows.map((r) => r.label)], ...domains.map((d) => [d, ...rows.map((r) => cell(r, d))]), ['average', ...rows.map((r) => r.average.toFixed(2))]];
  const widths = table[0]!.map((_, i) => Math.max(...table.map((r) => r[i]!.length)));
  return table.map((r) => `  ${r.map((c, i) => c.padEnd(widths[i]!)).join('  ')}`.trimEnd());
}

/**
 * BFCL side by side, one line per category and one column per policy (`cm2 status`); BFCL's multi-turn score (the
 * mean of the multi-turn categories' accuracies) on a line of its own when there are any.
 */
export function bfclLines(rows: NonNullable<RunStatus['bfcl']>): string[] {
  const categories = [...new Set(rows.flatMap((r) => Object.keys(r.categories)))];
  const multi = categories.filter((c) => c.startsWith('multi_turn_'));
  const pct = (a: BfclAccuracy | undefined) => (a ? `${(100 * a.accuracy).toFixed(1)}% ${a.correct}/${a.total}` : '–');
  const mean = (r: (typeof rows)[number]) => {
    const parts = multi.map((c) => r.categories[c]).filter((a): a is BfclAccuracy => a !== undefined);
    return parts.length ? `${((100 * parts.reduce((n, a) => n + a.accuracy, 0)) / parts.length).toFixed(1)}%` : '–';
  };
  const table = [['BFCL', ...rows.map((r) => r.label)], ...categories.map((c) => [c, ...rows.map((r) => pct(r.categories[c]))])];
  if (multi.length) table.push(['multi-turn (mean)', ...rows.map(mean)]);
  table.push(['overall', ...rows.map((r) => pct(r.overall))]);
  const widths = table[0]!.map((_, i) => Math.max(...table.map((r) => r[i]!.length)));
  return table.map((r) => `  ${r.map((c, i) => c.padEnd(widths[i]!)).join('  ')}`.trimEnd());
}

export const iso = (d: Date | undefined) => (d ? d.toISOString() : undefined);

/** The state of a run and of each stage, from Temporal and S3 (no worker needed). */
export async function runStatus(client: Client, store: ObjectStore, runId: string): Promise<RunStatus> {
  const input = await ifExists(() => store.getJson<PipelineInput>(pipelineKeys.input(runId)));
  const pipe = await describeWorkflow(client, pipelineWorkflowId(runId));
  const live = pipe?.status.name === 'RUNNING' ? await quickQuery<PipelineStatus>(client.workflow.getHandle(pipelineWorkflowId(runId)), pipelineStatusQuery) : undefined;
  const stages: StageRow[] = [];
  let bfcl: RunStatus['bfcl'];
  let tau2: RunStatus['tau2'];
  for (const name of STAGES) {
    const workflowId = stageWorkflowId(runId, name);
    const row: StageRow = { name, state: 'pending', workflowId, summary: {} };
    const enabled = input ? input.stages[name] !== undefined : true;
    const marker = await ifExists(() => store.getJson(pipelineKeys.marker(runId, name), StageMarker));
    const d = await describeWorkflow(client, workflowId);
    if (d) {
      row.temporalStatus = d.status.name;
      row.startedAt = iso(d.startTime);
      row.closedAt = iso(d.closeTime);
    }
    if (marker) {
      row.state = 'completed';
      row.summary = summarize(name, marker.result);
      if (name === 'eval') {
        bfcl = bfclOf(marker.result);
        tau2 = tau2Of(marker.result);
      }
      row.startedAt = new Date(marker.startedAt).toISOString();
      row.closedAt = new Date(marker.closedAt).toISOString();
      row.seconds = (marker.closedAt - marker.startedAt) / 1000;
    } else if (d) {
      const s = d.status.name;
      const state = d.typedSearchAttributes.get({ name: 'Cm2State', type: 'KEYWORD' } as never) as string | undefined;
      if (s === 'RUNNING') {
        row.state = state === 'paused' ? 'paused' : 'running';
        row.progress = await quickQuery<StageProgress>(client.workflow.getHandle(workflowId), stageProgressQuery);
      } else if (s === 'COMPLETED') {
        const result = await client.workflow.getHandle(workflowId).result().catch(() => undefined);
        row.summary = summarize(name, result);
        if (name === 'eval') {
          bfcl = bfclOf(result);
          tau2 = tau2Of(result);
        }
        row.state = name === 'rl' && (result as RlResult | undefined)?.stopped ? 'stopped' : 'completed';
      } else if (s === 'FAILED' || s === 'TIMED_OUT') row.state = 'failed';
      else if (s === 'TERMINATED' || s === 'CANCELLED') row.state = 'stopped';
      else row.state = s.toLowerCase();
      if (d.startTime && (d.closeTime || s === 'RUNNING')) row.seconds = ((d.closeTime ?? new Date()).getTime() - d.startTime.getTime()) / 1000;
      const liveStage = live?.stages.find((x) => x.name === name);
      if (liveStage?.error) row.error = liveStage.error;
    } else if (!enabled) row.state = 'disabled';
    if (row.state === 'failed' && !row.error && d) {
      try {
        await client.workflow.getHandle(workflowId).result();
      } catch (e) {
        row.error = failureText(e);
      }
    }
    stages.push(row);
  }
  const rlRows = await readRlRows(store, runId);
  const heldOut = heldOutSummary(rlRows);
  const lastStep = rlRows.filter((r) => r.kind === 'step').at(-1);
  const gap = lastStep ? logprobGapLine(lastStep as Record<string, unknown>) : undefined;
  const reportExists = await store.exists(pipelineKeys.reportHtml(runId));
  return {
    runId,
    pipeline: pipe
      ? {
          workflowId: pipe.workflowId,
          status: pipe.status.name,
          ...(live?.state ? { state: live.state } : {}),
          ...(iso(pipe.startTime) ? { startedAt: iso(pipe.startTime)! } : {}),
          ...(iso(pipe.closeTime) ? { closedAt: iso(pipe.closeTime)! } : {}),
        }
      : null,
    stages,
    heldOut,
    ...(gap ? { logprobGap: `RL step ${lastStep!.step}: ${gap}` } : {}),
    ...(bfcl ? { bfcl } : {}),
    ...(tau2 ? { tau2 } : {}),
    ...(reportExists ? { reportKey: pipelineKeys.reportHtml(runId) } : {}),
  };
}

export const fmtSeconds = (s?: number) => (s === undefined ? '' : s < 120 ? `${s.toFixed(0)}s` : s < 7200 ? `${(s / 60).toFixed(1)}m` : `${(s / 3600).toFixed(1)}h`);
export const fmtValue = (v: number | string) => (typeof v === 'number' && !Number.isInteger(v) ? v.toFixed(4) : String(v));

export function formatStatus(s: RunStatus, cfg: Cm2Config): string {
  const lines: string[] = [];
  lines.push(`run ${s.runId}: ${s.pipeline ? `${s.pipeline.status.toLowerCase()}${s.pipeline.state && s.pipeline.state !== s.pipeline.status.toLowerCase() ? ` (${s.pipeline.state})` : ''}` : 'no pipeline workflow (stages run one by one?)'}`);
  const table = [['STAGE', 'STATE', 'TIME', 'DETAIL']];
  for (const st of s.stages) {
    const detail = st.progress
      ? formatProgress(st.progress).replace(/^\[[^\]]+\]\s*/, '')
      : Object.entries(st.summary).filter(([k]) => !/Key$|policy/.test(k)).map(([k, v]) => `${k}=${fmtValue(v)}`).join(' ');
    table.push([st.name, st.state, fmtSeconds(st.seconds), (st.error ? `ERROR: ${st.error} ` : '') + detail]);
  }
  const widths = [0, 1, 2].map((i) => Math.max(...table.map((r) => r[i]!.length)));
  for (const r of table) lines.push(`  ${r.slice(0, 3).map((c, i) => c.padEnd(widths[i]!)).join('  ')}  ${r[3]}`);
  const h = s.heldOut;
  if (h.sft !== null || h.rl !== null) lines.push(heldOutLine(h));
  if (s.logprobGap) lines.push(s.logprobGap);
  if (s.bfcl) lines.push(...bfclLines(s.bfcl));
  if (s.tau2) lines.push(...tau2Lines(s.tau2));
  lines.push(`Web UI: ${cfg.temporal.uiUrl}/namespaces/${cfg.temporal.namespace}/workflows?query=${encodeURIComponent(`Cm2RunId="${s.runId}"`)}`);
  if (s.reportKey) lines.push(`report: s3://${cfg.s3.bucket}/${s.reportKey}  (\`cm2 report ${s.runId}\` writes it locally)`);
  return lines.join('\n');
}

/**
 * `held-out mean checklist reward: SFT 0.0500 ± 0.0100 → RL 0.1000 ± 0.0150 [3 of 32 rollouts failed, scored 0] (step
 * 10; …)`: failed rollouts count as 0 in a mean, so each mean carries its count of them when some failed.
 */
export function heldOutLine(h: {
  sft?: number | null; sftSe?: number | null; rl?: number | null; rlSe?: number | null; rlStep?: number | null; prompts?: number | null;
  sftFailed?: number | null; sftRollouts?: number | null; rlFailed?: number | null; rlRollouts?: number | null;
}): string {
  const detail: string[] = [];
  if (h.rlStep !== undefined && h.rlStep !== null) detail.push(`step ${h.rlStep}`);
  const anySe = (h.sftSe ?? null) !== null || (h.rlSe ?? null) !== null;
  if (anySe) detail.push(`${h.prompts ? `${h.prompts} prompts, ` : ''}± one standard error`);
  if (typeof h.sft === 'number' && typeof h.rl === 'number' && typeof h.sftSe === 'number' && typeof h.rlSe === 'number' && h.sftSe ** 2 + h.rlSe ** 2 > 0) {
    const z = (h.rl - h.sft) / Math.sqrt(h.sftSe ** 2 + h.rlSe ** 2);
    detail.push(`difference ${z >= 0 ? '+' : ''}${z.toFixed(1)} standard errors`);
  }
  const sft = `${formatMeanSe(h.sft, h.sftSe)}${formatFailed(h.sftFailed, h.sftRollouts)}`;
  const rl = `${formatMeanSe(h.rl, h.rlSe)}${formatFailed(h.rlFailed, h.rlRollouts)}`;
  return `held-out mean checklist reward: SFT ${sft} → RL ${rl}${detail.length ? ` (${detail.join('; ')})` : ''}`;
}
