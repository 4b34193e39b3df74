/**
 * `cm2Pipeline`: a whole CM2 run, stages 1 → 5 (prepare → checklist → SFT → RL, then evaluation when configured)
 * as child workflows with the stage workflows' own ids (`cm2-<run>-<stage>`), so each stage is also visible,
 * queryable and steerable on its own (`cm2 rl set`, `temporal workflow query --name progress`).
 *
 * Idempotent re-entry: a finished stage leaves a marker in S3 (`runs/<id>/pipeline/<stage>.json`, written by an
 * activity after the child completed); a pipeline started again with the same run id (`cm2 resume`, or
 * `temporal workflow start` with the same workflow id) skips every marked stage and re-enters the first unfinished
 * one, whose own activities skip the work already in S3 (shards, annotated examples, SFT/RL checkpoints).
 *
 * Stages: prepare → checklist → sft → rl → eval (BFCL accuracy of the SFT and final RL policies).
 *
 * Steering: signals `pause` / `resume` / `stop` (the same names as the RL workflow's). Pause holds the pipeline at
 * the next stage boundary and is forwarded to the RL stage, which pauses between steps; stop ends the pipeline
 * after the current stage's current unit of work (RL: after the step in flight, with its checkpoint; other stages
 * are cancelled and resume where their S3 state left off). Query `pipelineStatus`; search attributes Cm2RunId,
 * Cm2Stage = pipeline, Cm2State; memo `heldOut` (the SFT and RL policies' held-out rewards, once RL has run).
 */
import {
  ApplicationFailure,
  CancellationScope,
  condition,
  defineQuery,
  getExternalWorkflowHandle,
  isCancellation,
  ParentClosePolicy,
  patched,
  setCurrentDetails,
  setHandler,
  startChild,
  upsertMemo,
  upsertSearchAttributes,
  type ChildWorkflowHandle,
  type Workflow,
} from '@temporalio/workflow';
import type { PipelineActivities } from './activities';
import type { StageMarker } from './shapes';
import { CM2_RUN_ID, CM2_STAGE, CM2_STATE, sftKeys, type StageName, STAGES, stageWorkflowId, stageWorkflowType, trackWorkflowId } from '../../run/layout';
import type { checklistWorkflow } from '../checklist/workflow';
import type { prepareWorkflow } from '../prepare/workflow';
import type { rlWorkflow, RlResult, RlWorkflowInput } from '../rl/workflow';
import type { sftWorkflow } from '../sft/workflow';
import type { EvalResult, EvalWorkflowInput } from '../eval/workflow';
import type { trackWorkflow } from '../track/workflow';
import type { TrackerConfig } from '../../run/trackingConfig';
import { pauseSignal, resumeSignal, stopSignal, trackDoneSignal, type RunEnd } from '../../run/control';
import type { EvalPolicy } from '../eval/shapes';
import type { ActivityTimeouts, ChecklistWorkflowInput, PrepareWorkflowInput, SftWorkflowInput } from '../../run/workflowShapes';
import { stageActivities } from '../../run/workflowUtil';
import { PATCH } from '../../run/patches';

export type PipelineStage = StageName;

export interface PipelineInput {
  runId: string;
  /** The resolved input of every enabled stage (absent = disabled). */
  stages: {
    prepare?: PrepareWorkflowInput;
    checklist?: ChecklistWorkflowInput;
    sft?: SftWorkflowInput;
    rl?: RlWorkflowInput;
    /** The evaluation stage without its policies (the SFT and final RL policies are added when it starts). */
    eval?: Omit<EvalWorkflowInput, 'policies'>;
  };
  taskQueues: { workflows: string; api: string };
  activity: ActivityTimeouts;
  /** Experiment trackers (`tracking`): the run's tracking workflow keeps them up to date; absent or empty: none. */
  tracking?: TrackerConfig[];
}

export type StageState = 'pending' | 'running' | 'completed' | 'skipped' | 'failed' | 'stopped' | 'disabled';

export interface StageStatus {
  name: PipelineStage;
  state: StageState;
  workflowId: string;
  /** Epoch ms (workflow time). */
  startedAt?: number;
  closedAt?: number;
  /** Headline numbers of the stage's result (counts, rewards), for `cm2 status`. */
  summary: Record<string, number | string>;
  error?: string;
}

export interface PipelineStatus {
  runId: string;
  state: 'running' | 'paused' | 'stopping' | 'stopped' | 'completed' | 'failed';
  current?: PipelineStage;
  paused: boolean;
  stopRequested: boolean;
  stages: StageStatus[];
  /**
   * Held-out mean checklist reward of the SFT policy (RL evaluation at step 0) and of the latest RL policy, each with
   * its standard error across the held-out prompts (`prompts` of them).
   */
  heldOut: {
    sft?: number; sftSe?: number; rl?: number; rlSe?: number; rlStep?: number; prompts?: number;
    /** Failed rollouts of each evaluation (scored 0 in its mean) and its rollouts; absent in runs before they were kept. */
    sftFailed?: number; sftRollouts?: number; rlFailed?: number; rlRollouts?: number;
  };
}

export interface PipelineResult extends PipelineStatus {
  reportKey?: string;
}

export const pipelineStatusQuery = defineQuery<PipelineStatus>('pipelineStatus');

/** The headline numbers of a stage result (small: they live in history and in `cm2 status --json`). */
export function summarize(stage: PipelineStage, result: unknown): Record<string, number | string> {
  const r = (result ?? {}) as Record<string, unknown>;
  const num = (v: unknown) => (typeof v === 'number' ? v : undefined);
  const out: Record<string, number | string> = {};
  const put = (k: string, v: unknown) => {
    if (typeof v === 'number' || typeof v === 'string') out[k] = v;
  };
  switch (stage) {
    case 'prepare': {
      put('imported', r['total']);
      put('coldStart', (r['coldStart'] as { count?: number } | undefined)?.count);
      put('rl', (r['rl'] as { count?: number } | undefined)?.count);
      put('costUsd', (r['usage'] as { costUsd?: number } | undefined)?.costUsd);
      put('reportKey', r['reportKey']);
      break;
    }
    case 'checklist':
      put('annotated', r['annotated']);
      put('failed', r['failed']);
      put('items', r['items']);
      put('costUsd', (r['usage'] as { costUsd?: number } | undefined)?.costUsd);
      put('reportKey', r['reportKey']);
      break;
    case 'sft': {
      const train = (r['train'] ?? {}) as { steps?: number; losses?: number[]; finalPrefix?: string };
      put('steps', train.steps);
      const losses = train.losses ?? [];
      if (losses.length) {
        put('firstLoss', losses[0]);
        put('lastLoss', losses[losses.length - 1]);
      }
      put('wellFormed', num((r['sft'] as { wellFormedShare?: number } | undefined)?.wellFormedShare));
      put('policy', train.finalPrefix);
      put('reportKey', r['reportKey']);
      break;
    }
    case 'rl': {
      const rl = r as Partial<RlResult>;
      put('steps', rl.steps);
      const evals = rl.evals ?? [];
      const first = evals.find((e) => e.step === 0);
      const last = evals[evals.length - 1];
      // Failed rollouts count as 0 in a mean: each mean goes with its count of them (and of rollouts).
      if (first) {
        put('heldOutSft', first.rewardMean);
        put('heldOutSftSe', first.rewardSe ?? undefined);
        put('heldOutSftFailed', first.failed);
        if (typeof first.failed === 'number') put('heldOutSftRollouts', first.rollouts);
      }
      if (last) {
        put('heldOutRl', last.rewardMean);
        put('heldOutRlSe', last.rewardSe ?? undefined);
        put('heldOutStep', last.step);
        put('heldOutRlFailed', last.failed);
        if (typeof last.failed === 'number') put('heldOutRlRollouts', last.rollouts);
      }
      put('heldOutPrompts', (last ?? first)?.prompts);
      if (rl.policy) put('policy', rl.policy.kind === 'hf' ? rl.policy.prefix : rl.policy.manifestKey);
      if (rl.stopped) put('stopped', 'yes');
      break;
    }
    case 'eval':
      for (const b of (r as Partial<EvalResult>).bfcl ?? []) put(`bfcl_${b.label}`, b.overall.accuracy);
      break;
  }
  return out;
}

/** The pipeline's current details (the Web UI's workflow page): its state and each enabled stage's summary. */
export function pipelineDetails(status: PipelineStatus): string {
  const lines = status.stages.filter((s) => s.state !== 'disabled').map((s) => `- ${s.name}: **${s.state}**${Object.keys(s.summary).length ? ` — ${Object.entries(s.summary).filter(([k]) => !/Key$|policy/.test(k)).map(([k, v]) => `${k} ${typeof v === 'number' && !Number.isInteger(v) ? v.toFixed(4) : v}`).join(', ')}` : ''}`);
  return `**CM2 run ${status.runId}**: ${status.state}${status.current ? ` (${status.current})` : ''}\n\n${lines.join('\n')}`;
}

/** A stage's child workflow options. */
const childOptions = (input: PipelineInput, name: PipelineStage) => ({
  workflowId: stageWorkflowId(input.runId, name),
  taskQueue: input.taskQueues.workflows,
  // Terminating the pipeline (or its run timing out) stops its current stage too; `cm2 resume` picks it up.
  parentClosePolicy: ParentClosePolicy.TERMINATE,
  typedSearchAttributes: [
    { key: CM2_RUN_ID, value: input.runId },
    { key: CM2_STAGE, value: name },
  ],
  staticSummary: `CM2 ${name} of run ${input.runId}`,
});

/** The policy a finished stage gives the evaluation stage to score: the SFT output, or the final RL policy. */
function scoredPolicy(input: PipelineInput, name: PipelineStage, result: unknown): { label: string; policy: EvalPolicy } | undefined {
  if (name === 'sft' && input.stages.sft) return { label: 'sft', policy: { kind: 'hf', prefix: sftKeys.final(input.runId) } };
  if (name === 'rl') {
    const p = (result as Partial<RlResult> | undefined)?.policy;
    if (p && p.kind === 'ckpt') return { label: 'rl', policy: p };
  }
  return undefined;
}

/** The pipeline's failure: the stage's failure kept as the cause, so clients see its root (e.g. the activity's BadConfig message). */
function stageFailed(status: PipelineStatus, e: unknown): ApplicationFailure {
  return ApplicationFailure.create({
    message: `stage ${status.current ?? '?'} of run ${status.runId} failed: ${e instanceof Error ? e.message : String(e)}; fix the cause, then \`cm2 resume ${status.runId}\``,
    type: 'StageFailed',
    nonRetryable: true,
    ...(e instanceof Error ? { cause: e } : {}),
  });
}

/**
 * The pipeline's steering: its status query; pause / resume forwarded to the RL child (other stages have no steps to
 * pause between); stop, which the RL child takes between steps and any other stage by cancellation.
 */
function steerPipeline(status: PipelineStatus, live: { setState: (s: PipelineStatus['state']) => void; forward: (s: typeof pauseSignal | typeof resumeSignal | typeof stopSignal) => void; details: () => void; stopChild: () => void }): void {
  setHandler(pipelineStatusQuery, () => status);
  setHandler(pauseSignal, () => {
    status.paused = true;
    if (!status.stopRequested) live.setState('paused');
    live.forward(pauseSignal);
    live.details();
  });
  setHandler(resumeSignal, () => {
    status.paused = false;
    live.setState(status.stopRequested ? 'stopping' : 'running');
    live.forward(resumeSignal);
    live.details();
  });
  setHandler(stopSignal, () => {
    status.stopRequested = true;
    live.setState('stopping');
    live.stopChild();
    live.details();
  });
}

export async function cm2Pipeline(input: PipelineInput): Promise<PipelineResult> {
  const acts = stageActivities<PipelineActivities>(input.taskQueues.api, input.activity);
  const stages: StageStatus[] = STAGES.map((name) => ({
    name,
    state: input.stages[name] ? 'pending' : 'disabled',
    workflowId: stageWorkflowId(input.runId, name),
    summary: {},
  }));
  const status: PipelineStatus = { runId: input.runId, state: 'running', paused: false, stopRequested: false, stages, heldOut: {} };
  let child: { stage: PipelineStage; handle: ChildWorkflowHandle<typeof rlWorkflow> | ChildWorkflowHandle<typeof sftWorkflow> | ChildWorkflowHandle<typeof checklistWorkflow> | ChildWorkflowHandle<typeof prepareWorkflow>; scope: CancellationScope } | undefined;

  const setState = (state: PipelineStatus['state']) => {
    status.state = state;
    upsertSearchAttributes([{ key: CM2_STATE, value: state }]);
  };
  const details = () => setCurrentDetails(pipelineDetails(status));
  /** Forwards a steering signal to the RL child (other stages have no steps to pause between). */
  const forward = (signal: typeof pauseSignal | typeof resumeSignal | typeof stopSignal) => {
    if (child?.stage === 'rl') void getExternalWorkflowHandle(child.handle.workflowId).signal(signal).catch(() => undefined);
  };
  steerPipeline(status, { setState, forward, details, stopChild: () => (child?.stage === 'rl' ? forward(stopSignal) : child?.scope.cancel()) });
  upsertSearchAttributes([
    { key: CM2_RUN_ID, value: input.runId },
    { key: CM2_STAGE, value: 'pipeline' },
    { key: CM2_STATE, value: 'running' },
  ]);
  details();

  // The run's experiment trackers: a workflow of their own beside the stages, never waited for (its failures and a
  // tracker's outage stay there); told how the run ended when it ends. Runs recorded before the patch have none.
  const tracking = (input.tracking?.length ?? 0) > 0 && patched(PATCH.pipelineTracking);
  if (tracking) await startTracking(input);
  const trackDone = async (end: RunEnd) => {
    if (tracking) await getExternalWorkflowHandle(trackWorkflowId(input.runId)).signal(trackDoneSignal, { end }).catch(() => undefined);
  };

  const runStage = async (stage: StageStatus, start: () => Promise<ChildWorkflowHandle<Workflow>>): Promise<unknown> => {
    const scope = new CancellationScope();
    stage.state = 'running';
    stage.startedAt = Date.now();
    status.current = stage.name;
    details();
    try {
      return await scope.run(async () => {
        const handle = await start();
        child = { stage: stage.name, handle: handle as never, scope };
        // A pause that arrived while the child was starting.
        if (stage.name === 'rl' && status.paused) forward(pauseSignal);
        return (await handle.result()) as unknown;
      });
    } catch (e) {
      stage.closedAt = Date.now();
      if (isCancellation(e) && status.stopRequested) {
        stage.state = 'stopped';
        return undefined;
      }
      stage.state = 'failed';
      stage.error = e instanceof Error ? (e.cause instanceof Error ? `${e.message}: ${e.cause.message}` : e.message) : String(e);
      throw e;
    } finally {
      child = undefined;
      details();
    }
  };

  /**
   * The RL stage's held-out rewards: into the status, and (since the patch `pipeline-heldout-memo`) into the memo,
   * where the Web UI and `cm2 status` see them without a query. Runs recorded before the patch replay without it.
   */
  const heldOut = (summary: Record<string, number | string>) => {
    applyHeldOut(status, summary);
    if (patched(PATCH.pipelineHeldOutMemo)) upsertMemo({ heldOut: { ...status.heldOut } });
  };

  // The policies the evaluation stage scores: the SFT output and the final RL policy (from results or markers).
  const policies: Array<{ label: string; policy: EvalPolicy }> = [];
  const notePolicy = (name: PipelineStage, result: unknown) => {
    const scored = scoredPolicy(input, name, result);
    if (scored) policies.push(scored);
  };

  try {
    for (const stage of stages) {
      if (stage.state === 'disabled') continue;
      if (status.stopRequested) break;
      if (status.paused) {
        details();
        await condition(() => !status.paused || status.stopRequested);
        if (status.stopRequested) break;
      }
      const marker: StageMarker | null = await acts.pipelineStageMarker({ runId: input.runId, stage: stage.name });
      if (marker) {
        stage.state = 'skipped';
        stage.summary = summarize(stage.name, marker.result);
        stage.startedAt = marker.startedAt;
        stage.closedAt = marker.closedAt;
        if (stage.name === 'rl') heldOut(stage.summary);
        notePolicy(stage.name, marker.result);
        details();
        continue;
      }
      // Each stage's workflow type is `<stage>Workflow` (run/layout.ts); the eval stage gets the policies to evaluate.
      const args = stage.name === 'eval' ? { ...input.stages.eval!, policies } : input.stages[stage.name]!;
      const result: unknown = await runStage(stage, () => startChild(stageWorkflowType(stage.name), { ...childOptions(input, stage.name), args: [args] }));
      if (result === undefined) break; // stopped
      stage.summary = summarize(stage.name, result);
      stage.closedAt = Date.now();
      if (stage.name === 'rl') heldOut(stage.summary);
      if (stage.name === 'rl' && (result as RlResult).stopped) {
        // Stopped between steps: not finished, a resume continues from the last checkpoint.
        stage.state = 'stopped';
        break;
      }
      stage.state = 'completed';
      notePolicy(stage.name, result);
      await acts.pipelineRecordStage({ runId: input.runId, stage: stage.name, result, startedAt: stage.startedAt ?? stage.closedAt, closedAt: stage.closedAt });
      details();
    }
  } catch (e) {
    setState('failed');
    details();
    await CancellationScope.nonCancellable(() => acts.pipelineReport({ runId: input.runId, status: { ...status } }).catch(() => undefined));
    await CancellationScope.nonCancellable(() => trackDone('FAILED'));
    throw stageFailed(status, e);
  }
  status.current = undefined;
  const finished = stages.every((s) => s.state === 'completed' || s.state === 'skipped' || s.state === 'disabled');
  setState(finished ? 'completed' : 'stopped');
  const report = await acts.pipelineReport({ runId: input.runId, status: { ...status } });
  await trackDone(finished ? 'FINISHED' : 'KILLED');
  details();
  return { ...status, reportKey: report.key };
}

/**
 * Starts the run's tracking workflow (`cm2-<run>-track`) as a child the pipeline does not wait for: `trackDone` tells it
 * the run's end, and it sends the last points after the pipeline has closed. A pipeline that closes without the
 * signal (terminated, timed out) requests its cancellation, which ends it the same way (KILLED). A pipeline started
 * again (`cm2 resume`) finds it running and leaves it be, or starts a new one if it has ended.
 */
async function startTracking(input: PipelineInput): Promise<void> {
  try {
    await startChild<typeof trackWorkflow>('trackWorkflow', {
      workflowId: trackWorkflowId(input.runId),
      taskQueue: input.taskQueues.workflows,
      parentClosePolicy: patched(PATCH.trackingCancelOnClose) ? ParentClosePolicy.REQUEST_CANCEL : ParentClosePolicy.ABANDON,
      args: [{ runId: input.runId, trackers: input.tracking ?? [], taskQueue: input.taskQueues.api, activity: input.activity }],
      typedSearchAttributes: [
        { key: CM2_RUN_ID, value: input.runId },
        { key: CM2_STAGE, value: 'track' },
      ],
      staticSummary: `CM2 tracking of run ${input.runId}`,
    });
  } catch (e) {
    // already running (a resumed pipeline): it goes on with the same trackers
    if (!(e instanceof Error && e.name === 'WorkflowExecutionAlreadyStartedError')) throw e;
  }
}

function applyHeldOut(status: PipelineStatus, summary: Record<string, number | string>): void {
  const fields = [
    ['heldOutSft', 'sft'], ['heldOutSftSe', 'sftSe'], ['heldOutRl', 'rl'], ['heldOutRlSe', 'rlSe'], ['heldOutStep', 'rlStep'], ['heldOutPrompts', 'prompts'],
    ['heldOutSftFailed', 'sftFailed'], ['heldOutSftRollouts', 'sftRollouts'], ['heldOutRlFailed', 'rlFailed'], ['heldOutRlRollouts', 'rlRollouts'],
  ] as const;
  for (const [from, to] of fields) {
    const v = summary[from];
    if (typeof v === 'number') status.heldOut[to] = v;
  }
}
