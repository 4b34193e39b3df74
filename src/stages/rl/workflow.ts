/**
 * Stage 5 as a long-running, resumable workflow (spec §6): each RL step = sample prompts → rollouts (turn by turn,
 * the judge between turns for turn control) → advantages → GRPO update → checkpoint → metrics row.
 *
 * Steering (from the CLI, `temporal workflow signal|update|query`, or the Web UI):
 * - signals `pause`, `resume`, `stop` (stop ends after the current step, with a final evaluation);
 * - update `setHyperparameters` {lr?, klCoef?, granularity?}: validated (rejected updates never enter history as
 *   accepted); a step's hyperparameters are fixed when its advantages activity (the first to use them, followed at
 *   once by the GRPO update) is scheduled, so an accepted update applies to the first step that has not reached that
 *   point; the reply is the hyperparameters in force and that step (`fromStep`);
 * - queries `progress` (shared stage shape) and `rlStatus` (step, hyperparameters, last metrics, evaluations).
 * Search attributes: Cm2Stage = rl, Cm2State (running / paused / stopping / completed), Cm2Step, Cm2MeanReward.
 *
 * Fan-out (`rl.rollout.chunkPrompts` > 0): a step's prompts are cut into fixed chunks, each advancing through its own
 * rollout → judge chain (in parallel over the gpu workers), merged by `rlMergeChunks`. One-step-off
 * (`rl.async: one-step-off`): step n+1's episodes start, with the pre-update policy, when step n's update starts.
 *
 * Retention (`rl.keepCheckpoints` > 0): after each recorded step, `rlPruneCheckpoints` removes the checkpoints that
 * src/run/retention.ts does not keep (the newest few, the current policy, the evaluated ones).
 *
 * Continue-as-new every `continueAsNewEvery` steps (or when the server suggests it), carrying the small loop state;
 * everything else is in S3. Rollouts, judge and advantages are idempotent per (step, phase) and the train step is
 * exactly-once per step (src/stages/rl/activities.ts), so a replay, a retry or a restarted server never applies an update
 * twice or skips one.
 */
import {
  type ActivityInterfaceFor,
  ApplicationFailure,
  CancellationScope,
  condition,
  continueAsNew,
  defineQuery,
  defineUpdate,
  patched,
  setCurrentDetails,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { PhaseResult, RlActivities, RlAdvantagesResult, RlData, RlTrainResult } from './activities';
import { engineConfigProblem } from '../../kernel/engineRules';
import type { RlBatch, RlEngineSyncResult, RlEvalPoint, RlLoopState, RlResult, RlStatus, RlWorkflowInput } from './shapes';
import { CM2_MEAN_REWARD, CM2_STATE, CM2_STEP, rlKeys } from '../../run/layout';
import type { RlConfig, RlHyperparameters, RlSettings } from '../../run/config';
import { takeBatch, type DataCursor } from '../../kernel/dataOrder';
import { chunkRanges } from '../../kernel/chunks';
import type { StageProgress } from '../../run/workflowShapes';
import { pauseSignal, resumeSignal, stopSignal } from '../../run/control';
import { beginStage, endStage, stageActivities } from '../../run/workflowUtil';
import type { PolicyRef } from '../../run/layout';
import { addCounts, zeroJudgeTotals } from '../../kernel/counts';
import { recordRlEval, recordRlStep } from '../../run/workflowMetrics';
import { checkpointsToKeep, minimumKept } from '../../run/retention';
import { validateHyperparameters } from '../../run/hyperparameters';
import { PATCH } from '../../run/patches';

export type { RlBatch, RlEvalPoint, RlLoopState, RlResult, RlStatus, RlWorkflowInput } from './shapes';

/** Updates applied to a policy: 0 for the initial one. */
const policyStep = (p: PolicyRef): number => (p.kind === 'ckpt' ? p.step : 0);

/** The reply to `setHyperparameters`: the hyperparameters in force after the update, and the first step that uses them. */
export type RlHyperparametersReply = RlHyperparameters & { fromStep: number };
export const setHyperparametersUpdate = defineUpdate<RlHyperparametersReply, [Partial<RlHyperparameters>]>('setHyperparameters');
export const rlStatusQuery = defineQuery<RlStatus>('rlStatus');


/** The run's state for the Web UI and `temporal workflow list` (search attribute Cm2State). */
const setRunState = (value: string) => upsertSearchAttributes([{ key: CM2_STATE, value }]);

/**
 * The loop's steering, registered before its first await so that signals, updates and queries work from the start:
 * pause / resume / stop, `setHyperparameters` (validated; the reply names the first step that uses it), `rlStatus`.
 * `current` is the loop's state as it stands; `hpFixedFor` the step whose hyperparameters are already fixed.
 */
function steer(rl: RlConfig, progress: StageProgress, current: () => RlLoopState, hpFixedFor: () => number): void {
  setHandler(pauseSignal, () => {
    current().paused = true;
    setRunState('paused');
  });
  setHandler(resumeSignal, () => {
    current().paused = false;
    setRunState(current().stopRequested ? 'stopping' : 'running');
  });
  setHandler(stopSignal, () => {
    current().stopRequested = true;
    setRunState('stopping');
  });
  setHandler(
    setHyperparametersUpdate,
    (patch) => {
      const state = current();
      state.hp = { ...state.hp, ...patch };
      return { ...state.hp, fromStep: hpFixedFor() === state.step + 1 ? state.step + 2 : state.step + 1 };
    },
    {
      validator: (patch) => {
        const problem = validateHyperparameters(patch);
        if (problem) throw new Error(`invalid hyperparameters: ${problem}`);
      },
    },
  );
  setHandler(rlStatusQuery, () => {
    const state = current();
    return {
      step: state.step,
      totalSteps: rl.steps,
      hp: state.hp,
      paused: state.paused,
      stopRequested: state.stopRequested,
      phase: progress.phase,
      policy: state.policy,
      evals: state.evals,
      ...(state.last ? { last: state.last } : {}),
    };
  });
}

/** The loop's state before its first step: the SFT policy, the config's hyperparameters, no data read yet. */
const startState = (rl: RlConfig, policy: PolicyRef): RlLoopState => ({
  step: 0,
  cursor: { epoch: 0, index: 0 },
  hp: rl.hp,
  policy,
  data: { key: '', train: 0, heldOut: 0, tooLong: 0, invalid: 0 },
  evals: [],
  paused: false,
  stopRequested: false,
});

/** A committed step, shown: progress, search attributes (Cm2Step, Cm2MeanReward), metrics. */
function showCommitted(progress: StageProgress, runId: string, stepNo: number, hp: RlHyperparameters, adv: RlAdvantagesResult): void {
  progress.done = stepNo;
  // Between steps: `train` with the new count would read as the next step's training (a query-only change, replay-safe).
  progress.phase = 'recorded';
  progress.counts['reward_x1000'] = Math.round(adv.rewardMean * 1000);
  upsertSearchAttributes([
    { key: CM2_STEP, value: stepNo },
    { key: CM2_MEAN_REWARD, value: adv.rewardMean },
  ]);
  recordRlStep(runId, stepNo, hp.granularity, adv.rewardMean, adv.advAbsMean);
}

/** What the loop's parts share: the run's input and its activities on each queue. */
interface Loop {
  input: RlWorkflowInput;
  rl: RlConfig;
  /** What activities get of `rl`: all but `hp`, whose live value goes with the calls that use it. */
  settings: RlSettings;
  gpu: ActivityInterfaceFor<RlActivities>;
  api: ActivityInterfaceFor<RlActivities>;
  /** `rl.rollout.chunkPrompts`: prompts per chunk of a fanned-out batch; 0 = one chain for the whole batch. */
  chunkPrompts: number;
}

type EpisodeInit = { indices: number[]; groupSize: number; groupOffset?: number };

/** The RL config as an input recorded by an earlier version holds it: without the fields added since. */
type RecordedRl = Omit<RlConfig, 'keepCheckpoints' | 'eval'> & { keepCheckpoints?: number; eval: Omit<RlConfig['eval'], 'atStart'> & { atStart?: boolean } };

/**
 * The RL config as this code reads it (run/patches.ts): what inputs recorded before a field existed lack gets the value
 * that means what those runs did (`eval.atStart`: evaluate at step 0; `keepCheckpoints`: keep every checkpoint).
 */
function recordedDefaults(rl: RecordedRl): RlConfig {
  return { ...rl, eval: { ...rl.eval, atStart: rl.eval.atStart ?? true }, keepCheckpoints: rl.keepCheckpoints ?? 0 };
}

/** The RL config without its starting hyperparameters (`RlSettings`). */
function settingsOf(rl: RlConfig): RlSettings {
  const settings: Partial<RlConfig> = { ...rl };
  delete settings.hp;
  return settings as RlSettings;
}

/** Rollouts then judge, turn by turn, until every episode is done. Returns the last phase and the time per kind. */
async function runEpisodes(loop: Loop, data: RlData, folder: string, policy: PolicyRef, init: EpisodeInit, seed: number, temperature?: number, episodeSeeds = false, served?: RlEngineSyncResult) {
  const { input, settings: rl, gpu, api } = loop;
  // served: what rlEngineSync made the engine serve: the adapter name (rl.engine.sync adapter), the engine's fingerprint
  const perEpisode = { ...(episodeSeeds ? { episodeSeeds: true } : {}), ...(served?.adapter ? { engineAdapter: served.adapter } : {}), ...(served?.fingerprint ? { engineFingerprint: served.fingerprint } : {}) };
  const time = { rollout: 0, judge: 0 };
  let judgeStats = zeroJudgeTotals();
  let generated = 0;
  let p = 0;
  let r: PhaseResult = await gpu.rlRollout({ runId: input.runId, folder, phase: 0, dataKey: data.key, tokenizerDir: input.tokenizerDir, policy, rl, init, seed, llm: input.llm, ...(temperature !== undefined ? { temperature } : {}), ...perEpisode });
  for (;;) {
    time.rollout += r.seconds;
    generated += r.generatedTokens ?? 0;
    if (r.counts.judge === 0) break;
    p++;
    const j = await api.rlJudge({ runId: input.runId, folder, phase: p, dataKey: data.key, rl, llm: input.llm });
    time.judge += j.seconds;
    judgeStats = addCounts(judgeStats, j.judge);
    if (j.counts.generate === 0) break;
    p++;
    r = await gpu.rlRollout({ runId: input.runId, folder, phase: p, dataKey: data.key, tokenizerDir: input.tokenizerDir, policy, rl, seed, llm: input.llm, ...(temperature !== undefined ? { temperature } : {}), ...perEpisode });
  }
  return { lastPhase: p, time, judgeStats, generated };
}

/**
 * The episodes of a step or evaluation. With `rl.rollout.chunkPrompts` (fan-out), the prompts are cut into chunks
 * that advance independently (each its own rollout → judge → rollout chain, in parallel over the gpu workers), then
 * merged in chunk order; without it, one chain for the whole batch, as before (same commands, so recorded histories
 * replay).
 */
async function collectBatch(loop: Loop, data: RlData, folder: string, policy: PolicyRef, init: EpisodeInit, seed: number, temperature?: number, promptsPerChunk = loop.chunkPrompts): Promise<RlBatch> {
  const t0 = Date.now();
  // A serving engine (rl.engine) serves the batch's policy before its first rollout (a probe when it does already).
  // Inputs recorded before `engine` existed have none: no command, so their histories replay.
  const synced = engineKind(loop.settings) !== 'embedded' ? await loop.gpu.rlEngineSync({ runId: loop.input.runId, policy, rl: loop.settings }) : undefined;
  const engine = synced ? { engine: { kind: engineKind(loop.settings), policy: synced.policy, ...(synced.adapter ? { adapter: synced.adapter } : {}), reloaded: synced.reloaded, probeMax: synced.probe.max } } : {};
  if (loop.chunkPrompts <= 0) {
    const ep = await runEpisodes(loop, data, folder, policy, init, seed, temperature, false, synced);
    return { ...ep, rolloutsKey: rlKeys.phase(folder, ep.lastPhase), wall: (Date.now() - t0) / 1000, chunks: 1, behaviour: policy, ...engine };
  }
  const ranges = chunkRanges(init.indices.length, promptsPerChunk);
  const parts = await Promise.all(ranges.map(([a, b], c) =>
    runEpisodes(loop, data, rlKeys.chunk(folder, c), policy, { indices: init.indices.slice(a, b), groupSize: init.groupSize, groupOffset: a }, seed, temperature, true, synced)));
  const merged = await loop.api.rlMergeChunks({ runId: loop.input.runId, folder, parts: parts.map((ep, c) => rlKeys.phase(rlKeys.chunk(folder, c), ep.lastPhase)) });
  return {
    rolloutsKey: merged.key,
    lastPhase: Math.max(...parts.map((ep) => ep.lastPhase)),
    time: { rollout: parts.reduce((n, ep) => n + ep.time.rollout, 0), judge: parts.reduce((n, ep) => n + ep.time.judge, 0) },
    wall: (Date.now() - t0) / 1000,
    judgeStats: parts.reduce((acc, ep) => addCounts(acc, ep.judgeStats), zeroJudgeTotals()),
    generated: parts.reduce((n, ep) => n + ep.generated, 0),
    chunks: ranges.length,
    behaviour: policy,
    ...engine,
  };
}

/** Where the rollouts generate (`rl.engine.kind`); inputs recorded before it existed: the embedded model. */
const engineKind = (rl: RlSettings): string => (rl as { engine?: { kind?: string } }).engine?.kind ?? 'embedded';

/** The advantages input's rollouts: named explicitly only for merged chunks (older inputs stay as recorded). */
const rolloutsOf = (loop: Loop, b: RlBatch) => (loop.chunkPrompts > 0 ? { rolloutsKey: b.rolloutsKey } : {});

/** The training batch of step `stepNo`: the prompts at `cursor`, after the held-out and validation ones. */
function stepBatch(loop: Loop, data: RlData, stepNo: number, cursor: DataCursor, policy: PolicyRef): Promise<RlBatch> {
  const { rl } = loop;
  const { indices } = takeBatch(cursor, rl.promptsPerStep, data.train, rl.seed, Number.MAX_SAFE_INTEGER);
  // Training prompts follow the held-out and validation ones (`validation` is absent from results recorded before it).
  const first = data.heldOut + (data.validation ?? 0);
  return collectBatch(loop, data, rlKeys.step(loop.input.runId, stepNo), policy, { indices: indices.map((i) => i + first), groupSize: rl.groupSize }, (rl.seed * 1_000_003 + stepNo) >>> 0);
}

/**
 * The policy of `step` evaluated greedily on the held-out prompts, or with `eval.on: validation` on the validation
 * prompts after them (a hyperparameter search): its point, recorded as an `eval` row. Undefined when there is nothing
 * to evaluate on. `phase` reports what it does.
 */
async function evaluatePolicy(loop: Loop, data: RlData, step: number, policy: PolicyRef, phase: (name: string, details: string) => void): Promise<{ point: RlEvalPoint; adv: RlAdvantagesResult } | undefined> {
  const { input, rl, api } = loop;
  const onValidation = rl.eval.on === 'validation';
  const evalCount = onValidation ? (data.validation ?? 0) : data.heldOut;
  if (evalCount === 0) return undefined;
  phase('eval', `${onValidation ? 'validation' : 'held-out'} prompts: ${evalCount} × ${rl.eval.samples}`);
  const folder = rlKeys.eval(input.runId, step);
  const indices = Array.from({ length: evalCount }, (_, i) => i + (onValidation ? data.heldOut : 0));
  // Evaluation chunks hold about as many episodes as a training chunk (chunkPrompts × groupSize), not as many prompts:
  // one held-out episode per prompt in chunks of one prompt would generate one sequence at a time.
  const evalChunk = loop.chunkPrompts * Math.max(1, Math.floor(rl.groupSize / rl.eval.samples));
  const ep = await collectBatch(loop, data, folder, policy, { indices, groupSize: rl.eval.samples }, rl.seed + 7919, rl.eval.temperature, evalChunk);
  const adv: RlAdvantagesResult = await api.rlAdvantages({ runId: input.runId, folder, phase: ep.lastPhase, dataKey: data.key, rl: loop.settings, granularity: 'trajectory', ...rolloutsOf(loop, ep) });
  const point: RlEvalPoint = {
    step,
    rewardMean: adv.rewardMean,
    rewardStd: adv.rewardStd,
    ...(adv.byPrompt ? { rewardSe: adv.byPrompt.se, prompts: adv.byPrompt.n } : {}),
    failed: adv.failed,
    rollouts: adv.rollouts,
  };
  await api.rlRecordStep({ runId: input.runId, step, row: { kind: 'eval', ...point, ...(onValidation ? { on: 'validation' } : {}), passByFocus: adv.passByFocus, judge: ep.judgeStats, endReasons: adv.endReasons, seconds: ep.time } });
  return { point, adv };
}

/** The checkpoints retention keeps after the step `state` has just committed (`rl.keepCheckpoints`), or undefined to remove none. */
function checkpointsKept(rl: RlConfig, state: RlLoopState, behaviourInFlight: number[]): number[] | undefined {
  const inUse = [...(state.policy.kind === 'ckpt' ? [state.policy.step] : []), ...state.evals.map((e) => e.step), ...behaviourInFlight];
  return checkpointsToKeep({ step: state.step, keep: rl.keepCheckpoints, inUse, minimum: minimumKept(rl) });
}

/** What a step did, as its metrics row (`runs/<run>/rl/metrics.jsonl`, `rlStatus.last`). Pure. */
export function stepRow(
  hp: RlHyperparameters,
  ep: RlBatch,
  adv: RlAdvantagesResult,
  train: RlTrainResult,
  how: { chunked: boolean; oneStepOff: boolean; staleness: number; rolloutWait: number; wall: number },
): Record<string, unknown> {
  const busy = ep.time.rollout + ep.time.judge + adv.seconds + train.trainSeconds + train.checkpointSeconds;
  return {
    kind: 'step',
    granularity: hp.granularity,
    lr: hp.lr,
    klCoef: hp.klCoef,
    reward: { mean: adv.rewardMean, std: adv.rewardStd },
    advAbsMean: adv.advAbsMean,
    advNonzero: adv.advNonzero,
    failedSamples: adv.failed,
    rollouts: adv.rollouts,
    meanTurns: adv.meanTurns,
    endReasons: adv.endReasons,
    toolSources: adv.toolSources,
    passByFocus: adv.passByFocus,
    judge: ep.judgeStats,
    tokens: { policy: adv.policyTokens, generated: ep.generated },
    loss: train.loss,
    pgLoss: train.pgLoss,
    kl: train.kl,
    clipFrac: train.clipFrac,
    gradNorm: train.gradNorm,
    ...(train.logprobGap ? { logprobGap: train.logprobGap } : {}),
    reusedCheckpoint: train.reused,
    ...(how.chunked ? { chunks: ep.chunks } : {}),
    ...(how.oneStepOff ? { staleness: how.staleness } : {}),
    // which engine generated the rollouts, serving which policy version under which name (issue 33)
    ...(ep.engine ? { engine: ep.engine } : {}),
    weightsSha256: train.weightsSha256,
    seconds: {
      rollout: ep.time.rollout,
      judge: ep.time.judge,
      ...(how.chunked || how.oneStepOff ? { rolloutWall: ep.wall, rolloutWait: how.rolloutWait } : {}),
      advantages: adv.seconds,
      train: train.trainSeconds,
      checkpoint: train.checkpointSeconds,
      orchestration: Math.max(0, how.wall - busy),
      total: how.wall,
    },
  };
}

export async function rlWorkflow(input: RlWorkflowInput): Promise<RlResult> {
  const progress = beginStage('rl', input.runId);
  const rl = recordedDefaults(input.rl);
  const settings = settingsOf(rl);
  const gpu = stageActivities<RlActivities>(input.taskQueues.gpu, input.activity, rl.startToCloseTimeout);
  const api = stageActivities<RlActivities>(input.taskQueues.api, input.activity);
  const trainer = stageActivities<RlActivities>(input.taskQueues.train ?? input.taskQueues.gpu, input.activity, rl.startToCloseTimeout);
  const initialPolicy: PolicyRef = { kind: 'hf', prefix: input.policyPrefix };

  // Handlers are registered before the first await, so signals, updates and queries work from the start.
  let state: RlLoopState = input.state ?? startState(rl, initialPolicy);
  // The step whose hyperparameters are already fixed (its advantages are scheduled) and not yet recorded, if any.
  let hpFixedFor = 0;
  steer(rl, progress, () => state, () => hpFixedFor);
  if (state.paused) setRunState('paused');
  if (!input.state) {
    progress.phase = 'data';
    state.data = await api.rlPrepareData({ runId: input.runId, sourceKey: input.sourceKey, tokenizerDir: input.tokenizerDir, rl: settings, llm: input.llm });
  }
  progress.total = rl.steps;
  progress.done = state.step;

  const phase = (name: string, details: string) => {
    progress.phase = name;
    setCurrentDetails(`**RL step ${state.step + 1}/${rl.steps}: ${name}**\n\n${details}`);
  };

  // Full weights: one policy served at a time, so no one-step-off; adapters: several at once (src/kernel/engineRules.ts).
  const engineProblem = engineConfigProblem(settings);
  if (engineProblem) throw ApplicationFailure.nonRetryable(engineProblem, 'BadConfig');
  const loop: Loop = { input, rl, settings, gpu, api, chunkPrompts: rl.rollout.chunkPrompts ?? 0 };
  const evaluate = async (): Promise<void> => {
    if (state.evals.some((e) => e.step === state.step)) return;
    const done = await evaluatePolicy(loop, state.data, state.step, state.policy, phase);
    if (!done) return;
    state.evals.push(done.point);
    progress.counts[`eval_reward_x1000_step_${state.step}`] = Math.round(done.adv.rewardMean * 1000);
    recordRlEval(input.runId, state.step, done.adv.rewardMean);
  };

  // One-step-off asynchronous RL: the next step's rollouts, generated by the pre-update policy while a step trains.
  const oneStepOff = rl.async === 'one-step-off';
  const inFlight: { next?: { step: number; batch: Promise<RlBatch>; scope: CancellationScope } } = {};
  const prefetch = (stepNo: number, cursor: DataCursor, policy: PolicyRef) => {
    const scope = new CancellationScope();
    const batch = scope.run(() => stepBatch(loop, state.data, stepNo, cursor, policy));
    batch.catch(() => undefined); // awaited (or cancelled) later; never an unhandled rejection
    inFlight.next = { step: stepNo, batch, scope };
  };
  /** What is in flight now (read through a call: the loop's own narrowing cannot see `prefetch`'s assignment). */
  const prefetched = () => inFlight.next;

  let stepsThisRun = 0;
  while (state.step < rl.steps && !state.stopRequested) {
    if (state.paused) {
      phase('paused', 'paused by signal; `resume` to continue, `stop` to end');
      await condition(() => !state.paused || state.stopRequested);
      setRunState(state.stopRequested ? 'stopping' : 'running');
      if (state.stopRequested) break;
    }
    if (state.step % rl.eval.every === 0 && (state.step > 0 || rl.eval.atStart)) await evaluate();
    const started = Date.now();
    // Histories recorded before 'rl-hp-at-advantages' fixed a step's hyperparameters here, before its rollouts, so an
    // update accepted during the rollouts waited a step more than the reply said.
    const hpAtStart = state.hp;
    const stepNo = state.step + 1;
    const folder = rlKeys.step(input.runId, stepNo);
    const { indices, next } = takeBatch(state.cursor, rl.promptsPerStep, state.data.train, rl.seed, Number.MAX_SAFE_INTEGER);
    phase('rollout', `${indices.length} prompts × ${rl.groupSize} rollouts`);
    const waitStarted = Date.now();
    let ep: RlBatch;
    if (state.prefetched?.step === stepNo) ep = state.prefetched.batch;
    else if (inFlight.next?.step === stepNo) ep = await inFlight.next.batch;
    else ep = await stepBatch(loop, state.data, stepNo, state.cursor, state.policy);
    const rolloutWait = (Date.now() - waitStarted) / 1000;
    delete inFlight.next;
    delete state.prefetched;
    const hp = patched(PATCH.rlHpAtAdvantages) ? state.hp : hpAtStart;
    hpFixedFor = stepNo;
    phase('advantages', hp.granularity);
    const adv = await api.rlAdvantages({ runId: input.runId, folder, phase: ep.lastPhase, dataKey: state.data.key, rl: loop.settings, granularity: hp.granularity, ...rolloutsOf(loop, ep) });
    // Staleness stays at one step: the next step's rollouts start only now, with the policy this step updates.
    if (oneStepOff && stepNo < rl.steps && !state.stopRequested) prefetch(stepNo + 1, next, state.policy);
    phase('train', `GRPO update (lr ${hp.lr}, KL ${hp.klCoef}, ${hp.granularity})${oneStepOff ? '; next step\'s rollouts in parallel' : ''}`);
    const train = await trainer.rlTrain({
      runId: input.runId,
      step: stepNo,
      policy: state.policy,
      reference: initialPolicy,
      rolloutsKey: ep.rolloutsKey,
      ...(oneStepOff ? { behaviour: ep.behaviour } : {}),
      advantagesKey: adv.key,
      tokenizerDir: input.tokenizerDir,
      rl: loop.settings,
      hp,
      state: { cursor: next, step: stepNo },
    });
    const row = stepRow(hp, ep, adv, train, {
      chunked: loop.chunkPrompts > 0,
      oneStepOff,
      staleness: policyStep(state.policy) - policyStep(ep.behaviour),
      rolloutWait,
      wall: (Date.now() - started) / 1000,
    });
    await api.rlRecordStep({ runId: input.runId, step: stepNo, row });
    state = { ...state, step: stepNo, cursor: next, policy: train.policy, last: row };
    showCommitted(progress, input.runId, stepNo, hp, adv);
    // Retention, from the committed state (0: keep every checkpoint, no command). One-step-off: the rollouts in flight
    // come from the policy this step started from; step n+1's update needs it.
    const keep = rl.keepCheckpoints > 0 ? checkpointsKept(rl, state, prefetched() ? [stepNo - 1] : []) : undefined;
    if (keep) await api.rlPruneCheckpoints({ runId: input.runId, step: stepNo, keep });
    stepsThisRun++;
    if (state.step < rl.steps && !state.stopRequested && (stepsThisRun >= rl.continueAsNewEvery || workflowInfo().continueAsNewSuggested)) {
      // The next step's rollouts, in flight, finish first and travel with the state (references and counts only).
      const next = prefetched();
      if (next) state = { ...state, prefetched: { step: next.step, batch: await next.batch } };
      return continueAsNew<typeof rlWorkflow>({ ...input, state });
    }
  }
  // Stopped early: rollouts generated for a step that will not run are abandoned.
  prefetched()?.scope.cancel();
  delete inFlight.next;
  if (state.step % rl.eval.every !== 0 || state.step === 0 || !state.evals.some((e) => e.step === state.step)) await evaluate();
  phase('done', `${state.step} steps${state.stopRequested ? ' (stopped)' : ''}`);
  endStage();
  return { runId: input.runId, steps: state.step, stopped: state.stopRequested, policy: state.policy, evals: state.evals, hp: state.hp };
}
