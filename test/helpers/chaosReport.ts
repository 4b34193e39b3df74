/**
 * What the chaos drill (test/helpers/chaos.ts) leaves behind so that every failure explains itself: a folder under
 * `$CM2_CHAOS_REPORT_DIR` (default ~/.cache/cm2/chaos-reports, outside the clone, so a CI run's survives) named
 * `<seed>-<timestamp>`, holding
 *   report.md     the checks that failed, the seed, the schedule drawn and the events as they happened (with the
 *                 run's progress and the activities in flight at each), the first RL step whose weights differ,
 *                 the stage results that differ, the pipeline's failure and failed activities, what was paid twice;
 *   report.json   the same, for tools;
 *   events.log    the events, written as they happen (there even when the test runner kills the drill);
 *   progress.log  each change of the run's progress (stage, RL step, phase), with its time;
 *   history.log   the Temporal histories of the chaos run (pipeline and stages, every continue-as-new run);
 *   workers/      each worker process's stdout and stderr, one file per process; temporal.log, minio.log.
 */
import { appendFileSync, copyFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import type { Client } from '@temporalio/client';
import { runLogLines } from '../../src/cli/logsCommand';
import { failureText } from '../../src/cli/watch';
import { pipelineWorkflowId, STAGES, stageWorkflowId } from '../../src/run/layout';

/** The folder of one drill's report (created). */
export function chaosReportDir(seed: number, parent = process.env['CM2_CHAOS_REPORT_DIR'] ?? path.join(homedir(), '.cache', 'cm2', 'chaos-reports')): string {
  const dir = path.join(parent, `${seed}-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  mkdirSync(path.join(dir, 'workers'), { recursive: true });
  return dir;
}

export const appendLine = (file: string, line: string): void => {
  try {
    appendFileSync(file, `${line}\n`);
  } catch {
    // A report that cannot be written never fails the drill.
  }
};

export function copyIfThere(from: string, to: string): void {
  try {
    if (existsSync(from)) copyFileSync(from, to);
  } catch {
    // as above
  }
}

/** The first RL step whose weights differ between the runs (or a step missing from one), or undefined. */
export function firstDivergence(reference: unknown[], chaos: unknown[]): string | undefined {
  const n = Math.max(reference.length, chaos.length);
  for (let i = 0; i < n; i++) {
    const [a, b] = [reference[i] as [number, string] | undefined, chaos[i] as [number, string] | undefined];
    if (!isDeepStrictEqual(a, b)) {
      if (!b) return `the chaos run has no row for step ${a?.[0]} (it recorded ${chaos.length} steps, the undisturbed run ${reference.length})`;
      if (!a) return `the chaos run has a step ${b[0]} the undisturbed run lacks`;
      return `step ${b[0]}${a[0] !== b[0] ? ` (undisturbed row ${i}: step ${a[0]})` : ''}: weights ${String(b[1]).slice(0, 16)}… under chaos, ${String(a[1]).slice(0, 16)}… undisturbed`;
    }
  }
  return undefined;
}

/** Lines "stage.key: undisturbed → chaos" for every stage result that differs. */
export function stagesDiff(reference: unknown, chaos: unknown): string[] {
  type S = { name: string; state: string; summary: Record<string, unknown> };
  const a = (reference ?? []) as S[];
  const b = (chaos ?? []) as S[];
  const out: string[] = [];
  for (const name of new Set([...a, ...b].map((s) => s.name))) {
    const x = a.find((s) => s.name === name);
    const y = b.find((s) => s.name === name);
    if (!x || !y) {
      out.push(`${name}: ${x ? 'missing under chaos' : 'missing undisturbed'}`);
      continue;
    }
    if (x.state !== y.state) out.push(`${name}.state: ${x.state} → ${y.state}`);
    for (const k of new Set([...Object.keys(x.summary), ...Object.keys(y.summary)])) {
      if (!isDeepStrictEqual(x.summary[k], y.summary[k])) out.push(`${name}.${k}: ${JSON.stringify(x.summary[k])} → ${JSON.stringify(y.summary[k])}`);
    }
  }
  return out;
}

export interface RunHistory {
  /** Every history line of the run (pipeline, stages, every continue-as-new execution). */
  lines: string[];
  /** Failures, timeouts, retries and failed workflow tasks among them. */
  trouble: string[];
  /** The pipeline's status and failure, and each open workflow's pending activities (attempt, last failure). */
  now: string[];
}

/** The chaos run as Temporal recorded it (best effort: a server that does not answer gives what it gave). */
export async function runHistory(client: Client, runId: string, began: number): Promise<RunHistory> {
  const rel = (t: number) => `${((t - began) / 1000).toFixed(1)}s`;
  const out: RunHistory = { lines: [], trouble: [], now: [] };
  try {
    for (const l of await runLogLines(client, runId)) {
      const line = `${rel(l.time)} ${l.source.padEnd(9)} ${l.text}`;
      out.lines.push(line);
      if (/FAILED|timed out|attempt \d|workflow task failed|terminated|cancelled/.test(l.text)) out.trouble.push(line);
    }
  } catch (e) {
    out.now.push(`history not available: ${(e as Error).message}`);
  }
  for (const id of [pipelineWorkflowId(runId), ...STAGES.map((s) => stageWorkflowId(runId, s))]) {
    try {
      const d = await client.workflow.getHandle(id).describe();
      const raw = d.raw.workflowExecutionInfo;
      out.now.push(`${id}: ${d.status.name}${d.closeTime ? ` (closed at ${rel(d.closeTime.getTime())})` : ''}, ${String(raw?.historyLength ?? '?')} events`);
      if (d.status.name === 'FAILED') {
        const ev = (await client.workflow.getHandle(id).fetchHistory()).events ?? [];
        const failed = ev.find((e) => e.workflowExecutionFailedEventAttributes)?.workflowExecutionFailedEventAttributes;
        if (failed) out.now.push(`  failure: ${failureText(failed.failure)}`);
      }
      for (const p of d.raw.pendingActivities ?? []) {
        out.now.push(`  pending ${p.activityType?.name ?? '?'} (${String(p.state)}), attempt ${p.attempt ?? 1}${p.lastFailure ? `, last failure: ${failureText(p.lastFailure)}` : ''}${p.lastWorkerIdentity ? `, last worker ${p.lastWorkerIdentity}` : ''}`);
      }
      for (const c of d.raw.pendingChildren ?? []) out.now.push(`  pending child ${c.workflowId ?? '?'}`);
    } catch (e) {
      if (!/not found/i.test((e as Error).message)) out.now.push(`${id}: not described (${(e as Error).message})`);
    }
  }
  return out;
}

export interface ReportBody {
  seed: number;
  steps: number;
  dir: string;
  failures: string[];
  error?: string;
  schedule: string[];
  events: string[];
  undisturbedSeconds?: number;
  /** Where the undisturbed run came from when it is not this drill's own (a series: bench/chaos-series.ts). */
  referenceFrom?: string;
  chaosSeconds?: number;
  kills: Record<'workflows' | 'api' | 'gpu', number>;
  temporalRestarts: number;
  minioRestarts: number;
  weightsDivergence?: string;
  stagesDiff: string[];
  history?: RunHistory;
  referenceHistory?: RunHistory;
  paidTwice: string[];
  answered: number;
  workerLogs: string[];
}

const section = (title: string, lines: string[], empty = '(none)') => `## ${title}\n\n${lines.length ? lines.map((l) => `    ${l}`).join('\n') : empty}\n`;

/** Writes report.md, report.json and history.log; returns the text of report.md. */
export function writeReport(r: ReportBody): string {
  const kills = Object.entries(r.kills).map(([q, n]) => `${q} ${n}`).join(', ');
  const md = [
    `# Chaos drill, seed ${r.seed}: ${r.failures.length ? 'FAILED' : 'passed'}\n`,
    `CM2_CHAOS_SEED=${r.seed} replays the schedule. ${r.steps} RL steps. Undisturbed run ${r.undisturbedSeconds?.toFixed(0) ?? '?'} s${r.referenceFrom ? ` (${r.referenceFrom})` : ''}, under chaos ${r.chaosSeconds?.toFixed(0) ?? '?'} s; worker kills: ${kills}; Temporal restarted ${r.temporalRestarts}×, MinIO ${r.minioRestarts}×. Folder: ${r.dir}\n`,
    section('Failed checks', r.failures),
    r.error ? section('The drill threw', r.error.split('\n')) : '',
    section('Events (seconds since the chaos run began, [the run\'s progress then], activities in flight)', r.events),
    section('Schedule drawn from the seed', r.schedule),
    section('First RL step whose weights differ', r.weightsDivergence ? [r.weightsDivergence] : []),
    section('Stage results that differ (undisturbed → chaos)', r.stagesDiff),
    section('Workflows now (chaos run)', r.history?.now ?? ['(not collected)']),
    section('Failures, timeouts and retries in the chaos run\'s history', r.history?.trouble ?? ['(not collected)']),
    r.referenceHistory?.trouble.length ? section('… and in the undisturbed run\'s', r.referenceHistory.trouble) : '',
    section(`LLM requests paid more often than undisturbed (of ${r.answered})`, r.paidTwice),
    section('Worker logs', r.workerLogs),
  ].filter(Boolean).join('\n');
  try {
    writeFileSync(path.join(r.dir, 'report.md'), md);
    writeFileSync(path.join(r.dir, 'report.json'), JSON.stringify({ ...r, undisturbed: undefined, history: r.history && { trouble: r.history.trouble, now: r.history.now } }, null, 2));
    if (r.history) writeFileSync(path.join(r.dir, 'history.log'), r.history.lines.join('\n'));
    if (r.referenceHistory) writeFileSync(path.join(r.dir, 'history-undisturbed.log'), r.referenceHistory.lines.join('\n'));
  } catch {
    // A report that cannot be written never fails the drill (the text is printed as well).
  }
  return md;
}

/** The report in a few lines, for a drill that passed. */
export const compactReport = (r: ReportBody): string =>
  `chaos seed ${r.seed}: ${r.failures.length ? `FAILED (${r.failures.join('; ')})` : 'passed'}; undisturbed ${r.undisturbedSeconds?.toFixed(0) ?? '?'} s, under chaos ${r.chaosSeconds?.toFixed(0) ?? '?'} s; events: ${r.events.join('; ')}; report ${path.join(r.dir, 'report.md')}`;
