/**
 * The RL activities' inputs, results and S3 file shapes (zod): plain JSON with S3 references, so a worker in another
 * language can serve the same task queues. The activities are in ./activities.ts.
 */
import { z } from 'zod';
import { Granularity, RlConfig, RlHyperparameters, RlSettings } from '../../run/config';
import { LlmConfig } from '../../llm/llmConfig';
import { PolicyRef } from '../../run/layout';
import { type JudgeTotals, zeroJudgeTotals } from '../../kernel/counts';
import { Counts } from './algo/batch';
import { Rollout } from './rolloutSchema';
import type { DataCursor } from '../../kernel/dataOrder';
import type { ActivityTimeouts } from '../../run/workflowShapes';

export const RlDataInput = z.object({
  runId: z.string(),
  sourceKey: z.string().min(1),
  tokenizerDir: z.string(),
  rl: RlSettings,
  /** To check that every tool of the data has an answer (./env/answers.ts); absent in inputs recorded before that check. */
  llm: LlmConfig.optional(),
});
export const RlData = z.object({
  /** Annotated examples usable for RL (prompt fits), as a JSONL in S3. */
  key: z.string(),
  train: z.number().int(),
  heldOut: z.number().int(),
  /** Validation prompts after the held-out ones, never trained on (absent in results recorded before they existed: 0). */
  validation: z.number().int().optional(),
  /** Dropped: prompt longer than maxModelLen − promptMargin. */
  tooLong: z.number().int(),
  invalid: z.number().int(),
  /** Invalid lines by reason (absent in results recorded before it was kept). */
  invalidReasons: z.record(z.string(), z.number().int()).optional(),
  /** Held-out prompts asked for (`rl.eval.prompts`): more than `heldOut` when too few examples were usable. */
  heldOutRequested: z.number().int().optional(),
});
export type RlData = z.infer<typeof RlData>;


export const PhaseResult = z.object({
  key: z.string(),
  counts: Counts,
  seconds: z.number(),
  generatedTokens: z.number().int().optional(),
  judge: z.object(Object.fromEntries(Object.keys(zeroJudgeTotals()).map((k) => [k, z.number()])) as Record<keyof JudgeTotals, z.ZodNumber>).optional(),
});
export type PhaseResult = z.infer<typeof PhaseResult>;

/** One phase of a batch of rollouts: what judging it needs. */
export const RlJudgeInput = z.object({
  runId: z.string(),
  /** Folder of this batch of rollouts: `runs/<id>/rl/steps/<step>` or `runs/<id>/rl/eval/<policy step>`. */
  folder: z.string(),
  phase: z.number().int().nonnegative(),
  dataKey: z.string(),
  rl: RlSettings,
  llm: LlmConfig,
});

/** One phase of a batch of rollouts: what generating it needs. */
export const RlRolloutInput = RlJudgeInput.extend({
  tokenizerDir: z.string(),
  policy: PolicyRef,
  /** Phase 0 only: which examples (indices into the data file) and how many rollouts each. */
  init: z.object({
    indices: z.array(z.number().int().nonnegative()),
    groupSize: z.number().int().positive(),
    /** A chunk's first prompt's index in the step: its episodes' GRPO groups start there. */
    groupOffset: z.number().int().nonnegative().optional(),
  }).optional(),
  /** Seed each episode by (seed, episode id, generation) (chunked rollouts): tokens independent of the batch. */
  episodeSeeds: z.boolean().optional(),
  /** Sampling overrides (evaluation). */
  temperature: z.number().min(0).optional(),
  seed: z.number().int(),
  /** The adapter name a serving engine serves `policy` under (rlEngineSync's `adapter`; rl.engine.sync adapter). */
  engineAdapter: z.string().optional(),
  /** rlEngineSync's fingerprint: an engine that no longer answers so is synced again before generating. */
  engineFingerprint: z.lazy(() => EngineFingerprint).optional(),
});

/** An engine's answer to the stale-weight probe (src/llm/engine.ts `EngineFingerprint`). */
export const EngineFingerprint = z.object({ prompt: z.array(z.number().int()), tokens: z.array(z.number().int()), logprobs: z.array(z.number()) });

/** Load `policy` into the serving engine of `rl.engine` unless the probe finds it there already. gpu queue. */
export const RlEngineSyncInput = z.object({ runId: z.string(), policy: PolicyRef, rl: RlSettings });
export const RlEngineSyncResult = z.object({
  /** policyKey of the policy the engine serves now. */
  policy: z.string(),
  /** False when the engine already served it (the probe agreed before any load). */
  reloaded: z.boolean(),
  /** The folder it was loaded from. */
  dir: z.string().optional(),
  /** The adapter name requests for this policy use (rl.engine.sync adapter; absent: the served weights). */
  adapter: z.string().optional(),
  /** The engine's answer to the probe once it served the policy: rollouts check it first (a restarted engine differs). */
  fingerprint: z.lazy(() => EngineFingerprint).optional(),
  probe: z.object({ mean: z.number(), max: z.number(), tokens: z.number().int() }),
  seconds: z.number(),
});
export type RlEngineSyncResult = z.infer<typeof RlEngineSyncResult>;

export const RlAdvantagesInput = RlJudgeInput.omit({ llm: true }).extend({
  granularity: Granularity,
  /** The finished rollouts (the merged chunks of a fanned-out batch); default: `phase` of `folder`. */
  rolloutsKey: z.string().optional(),
});

/** The chunks of a fanned-out batch, each at its last phase, merged in chunk order into one rollouts file. */
export const RlMergeInput = z.object({ runId: z.string(), folder: z.string(), parts: z.array(z.string().min(1)).min(1) });
export const RlMergeResult = z.object({ key: z.string(), counts: Counts, rollouts: z.number().int() });
export type RlMergeResult = z.infer<typeof RlMergeResult>;
export const RlAdvantagesResult = z.object({
  key: z.string(),
  rollouts: z.number().int(),
  rewardMean: z.number(),
  rewardStd: z.number(),
  failed: z.number().int(),
  /** Mean |advantage| over policy segments, per granularity (the chosen one is used for training). */
  advAbsMean: z.record(z.string(), z.number()),
  /** Share of rollouts with a nonzero advantage somewhere, per granularity. */
  advNonzero: z.record(z.string(), z.number()),
  endReasons: z.record(z.string(), z.number().int()),
  toolSources: z.record(z.string(), z.number().int()),
  policyTokens: z.number().int(),
  meanTurns: z.number(),
  /** Judge pass counts per checklist `focus_on` (items of reached turns). */
  passByFocus: z.record(z.string(), z.object({ passed: z.number().int(), total: z.number().int() })).default({}),
  /** Mean reward over prompts with its standard error (prompts are the unit: src/kernel/heldOut.ts). */
  byPrompt: z.object({ n: z.number().int(), mean: z.number(), sd: z.number().nullable(), se: z.number().nullable() }).optional(),
  seconds: z.number(),
});
export type RlAdvantagesResult = z.infer<typeof RlAdvantagesResult>;

/** `advantages.json`: rows keyed by rollout id (`advantages`, positional, in files written before the rows). */
export const AdvantagesFile = z.object({
  granularity: z.string().optional(),
  rows: z.array(z.object({ id: z.string(), advantages: z.array(z.number()) })).optional(),
  advantages: z.array(z.array(z.number())).optional(),
});

export const RlTrainInput = z.object({
  runId: z.string(),
  step: z.number().int().positive(),
  policy: PolicyRef,
  /** The frozen reference policy for the KL term (the SFT policy). */
  reference: PolicyRef,
  /**
   * The policy that generated the rollouts when it is not `policy` (one-step-off asynchronous RL): the importance
   * ratio is taken against its log-probabilities, recomputed here. Absent: on-policy (ratio 1 at the update).
   */
  behaviour: PolicyRef.optional(),
  rolloutsKey: z.string(),
  advantagesKey: z.string(),
  tokenizerDir: z.string(),
  rl: RlSettings,
  hp: RlHyperparameters,
  /** Small state carried into the checkpoint (data cursor, hyperparameters). */
  state: z.record(z.string(), z.unknown()),
});
export const RlTrainResult = z.object({
  policy: PolicyRef,
  step: z.number().int(),
  /** True when the checkpoint already existed (a retried or replayed step): nothing was applied again. */
  reused: z.boolean(),
  loss: z.number(),
  pgLoss: z.number(),
  kl: z.number(),
  clipFrac: z.number(),
  gradNorm: z.number(),
  policyTokens: z.number().int(),
  /** |sampler − trainer| log-probability over the sampled tokens (absent in results recorded before issue 29). */
  logprobGap: z.object({ mean: z.number(), max: z.number(), tokens: z.number().int() }).optional(),
  trainSeconds: z.number(),
  checkpointSeconds: z.number(),
  weightsSha256: z.string(),
});
export type RlTrainResult = z.infer<typeof RlTrainResult>;

export const RlRecordInput = z.object({ runId: z.string(), step: z.number().int().nonnegative(), row: z.record(z.string(), z.unknown()) });

/** Retention: `step` is the newest committed step (checkpoints above it are never touched), `keep` what stays. */
export const RlPruneInput = z.object({ runId: z.string(), step: z.number().int().positive(), keep: z.array(z.number().int().positive()) });
export const RlPruneResult = z.object({ removed: z.array(z.number().int()), objects: z.number().int() });


export const RolloutFile = z.object({ rollouts: z.array(Rollout) });

// ---------------------------------------------------------------------------------------------------------------
// The workflow's input, state and answers (plain JSON: history, continue-as-new, queries)

export interface RlEvalPoint {
  step: number;
  rewardMean: number;
  rewardStd: number;
  /** Standard error of `rewardMean` across held-out prompts (null with fewer than two; absent in older runs). */
  rewardSe?: number | null;
  /** Held-out prompts evaluated. */
  prompts?: number;
  failed: number;
  rollouts: number;
}

/** The finished episodes of one step or evaluation: where they are and what they cost. Plain JSON (carried across continue-as-new). */
export interface RlBatch {
  /** The finished rollouts (the last phase, or the merged chunks). */
  rolloutsKey: string;
  lastPhase: number;
  /** Busy seconds summed over activities (chunks run in parallel: the sum can exceed `wall`). */
  time: { rollout: number; judge: number };
  /** Seconds from the first rollout activity to the merged batch. */
  wall: number;
  judgeStats: JudgeTotals;
  generated: number;
  chunks: number;
  /** The policy that generated the rollouts. */
  behaviour: PolicyRef;
  /** A serving engine's rollouts: which engine, serving which policy (policyKey), as which adapter, after a load or not. */
  engine?: { kind: string; policy: string; adapter?: string; reloaded: boolean; probeMax: number };
}

export interface RlLoopState {
  step: number;
  cursor: DataCursor;
  hp: RlHyperparameters;
  policy: PolicyRef;
  data: RlData;
  evals: RlEvalPoint[];
  paused: boolean;
  stopRequested: boolean;
  last?: Record<string, unknown>;
  /** One-step-off: the rollouts of `step` + 1, generated while `step` trained (finished before continue-as-new). */
  prefetched?: { step: number; batch: RlBatch };
}

export interface RlWorkflowInput {
  runId: string;
  rl: RlConfig;
  llm: LlmConfig;
  tokenizerDir: string;
  /** Annotated examples (stored checklist form). */
  sourceKey: string;
  /** The initial (and KL reference) policy in HF layout: the SFT output. */
  policyPrefix: string;
  /** `train`: where `rlTrain` goes (absent: the gpu queue). */
  taskQueues: { api: string; gpu: string; train?: string };
  activity: ActivityTimeouts;
  /** Carried across continue-as-new. */
  state?: RlLoopState;
}

export interface RlResult {
  runId: string;
  steps: number;
  stopped: boolean;
  policy: PolicyRef;
  evals: RlEvalPoint[];
  hp: RlHyperparameters;
}

export interface RlStatus {
  step: number;
  totalSteps: number;
  hp: RlHyperparameters;
  paused: boolean;
  stopRequested: boolean;
  phase: string;
  policy: PolicyRef;
  evals: RlEvalPoint[];
  last?: Record<string, unknown>;
}
