/**
 * Starting stage workflows from a config and following their progress: shared by `cm2 prepare`,
 * `cm2 demo` and the tests.
 */
import { demoWorld } from '../demo/world';
import { isGrpcServiceError, ServiceError, WorkflowFailedError, WorkflowIdConflictPolicy, type Client, type WorkflowHandle, type WorkflowStartOptions } from '@temporalio/client';
import { WorkflowNotFoundError } from '@temporalio/common';
import type { Workflow } from '@temporalio/common';
import { ConfigError, REFERENCE_CASCADE, type Cm2Config } from '../run/config';
import { isOnline } from '../llm/llmConfig';
import { executableToolNames, toolAnswerIssues } from '../stages/rl/env/answers';
import { connectClient } from '../infra/temporal';
import type { PrepareReport } from '../stages/prepare/shapes';
import type { ChecklistReport } from '../stages/checklist/shapes';
import { checklistKeys, pipelineWorkflowId, prepareKeys, sftKeys, stageWorkflowId } from '../run/layout';
import { checklistWorkflow, cm2Pipeline, prepareProgressQuery, prepareWorkflow, rlWorkflow, sftWorkflow } from '../workflows';
import type { PipelineInput } from '../stages/pipeline/workflow';
import type { RlResult, RlWorkflowInput } from '../stages/rl/workflow';
import type { ChecklistWorkflowInput, PrepareWorkflowInput, SftWorkflowInput, StageProgress } from '../run/workflowShapes';
import type { SftReport } from '../stages/sft/shapes';
import { CM2_RUN_ID, CM2_STAGE } from '../run/layout';
import { displayFault } from './faults';
import { RunWatch, withHeartbeatCount } from './watch';

/**
 * Starts the workflow of a stage of a run (`cm2-<run>-<stage>`), or attaches to it when it is already running: the
 * same id never runs a stage twice at once, and a finished run is re-entered idempotently by its activities.
 */
export function startStage<W extends Workflow>(client: Client, cfg: Cm2Config, workflow: W, stage: string, args: Parameters<W>, summary: string): Promise<WorkflowHandle<W>> {
  return client.workflow.start(workflow, {
    taskQueue: cfg.temporal.taskQueues.workflows,
    workflowId: stageWorkflowId(cfg.run.id, stage),
    args,
    workflowIdConflictPolicy: WorkflowIdConflictPolicy.USE_EXISTING,
    typedSearchAttributes: [
      { key: CM2_RUN_ID, value: cfg.run.id },
      { key: CM2_STAGE, value: stage },
    ],
    staticSummary: `${summary} of run ${cfg.run.id}`,
    // `args` is typed by the caller (Parameters<W>); the SDK's conditional args type cannot see that generically.
  } as unknown as WorkflowStartOptions<W>);
}

/** Where a stage's activities run and their timeouts: part of every stage's workflow input. */
const activityPlacement = (cfg: Cm2Config) => ({ taskQueues: { api: cfg.temporal.taskQueues.api, gpu: cfg.temporal.taskQueues.gpu }, activity: cfg.temporal.activity });

/** The same for a stage that trains: `train` when `temporal.taskQueues.train` names a queue (absent: the gpu queue). */
const trainingPlacement = (cfg: Cm2Config) => {
  const { train } = cfg.temporal.taskQueues;
  const placed = activityPlacement(cfg);
  return train ? { ...placed, taskQueues: { ...placed.taskQueues, train } } : placed;
};

/** The workflow input of the prepare stage: the config's data and LLM sections, resolved; no secrets. */
export function prepareInput(cfg: Cm2Config): PrepareWorkflowInput {
  return {
    runId: cfg.run.id,
    data: cfg.data,
    llm: cfg.llm,
    llmFilterPasses: cfg.data.llmFilter.cascade?.passes.map((p) => p.effort) ?? [...REFERENCE_CASCADE],
    ...activityPlacement(cfg),
  };
}

/** The workflow input of the checklist stage; the source defaults to the prepare stage's RL split. */
export function checklistInput(cfg: Cm2Config): ChecklistWorkflowInput {
  return {
    runId: cfg.run.id,
    sourceKey: cfg.checklist.sourceKey ?? prepareKeys.rl(cfg.run.id),
    checklist: cfg.checklist,
    llm: cfg.llm,
    ...activityPlacement(cfg),
  };
}

/** The workflow input of the SFT stage: trains on the cold-start split, checks the format on the RL split. */
export function sftInput(cfg: Cm2Config): SftWorkflowInput {
  return {
    runId: cfg.run.id,
    sft: cfg.sft,
    sourceKey: cfg.sft.sourceKey ?? prepareKeys.coldStart(cfg.run.id),
    evalSourceKey: cfg.sft.evalSourceKey ?? prepareKeys.rl(cfg.run.id),
    ...trainingPlacement(cfg),
  };
}

/**
 * The workflow input of the RL stage: the checklist stage's annotated examples, starting from the SFT policy.
 * `rl.executableTools` becomes the list of demo-world tools the run executes (none unless the data source is the demo
 * world or the config names them: src/stages/rl/env/answers.ts). Throws `ConfigError` when no tool call could be
 * answered (no executable tool and no simulator endpoint) or a named tool is not the demo world's, before any stage runs.
 */
export function rlInput(cfg: Cm2Config): RlWorkflowInput {
  const demoData = cfg.data.source.kind === 'demo';
  const issues = toolAnswerIssues(cfg.rl.executableTools, demoData, isOnline(cfg.llm.roles.simulator), demoWorld.toolNames);
  if (issues.length) throw new ConfigError(`of run ${cfg.run.id}`, issues);
  return {
    runId: cfg.run.id,
    rl: { ...cfg.rl, executableTools: executableToolNames(cfg.rl.executableTools, demoData, demoWorld.toolNames) },
    llm: cfg.llm,
    tokenizerDir: cfg.sft.tokenizerDir,
    sourceKey: cfg.rl.sourceKey ?? checklistKeys.annotated(cfg.run.id),
    policyPrefix: cfg.rl.policyPrefix ?? sftKeys.final(cfg.run.id),
    ...trainingPlacement(cfg),
  };
}

/**
 * Start the workflow of a stage of a run, or attach to it when it is already running (same workflow id: starting
 * twice never runs the stage twice; a finished run is re-entered idempotently).
 */
export const startPrepare = (client: Client, cfg: Cm2Config) =>
  startStage(client, cfg, prepareWorkflow, 'prepare', [prepareInput(cfg)], 'CM2 data preparation');
export const startChecklist = (client: Client, cfg: Cm2Config) =>
  startStage(client, cfg, checklistWorkflow, 'checklist', [checklistInput(cfg)], 'CM2 checklist annotation');
export const startSft = (client: Client, cfg: Cm2Config) =>
  startStage(client, cfg, sftWorkflow, 'sft', [sftInput(cfg)], 'CM2 cold-start SFT');
export const startRl = (client: Client, cfg: Cm2Config) =>
  startStage(client, cfg, rlWorkflow, 'rl', [rlInput(cfg)], 'CM2 RL with checklist rewards');

export type { ChecklistReport, RlResult, SftReport };

/** A count fit for display: a finite, non-negative integer (anything else shows as 0). */
const countOf = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? Math.floor(v) : 0);

/** A progress bar of `width` cells; `done` is clamped to [0, total], so no input makes it throw. */
export function progressBar(done: number, total: number, width = 20): string {
  const filled = total > 0 ? Math.min(width, Math.max(0, Math.round((Math.min(done, total) / total) * width))) : 0;
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}]`;
}

/**
 * One line for a stage's progress: `[stage] phase [bar] done/total  counts`. Phases that run at the same time each
 * show their own count (`compression 3/5 + selection 2/7`). Pure and total: whatever a workflow (of any version)
 * reports, this returns a line and never throws.
 */
export function formatProgress(p: StageProgress): string {
  const counts = Object.entries(p?.counts ?? {}).map(([k, v]) => `${k}=${String(v)}`).join(' ');
  const phases = Array.isArray(p?.phases) ? p.phases.filter((x) => x && typeof x.name === 'string') : [];
  let phase: string;
  let done: number;
  let total: number;
  if (phases.length > 1) {
    phase = phases.map((x) => x.name).join(' + ');
    done = phases.reduce((n, x) => n + Math.min(countOf(x.done), countOf(x.total)), 0);
    total = phases.reduce((n, x) => n + countOf(x.total), 0);
  } else {
    phase = String(phases[0]?.name ?? p?.phase ?? '');
    done = countOf(phases[0]?.done ?? p?.done);
    total = countOf(phases[0]?.total ?? p?.total);
  }
  const each = phases.length > 1 ? ` (${phases.map((x) => `${x.name} ${Math.min(countOf(x.done), countOf(x.total))}/${countOf(x.total)}`).join(', ')})` : '';
  return `[${String(p?.stage ?? '?')}] ${phase.padEnd(18)} ${progressBar(done, total)} ${done}/${total}${each}  ${counts}`;
}

/** Waits `ms`, or less when `signal` aborts. */
export const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal?.aborted) return resolve();
    const onAbort = () => {
      clearTimeout(t);
      resolve();
    };
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });

const abortError = () => Object.assign(new Error('stopped following the run'), { name: 'AbortError' });

/**
 * A workflow's result, outliving a lost connection: an error that is not the workflow's own outcome (a Temporal
 * server that is restarting, a network hiccup) is said once and waited out. `signal` stops waiting (AbortError).
 */
export async function resultOf<T>(handle: WorkflowHandle, opts: { signal?: AbortSignal | undefined; note?: (line: string) => void } = {}): Promise<T> {
  let delay = 1000;
  let said = '';
  for (;;) {
    if (opts.signal?.aborted) throw abortError();
    const pending = handle.result() as Promise<T>;
    pending.catch(() => undefined); // may settle after we stopped waiting for it
    try {
      if (!opts.signal) return await pending;
      const signal = opts.signal;
      return await new Promise<T>((resolve, reject) => {
        const onAbort = () => reject(abortError());
        signal.addEventListener('abort', onAbort, { once: true });
        pending.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
      });
    } catch (e) {
      if (opts.signal?.aborted) throw abortError();
      const transient = (e instanceof ServiceError || isGrpcServiceError(e)) && !(e instanceof WorkflowNotFoundError);
      if (!transient || e instanceof WorkflowFailedError) throw e;
      const msg = e instanceof Error ? (e.cause instanceof Error ? e.cause.message : e.message) : String(e);
      if (msg !== said) {
        said = msg;
        try {
          opts.note?.(`lost contact with the Temporal server (${msg}); still following the run`);
        } catch {
          /* display only */
        }
      }
      await sleep(delay, opts.signal);
      delay = Math.min(10_000, delay * 2);
    }
  }
}

/**
 * Waits for a stage workflow, printing its progress (queried once a second) as it changes, with the running
 * activity's heartbeat and retries. Display and polling errors are reported once and never end the wait.
 */
export async function followStage<T>(handle: WorkflowHandle, opts: { print?: (line: string) => void; intervalMs?: number } = {}): Promise<T> {
  const print = (line: string) => {
    try {
      if (opts.print) opts.print(line);
      else if (process.stdout.isTTY) process.stdout.write(`\r${line.slice(0, (process.stdout.columns || 120) - 1).padEnd((process.stdout.columns || 120) - 1)}`);
      else console.log(line);
    } catch {
      /* display only */
    }
  };
  const watch = new RunWatch(handle.client);
  let last = '';
  let finished = false;
  const errors = new Set<string>();
  const poll = (async () => {
    while (!finished) {
      try {
        const p = await handle.query<StageProgress>(prepareProgressQuery);
        const look = await watch.look(handle.workflowId);
        displayFault();
        const line = formatProgress(withHeartbeatCount(p, look.details)) + (look.heartbeat ? `  ${look.heartbeat}` : '') + (look.notes.length ? `  ! ${look.notes.join('; ')}` : '');
        if (line !== last && !finished) print(line);
        last = line;
      } catch (e) {
        // No workflow worker yet, the run just closed, or a display error: the wait goes on.
        const msg = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
        if (!(e instanceof Error && /query|workflow|deadline|unavailable/i.test(e.message)) && !errors.has(msg.replace(/\d+/g, '#')) && errors.size < 5) {
          errors.add(msg.replace(/\d+/g, '#'));
          print(`(progress display failed: ${msg}; the run is not affected)`);
        }
      }
      await sleep(opts.intervalMs ?? 1000);
    }
  })();
  try {
    return await resultOf<T>(handle, { note: print });
  } finally {
    finished = true;
    await poll;
    if (process.stdout.isTTY && !opts.print) {
      try {
        process.stdout.write('\n');
      } catch {
        /* display only */
      }
    }
  }
}

export type { PrepareReport };

/**
 * What `cm2 <stage> run` does: start (or attach to) the stage's workflow, print its id and Web UI link, and unless
 * `wait` is false follow its progress and print its report.
 */
export async function runStageCommand<R>(
  cfg: Cm2Config,
  wait: boolean,
  start: (client: Client, cfg: Cm2Config) => Promise<WorkflowHandle>,
  print: (report: R, cfg: Cm2Config) => void,
): Promise<void> {
  const client = await connectClient(cfg);
  const handle = await start(client, cfg);
  console.log(`workflow id: ${handle.workflowId}`);
  console.log(`Web UI:      ${cfg.temporal.uiUrl}/namespaces/${cfg.temporal.namespace}/workflows/${handle.workflowId}`);
  if (wait) print(await followStage<R>(handle), cfg);
}

export { pipelineWorkflowId };

/** The pipeline's input: every enabled stage's resolved input (plain JSON, no secrets). */
export function pipelineInput(cfg: Cm2Config): PipelineInput {
  const rlEnabled = cfg.rl.enabled && (cfg.sft.enabled || cfg.rl.policyPrefix !== undefined);
  return {
    runId: cfg.run.id,
    stages: {
      prepare: prepareInput(cfg),
      checklist: checklistInput(cfg),
      ...(cfg.sft.enabled ? { sft: sftInput(cfg) } : {}),
      ...(rlEnabled ? { rl: rlInput(cfg) } : {}),
      ...(cfg.eval.enabled && (cfg.sft.enabled || rlEnabled)
        ? {
            eval: {
              runId: cfg.run.id,
              bfcl: cfg.eval.bfcl,
              ...(cfg.eval.tau2.enabled ? { tau2: { config: cfg.eval.tau2, user: cfg.llm.roles.user } } : {}),
              startToCloseTimeout: cfg.eval.startToCloseTimeout,
              tokenizerDir: cfg.sft.tokenizerDir,
              taskQueues: { gpu: cfg.temporal.taskQueues.gpu, api: cfg.temporal.taskQueues.api },
              activity: cfg.temporal.activity,
              // the run's serving engine generates the evaluations too (each policy loaded into it first)
              ...(rlEnabled && cfg.rl.engine.kind !== 'embedded' ? { engine: { rl: { engine: cfg.rl.engine, lora: cfg.rl.lora }, maxModelLen: cfg.rl.rollout.maxModelLen } } : {}),
            },
          }
        : {}),
    },
    taskQueues: { workflows: cfg.temporal.taskQueues.workflows, api: cfg.temporal.taskQueues.api },
    activity: cfg.temporal.activity,
    ...(cfg.tracking.length ? { tracking: cfg.tracking } : {}),
  };
}

/**
 * Starts the pipeline of a run (`cm2-<run>`), or attaches to it when it is running. A finished or failed run
 * started again re-enters: finished stages are skipped (S3 markers), the first unfinished one resumes.
 */
export function startPipeline(client: Client, cfg: Cm2Config, input: PipelineInput = pipelineInput(cfg)): Promise<WorkflowHandle<typeof cm2Pipeline>> {
  return client.workflow.start(cm2Pipeline, {
    taskQueue: cfg.temporal.taskQueues.workflows,
    workflowId: pipelineWorkflowId(input.runId),
    args: [input],
    workflowIdConflictPolicy: WorkflowIdConflictPolicy.USE_EXISTING,
    typedSearchAttributes: [
      { key: CM2_RUN_ID, value: input.runId },
      { key: CM2_STAGE, value: 'pipeline' },
    ],
    staticSummary: `CM2 run ${input.runId}`,
  });
}
