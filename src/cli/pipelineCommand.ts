/**
 * `cm2 run | resume | status | pause | unpause | stop | logs | report`: whole CM2 runs (the `cm2Pipeline` workflow).
 *
 * Status is read from what outlives workers: Temporal's descriptions of the pipeline and stage workflows, the
 * stages' S3 markers and the RL metrics in S3, so `cm2 status` works with no worker running (queries, which need a
 * worker, only add live progress when one answers within a few seconds).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { type Client, type WorkflowHandle } from '@temporalio/client';
import { projectRoot } from '../infra/binaries';
import type { Cm2Config } from '../run/config';
import { ifExists, ObjectStore } from '../storage/store';
import { pipelineKeys, stageWorkflowId } from '../run/layout';
import { connectClient, InfraNotRunningError } from '../infra/temporal';
import { collectReport, type StageInfo } from '../report/collect';
import { renderReport } from '../report/html';
import { pipelineStatusQuery, type PipelineInput, type PipelineResult, type PipelineStatus } from '../stages/pipeline/workflow';
import { pauseSignal, resumeSignal, stopSignal } from '../run/control';
import type { StageProgress } from '../run/workflowShapes';
import { stageProgressQuery } from '../run/workflowUtil';
import { crashFault, displayFault } from './faults';
import { formatProgress, pipelineInput, pipelineWorkflowId, resultOf, sleep, startPipeline } from './stages';
import { failureText, rootCauseText, RunWatch, withHeartbeatCount } from './watch';
import { describeWorkflow, fmtSeconds, fmtValue, formatStatus, heldOutLine, iso, quickQuery, runStatus } from './runStatus';
import { formatFailed } from '../kernel/heldOut';

/** Temporal client and S3 store, with a clear message when either server is not running. */
export async function connect(cfg: Cm2Config): Promise<{ client: Client; store: ObjectStore }> {
  const client = await connectClient(cfg);
  const store = ObjectStore.fromConfig(cfg.s3);
  try {
    await store.ensureBucket();
  } catch (e) {
    const code = (e as { code?: string }).code ?? '';
    if (/ECONNREFUSED|ENOTFOUND|ECONNRESET|ETIMEDOUT/.test(code + String((e as Error).message))) throw new InfraNotRunningError('the S3 server (MinIO)', cfg.s3.endpoint, e);
    throw e;
  }
  return { client, store };
}

export interface FollowOptions {
  /** Where lines go: `permanent` ones stay, the others replace each other on a terminal. Default: stdout. */
  print?: (line: string, permanent: boolean) => void;
  /** The workflows task queue: named in the line when the run does not answer and nobody polls that queue. */
  workflowQueue?: string;
  /** Stops following (the run goes on): the returned promise rejects with an AbortError. */
  signal?: AbortSignal;
  intervalMs?: number;
}

/**
 * Follows a pipeline to its end: a progress line of the current stage (with the running activity's heartbeat, its
 * retries, and work waiting for a worker that nobody runs), a line per finished stage. Display and polling errors are
 * caught and reported once; they never end the follow or touch the run. A lost connection to Temporal is waited out.
 */
export async function followPipeline(client: Client, handle: WorkflowHandle, opts: FollowOptions = {}): Promise<PipelineResult> {
  const print = guardedPrint(opts.print ?? linePrinter());
  const watch = new RunWatch(client.workflow);
  let finished = false;
  const seen = new Map<string, string>();
  let last = '';
  let lastStage: string | undefined;
  const shownNotes = new Set<string>();
  const stageLines = (st: PipelineStatus) => {
    for (const s of st.stages ?? []) {
      if (seen.get(s.name) === s.state) continue;
      seen.set(s.name, s.state);
      if (s.state === 'completed' || s.state === 'skipped' || s.state === 'failed' || s.state === 'stopped') {
        const summary = Object.entries(s.summary ?? {}).filter(([k]) => !/Key$|policy/.test(k)).map(([k, v]) => `${k}=${fmtValue(v)}`).join(' ');
        const secs = s.startedAt !== undefined && s.closedAt !== undefined ? ` in ${fmtSeconds((s.closedAt - s.startedAt) / 1000)}` : '';
        print(`✓ ${s.name} ${s.state}${s.state === 'skipped' ? ' (finished earlier)' : secs}${summary ? `: ${summary}` : ''}${s.error ? ` — ${s.error}` : ''}`, true);
      }
    }
  };
  const show = (line: string, notes: readonly string[]) => {
    if (finished) return;
    // A new kind of note (retry, no worker) also gets a line of its own: a terminal's progress line may cut it off.
    for (const n of notes) {
      const key = n.replace(/\d+/g, '#');
      if (!shownNotes.has(key)) {
        shownNotes.add(key);
        print(`! ${n}`, true);
      }
    }
    if (line !== last) print(line, false);
    last = line;
  };
  const tick = async () => {
    const st = await quickQuery<PipelineStatus>(handle, pipelineStatusQuery, 2000);
    if (finished) return;
    if (!st) {
      // No answer: no workflow worker, or a busy one. Say which when Temporal knows nobody polls the queue.
      const note = opts.workflowQueue ? await watch.workflowQueue(opts.workflowQueue) : undefined;
      if (note) show(`[${lastStage ?? 'run'}] waiting: ${note}`, [note]);
      return;
    }
    try {
      stageLines(st);
      displayFault();
      // A stage whose line is printed (completed, failed) gets no more progress lines.
      const current = st.current && st.stages?.find((s) => s.name === st.current)?.state === 'running' ? st.current : undefined;
      lastStage = current ?? lastStage;
      const target = current ? stageWorkflowId(st.runId, current) : handle.workflowId;
      const p = current ? await quickQuery<StageProgress>(client.workflow.getHandle(target), stageProgressQuery, 2000) : undefined;
      const look = await watch.look(target);
      if (!current && look.notes.length === 0) return;
      const head = current ? (p ? formatProgress(withHeartbeatCount(p, look.details)) : `[${current}] starting`) : `[run] ${st.state}`;
      show(`${head}${look.heartbeat ? `  ${look.heartbeat}` : ''}${look.notes.length ? `  ! ${look.notes.join('; ')}` : ''}${st.paused ? '  PAUSED' : ''}`, look.notes);
    } finally {
      crashFault(st.stages);
    }
  };
  const errors = new Set<string>();
  const poll = (async () => {
    while (!finished) {
      try {
        await tick();
      } catch (e) {
        // A display or polling error: say so (once per kind), keep following with what still works.
        const msg = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
        if (!errors.has(msg.replace(/\d+/g, '#')) && errors.size < 5) {
          errors.add(msg.replace(/\d+/g, '#'));
          print(`(progress display failed: ${msg}; the run is not affected)`, true);
        }
      }
      await sleep(opts.intervalMs ?? 1000, opts.signal);
    }
  })();
  try {
    const result = await resultOf<PipelineResult>(handle, { signal: opts.signal, note: (l) => print(l, true) });
    finished = true;
    await poll;
    try {
      stageLines(result);
    } catch {
      /* display only */
    }
    return result;
  } finally {
    finished = true;
    await poll;
  }
}

/** A printer that never throws (a closed stdout, a bad line): display errors must not end anything. */
export function guardedPrint(print: (line: string, permanent: boolean) => void): (line: string, permanent: boolean) => void {
  return (line, permanent) => {
    try {
      print(line, permanent);
    } catch {
      /* nothing to do: the display is best effort */
    }
  };
}

/** Lines to stdout: on a terminal the transient ones overwrite each other, permanent ones stay above them. */
export function linePrinter(): (line: string, permanent: boolean) => void {
  let transient = false;
  return (line, permanent) => {
    if (!process.stdout.isTTY) return console.log(line);
    const cols = (process.stdout.columns || 120) - 1;
    if (permanent) {
      process.stdout.write(`${transient ? '\r' + ' '.repeat(cols) + '\r' : ''}${line}\n`);
      transient = false;
    } else {
      process.stdout.write(`\r${line.slice(0, cols).padEnd(cols)}`);
      transient = true;
    }
  };
}

/** Starts (or attaches to) a run's pipeline and records its input in S3 for `cm2 resume`. */
export async function startRun(client: Client, store: ObjectStore, cfg: Cm2Config, input: PipelineInput = pipelineInput(cfg)): Promise<WorkflowHandle> {
  await store.putJson(pipelineKeys.input(input.runId), input);
  return startPipeline(client, cfg, input);
}

/** `held-out mean checklist reward: SFT 0.0559 ± 0.0121 → RL 0.0998 ± 0.0150 (step 24; 32 prompts, ± one standard error; +2.3 SE)`. */
export function printRunEnd(result: PipelineResult, cfg: Cm2Config): void {
  const h = result.heldOut ?? {};
  console.log(`run ${result.runId}: ${result.state}`);
  if (h.sft !== undefined || h.rl !== undefined) console.log(heldOutLine(h));
  if (result.reportKey) console.log(`report in S3: s3://${cfg.s3.bucket}/${result.reportKey}`);
}

export async function runCommand(cfg: Cm2Config, wait: boolean): Promise<void> {
  const { client, store } = await connect(cfg);
  const handle = await startRun(client, store, cfg);
  console.log(`run ${cfg.run.id}: workflow ${handle.workflowId}`);
  console.log(`Web UI: ${cfg.temporal.uiUrl}/namespaces/${cfg.temporal.namespace}/workflows/${handle.workflowId}`);
  if (!wait) return;
  await finish(client, store, cfg, cfg.run.id, handle);
}

/** Follows a run to its end, prints its outcome and writes the local report; a failed run sets exit code 1. */
export async function finish(client: Client, store: ObjectStore, cfg: Cm2Config, runId: string, handle: WorkflowHandle): Promise<PipelineResult | undefined> {
  let result: PipelineResult | undefined;
  try {
    result = await followPipeline(client, handle, { workflowQueue: cfg.temporal.taskQueues.workflows });
    printRunEnd(result, cfg);
  } catch (e) {
    const root = rootCauseText(e);
    console.error(`run ${runId} failed: ${failureText(e)}${root && !failureText(e).includes(root) ? `\n  cause: ${root}` : ''}`);
    console.error(`details: \`cm2 logs ${runId}\` or the Web UI; after fixing the cause: \`cm2 resume ${runId}\``);
    process.exitCode = 1;
  }
  console.log(`report: ${await writeLocalReport(client, store, cfg, runId)}`);
  return result;
}

/** Starts a stopped, failed or terminated run again from its recorded input (finished stages are skipped). */
export async function resumeCommand(cfg: Cm2Config, runId: string, wait: boolean): Promise<void> {
  const { client, store } = await connect(cfg);
  const input = await ifExists(() => store.getJson<PipelineInput>(pipelineKeys.input(runId)));
  if (!input) throw new InfraNotRunningError(`the recorded input of run "${runId}" (s3://${cfg.s3.bucket}/${pipelineKeys.input(runId)})`, cfg.s3.endpoint, new Error('not found: start it with `cm2 run --config FILE --run ' + runId + '`'));
  const before = await describeWorkflow(client, pipelineWorkflowId(runId));
  const handle = await startPipeline(client, cfg, input);
  console.log(before?.status.name === 'RUNNING' ? `run ${runId} is running: following it` : `run ${runId} resumed (finished stages are skipped)`);
  if (!wait) return;
  await finish(client, store, cfg, runId, handle);
}

export async function statusCommand(cfg: Cm2Config, runId: string | undefined, json: boolean): Promise<void> {
  const { client, store } = await connect(cfg);
  if (runId) {
    const s = await runStatus(client, store, runId);
    console.log(json ? JSON.stringify(s, null, 2) : formatStatus(s, cfg));
    return;
  }
  const runs = new Map<string, { runId: string; status: string; state?: string; startedAt?: string; closedAt?: string; heldOut?: string }>();
  for await (const w of client.workflow.list({ query: `Cm2Stage = "pipeline"` })) {
    const id = w.workflowId.replace(/^cm2-/, '');
    if (runs.has(id)) continue; // newest first
    const state = w.typedSearchAttributes.get({ name: 'Cm2State', type: 'KEYWORD' } as never) as string | undefined;
    const held = heldOutOfMemo(w.memo);
    runs.set(id, { runId: id, status: w.status.name, ...(state ? { state } : {}), ...(iso(w.startTime) ? { startedAt: iso(w.startTime)! } : {}), ...(iso(w.closeTime) ? { closedAt: iso(w.closeTime)! } : {}), ...(held ? { heldOut: held } : {}) });
    if (runs.size >= 50) break;
  }
  if (json) {
    const full = [];
    for (const r of runs.values()) full.push(await runStatus(client, store, r.runId));
    console.log(JSON.stringify(full, null, 2));
    return;
  }
  if (runs.size === 0) {
    console.log('no runs yet: `cm2 run --config config/demo.yaml` starts one');
    return;
  }
  const table = [['RUN', 'STATUS', 'STATE', 'STARTED', 'TIME', 'HELD-OUT SFT → RL']];
  for (const r of runs.values()) {
    const secs = r.startedAt ? ((r.closedAt ? Date.parse(r.closedAt) : Date.now()) - Date.parse(r.startedAt)) / 1000 : undefined;
    table.push([r.runId, r.status.toLowerCase(), r.state ?? '', r.startedAt?.replace('T', ' ').slice(0, 19) ?? '', fmtSeconds(secs), r.heldOut ?? '']);
  }
  const widths = table[0]!.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
  for (const row of table) console.log(row.map((c, i) => c.padEnd(widths[i]!)).join('  '));
}

/**
 * `0.4943 → 0.8302` from a pipeline's memo (written since the patch `pipeline-heldout-memo`), with a mean's failed
 * rollouts when some failed (`0.4943 → 0.8302 [3 of 24 rollouts failed, scored 0]`); '' when absent.
 */
export function heldOutOfMemo(memo: Record<string, unknown> | undefined): string {
  const h = memo?.['heldOut'] as Record<string, unknown> | undefined;
  const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
  const f = (v: unknown) => num(v)?.toFixed(4) ?? '–';
  return h && typeof h === 'object'
    ? `${f(h['sft'])}${formatFailed(num(h['sftFailed']), num(h['sftRollouts']))} → ${f(h['rl'])}${formatFailed(num(h['rlFailed']), num(h['rlRollouts']))}`
    : '';
}

export async function controlCommand(cfg: Cm2Config, runId: string, action: 'pause' | 'unpause' | 'stop'): Promise<void> {
  const { client } = await connect(cfg);
  const signal = action === 'pause' ? pauseSignal : action === 'unpause' ? resumeSignal : stopSignal;
  const d = await describeWorkflow(client, pipelineWorkflowId(runId));
  if (!d || d.status.name !== 'RUNNING') {
    // A run started stage by stage (`cm2 rl run`, a study's pieces) has no pipeline workflow: its RL workflow takes the
    // same signals.
    const rlId = stageWorkflowId(runId, 'rl');
    const rl = d ? undefined : await describeWorkflow(client, rlId);
    if (rl?.status.name === 'RUNNING') {
      await client.workflow.getHandle(rlId).signal(signal);
      console.log(`run ${runId} (no pipeline workflow): ${action === 'pause' ? 'pause requested; its RL workflow pauses between steps' : action === 'unpause' ? 'its RL workflow runs again' : 'stop requested; its RL workflow stops after the step in flight'}`);
      return;
    }
    console.error(`run ${runId} is not running${d ? ` (${d.status.name.toLowerCase()})` : ''}${action !== 'unpause' ? '' : `; \`cm2 resume ${runId}\` starts it again`}`);
    process.exitCode = 1;
    return;
  }
  const handle = client.workflow.getHandle(pipelineWorkflowId(runId));
  await handle.signal(signal);
  console.log(
    action === 'pause'
      ? `run ${runId}: pause requested (RL pauses between steps; other stages finish their current work, the next stage waits)`
      : action === 'unpause'
        ? `run ${runId}: running again`
        : `run ${runId}: stop requested (RL stops after the step in flight; \`cm2 resume ${runId}\` continues later)`,
  );
}

/** Writes the HTML report of a run under .cm2/reports/<run>/ (or `out`) and returns its path. */
export async function writeLocalReport(client: Client, store: ObjectStore, cfg: Cm2Config, runId: string, opts: { out?: string; compare?: string[] } = {}): Promise<string> {
  const status = await runStatus(client, store, runId);
  const stages: StageInfo[] = status.stages.filter((s) => s.state !== 'disabled').map((s) => ({
    name: s.name,
    state: s.state,
    workflowId: s.workflowId,
    ...(s.seconds !== undefined ? { seconds: s.seconds } : {}),
    ...(s.error ? { detail: s.error } : {}),
  }));
  const uiUrl = `${cfg.temporal.uiUrl}/namespaces/${cfg.temporal.namespace}/workflows?query=${encodeURIComponent(`Cm2RunId="${runId}"`)}`;
  const data = await collectReport(store, runId, { stages, uiUrl, extraRlRuns: opts.compare ?? [] });
  const out = opts.out ?? path.join(projectRoot, '.cm2', 'reports', runId, 'report.html');
  mkdirSync(path.dirname(out), { recursive: true });
  writeFileSync(out, renderReport(data));
  writeFileSync(out.replace(/\.html?$/, '') + '.json', JSON.stringify(data, null, 2));
  return out;
}

export async function reportCommand(cfg: Cm2Config, runId: string, opts: { out?: string; compare?: string[] }): Promise<void> {
  const { client, store } = await connect(cfg);
  console.log(await writeLocalReport(client, store, cfg, runId, opts));
}
