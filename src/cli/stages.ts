/**
 * Starting stage workflows from a config and following their progress: shared by `cm2 prepare`,
 * `cm2 demo` and the tests.
 */
import { WorkflowIdConflictPolicy, type Client, type WorkflowHandle, type WorkflowStartOptions } from '@temporalio/client';
import type { Workflow } from '@temporalio/common';
import { REFERENCE_CASCADE } from '../data/llmFilter';
import type { Cm2Config } from '../infra/config';
import { connectClient } from '../infra/temporal';
import type { PrepareReport } from '../activities/prepare';
import type { ChecklistReport } from '../activities/checklist';
import { runKey } from '../infra/store';
import { checklistWorkflow, cm2Pipeline, prepareProgressQuery, prepareWorkflow, rlWorkflow, sftWorkflow } from '../workflows';
import type { PipelineInput } from '../workflows/pipeline';
import type { RlResult, RlWorkflowInput } from '../workflows/rl';
import type { ChecklistWorkflowInput, PrepareWorkflowInput, SftWorkflowInput, StageProgress } from '../workflows/types';
import type { SftReport } from '../activities/sft';
import { CM2_RUN_ID, CM2_STAGE } from '../common/searchAttributes';

/**
 * Starts the workflow of a stage of a run (`cm2-<run>-<stage>`), or attaches to it when it is already running: the
 * same id never runs a stage twice at once, and a finished run is re-entered idempotently by its activities.
 */
function startStage<W extends Workflow>(client: Client, cfg: Cm2Config, workflow: W, stage: string, args: Parameters<W>, summary: string): Promise<WorkflowHandle<W>> {
  return client.workflow.start(workflow, {
    taskQueue: cfg.temporal.taskQueues.workflows,
    workflowId: `cm2-${cfg.run.id}-${stage}`,
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

export const prepareWorkflowId = (runId: string) => `cm2-${runId}-prepare`;

/** The workflow input of the prepare stage: the config's data and LLM sections, resolved; no secrets. */
export function prepareInput(cfg: Cm2Config): PrepareWorkflowInput {
  return {
    runId: cfg.run.id,
    data: cfg.data,
    llm: cfg.llm,
    llmFilterPasses: cfg.data.llmFilter.cascade?.passes.map((p) => p.effort) ?? [...REFERENCE_CASCADE],
    taskQueues: { api: cfg.temporal.taskQueues.api, gpu: cfg.temporal.taskQueues.gpu },
    activity: cfg.temporal.activity,
  };
}

/**
 * Starts the prepare workflow of a run, or attaches to it when it is already running (same workflow id:
 * starting twice never runs the stage twice; a finished run is re-entered idempotently).
 */
export function startPrepare(client: Client, cfg: Cm2Config): Promise<WorkflowHandle<typeof prepareWorkflow>> {
  return startStage(client, cfg, prepareWorkflow, 'prepare', [prepareInput(cfg)], 'CM2 data preparation');
}

export const checklistWorkflowId = (runId: string) => `cm2-${runId}-checklist`;

/** The workflow input of the checklist stage; the source defaults to the prepare stage's RL split. */
export function checklistInput(cfg: Cm2Config): ChecklistWorkflowInput {
  return {
    runId: cfg.run.id,
    sourceKey: cfg.checklist.sourceKey ?? runKey(cfg.run.id, 'data', 'rl.jsonl'),
    checklist: cfg.checklist,
    llm: cfg.llm,
    taskQueues: { api: cfg.temporal.taskQueues.api, gpu: cfg.temporal.taskQueues.gpu },
    activity: cfg.temporal.activity,
  };
}

/** Starts the checklist workflow of a run, or attaches to it when it is already running. */
export function startChecklist(client: Client, cfg: Cm2Config): Promise<WorkflowHandle<typeof checklistWorkflow>> {
  return startStage(client, cfg, checklistWorkflow, 'checklist', [checklistInput(cfg)], 'CM2 checklist annotation');
}

export type { ChecklistReport, SftReport };

export const sftWorkflowId = (runId: string) => `cm2-${runId}-sft`;

/** The workflow input of the SFT stage: trains on the cold-start split, checks the format on the RL split. */
export function sftInput(cfg: Cm2Config): SftWorkflowInput {
  return {
    runId: cfg.run.id,
    sft: cfg.sft,
    sourceKey: cfg.sft.sourceKey ?? runKey(cfg.run.id, 'data', 'cold_start.jsonl'),
    evalSourceKey: cfg.sft.evalSourceKey ?? runKey(cfg.run.id, 'data', 'rl.jsonl'),
    taskQueues: { api: cfg.temporal.taskQueues.api, gpu: cfg.temporal.taskQueues.gpu },
    activity: cfg.temporal.activity,
  };
}

/** Starts the SFT workflow of a run, or attaches to it when it is already running. */
export function startSft(client: Client, cfg: Cm2Config): Promise<WorkflowHandle<typeof sftWorkflow>> {
  return startStage(client, cfg, sftWorkflow, 'sft', [sftInput(cfg)], 'CM2 cold-start SFT');
}

export const rlWorkflowId = (runId: string) => `cm2-${runId}-rl`;

/** The workflow input of the RL stage: the checklist stage's annotated examples, starting from the SFT policy. */
export function rlInput(cfg: Cm2Config): RlWorkflowInput {
  return {
    runId: cfg.run.id,
    rl: cfg.rl,
    llm: cfg.llm,
    tokenizerDir: cfg.sft.tokenizerDir,
    sourceKey: cfg.rl.sourceKey ?? runKey(cfg.run.id, 'checklists', 'annotated.jsonl'),
    policyPrefix: cfg.rl.policyPrefix ?? runKey(cfg.run.id, 'sft', 'final'),
    taskQueues: { api: cfg.temporal.taskQueues.api, gpu: cfg.temporal.taskQueues.gpu },
    activity: cfg.temporal.activity,
  };
}

/** Starts the RL workflow of a run, or attaches to it when it is already running. */
export function startRl(client: Client, cfg: Cm2Config): Promise<WorkflowHandle<typeof rlWorkflow>> {
  return startStage(client, cfg, rlWorkflow, 'rl', [rlInput(cfg)], 'CM2 RL with checklist rewards');
}

export type { RlResult };

export function formatProgress(p: StageProgress): string {
  const counts = Object.entries(p.counts).map(([k, v]) => `${k}=${v}`).join(' ');
  const width = 20;
  const filled = p.total ? Math.round((p.done / p.total) * width) : 0;
  return `[${p.stage}] ${p.phase.padEnd(18)} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${p.done}/${p.total}  ${counts}`;
}

/**
 * The latest heartbeat of the workflow's running activity, as `key=value` text (e.g. the SFT step and loss), or ''.
 * Long activities report their progress there; the workflow itself cannot see it.
 */
export async function heartbeatOf(handle: WorkflowHandle): Promise<string> {
  try {
    const pending = (await handle.describe()).raw.pendingActivities ?? [];
    const payload = pending[0]?.heartbeatDetails?.payloads?.[0];
    if (!payload?.data) return '';
    const details = JSON.parse(Buffer.from(payload.data).toString('utf8')) as Record<string, unknown>;
    return Object.entries(details).map(([k, v]) => `${k}=${typeof v === 'number' && !Number.isInteger(v) ? v.toFixed(3) : String(v)}`).join(' ');
  } catch {
    return '';
  }
}

/** Waits for a stage workflow, printing its progress (queried once a second) as it changes. */
export async function followStage<T>(handle: WorkflowHandle, opts: { print?: (line: string) => void; intervalMs?: number } = {}): Promise<T> {
  const print = opts.print ?? ((line: string) => {
    if (process.stdout.isTTY) process.stdout.write(`\r${line.slice(0, (process.stdout.columns || 120) - 1).padEnd((process.stdout.columns || 120) - 1)}`);
    else console.log(line);
  });
  let last = '';
  let finished = false;
  const poll = (async () => {
    while (!finished) {
      try {
        const p = await handle.query<StageProgress>(prepareProgressQuery);
        const beat = await heartbeatOf(handle);
        const line = formatProgress(p) + (beat ? `  ${beat}` : '');
        if (line !== last) print(line);
        last = line;
      } catch {
        /* no workflow worker yet, or the run just closed */
      }
      await new Promise((r) => setTimeout(r, opts.intervalMs ?? 1000));
    }
  })();
  try {
    return (await handle.result()) as T;
  } finally {
    finished = true;
    await poll;
    if (process.stdout.isTTY && !opts.print) process.stdout.write('\n');
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

export const pipelineWorkflowId = (runId: string) => `cm2-${runId}`;

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
              startToCloseTimeout: cfg.eval.startToCloseTimeout,
              tokenizerDir: cfg.sft.tokenizerDir,
              taskQueues: { gpu: cfg.temporal.taskQueues.gpu },
              activity: cfg.temporal.activity,
            },
          }
        : {}),
    },
    taskQueues: { workflows: cfg.temporal.taskQueues.workflows, api: cfg.temporal.taskQueues.api },
    activity: cfg.temporal.activity,
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
