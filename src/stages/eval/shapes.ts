/** Inputs and outputs of the eval stage's activities (plain JSON, zod-checked at the activity's door). */
import { z } from 'zod';
import { DEFAULT_CATEGORIES } from './bfcl/categories';
import { BfclChunk } from './bfcl/chunks';
import { EndpointConfig } from './bfcl/runner';
import { Accuracy } from './bfcl/score';
import { ChunkTiming } from '../../kernel/chunks';
import { backendPrefs, type BackendPref } from '../../model/net/backend';
import { PolicyRef } from '../../run/layout';
import { EngineTarget } from '../../llm/engine';
import { LlmRoleConfig } from '../../llm/llmConfig';
import { Tau2EvalConfig } from '../../run/config';

/** What to evaluate: an SFT policy folder (`hf`), an RL checkpoint (`ckpt`), or an endpoint. No secrets. */
export const EvalPolicy = z.discriminatedUnion('kind', [
  ...PolicyRef.options,
  z.object({ kind: z.literal('endpoint'), endpoint: EndpointConfig }),
]);
export type EvalPolicy = z.infer<typeof EvalPolicy>;

export const Generation = z.object({
  maxNewTokens: z.number().int().positive().default(256).describe('Generated tokens per example (greedy).'),
  batchSize: z.number().int().positive().default(8).describe('Examples per generation batch.'),
  enableThinking: z.boolean().optional().describe('`false` appends an empty think block to the generation prompt.'),
  backend: z.enum(backendPrefs as [BackendPref, ...BackendPref[]]).default('auto').describe('tfjs backend.'),
  engine: EngineTarget.optional().describe('Generate on this serving engine, which serves the policy already (the caller synced it), instead of loading the weights here.'),
  mode: z.enum(['fc', 'prompt']).default('fc').describe('How an endpoint is asked for calls in multi-turn episodes: `fc` native tool calls, `prompt` BFCL\'s prompting mode (calls written as text).'),
});

export const EvalBfclInput = z.object({
  runId: z.string().min(1),
  policy: EvalPolicy,
  /** Tokenizer folder (absolute or relative to the project) when the policy's S3 folder has no tokenizer.json (RL checkpoints). */
  tokenizerDir: z.string().optional(),
  categories: z.array(z.string().min(1)).min(1).default([...DEFAULT_CATEGORIES]),
  limit: z.number().int().positive().optional(),
  /** BFCL data folder on the worker; default: the shared one (`CM2_BFCL_DIR`, `shared/benchmarks/bfcl`). */
  dataDir: z.string().optional(),
  /** Names the default output key `runs/<runId>/eval/bfcl/<label>.json` (default: from the policy: `sft`, `rl-step-N`, the model). */
  label: z.string().regex(/^[A-Za-z0-9._-]{1,80}$/).optional(),
  /** Where the full results go (overrides the label's default key). */
  outputKey: z.string().min(1).optional(),
  generation: Generation.prefault({}),
  /** Generate in chunks of this many examples (./bfcl/chunks.ts), in this one activity; default: each category in one piece. */
  chunkSize: z.number().int().positive().optional(),
});
export type EvalBfclInput = z.input<typeof EvalBfclInput>;

/** The chunks of an evaluation (`chunkSize` examples each), cut by a gpu worker: the data folder is theirs. */
export const EvalBfclPlanInput = EvalBfclInput.extend({ chunkSize: z.number().int().positive() });
export const EvalBfclPlan = z.object({
  chunks: z.array(BfclChunk),
  examples: z.number().int().nonnegative(),
  /** The data folder as the gpu workers name it (recorded in the results). */
  dataDir: z.string(),
  /** Multi-turn categories: the bfcl-eval that serves them (its version and data folder). */
  multiTurn: z.object({ bfclEval: z.string(), data: z.string() }).optional(),
});
export type EvalBfclPlan = z.infer<typeof EvalBfclPlan>;
export const EvalBfclChunkInput = EvalBfclInput.extend({ chunk: BfclChunk });
export const EvalBfclMergeInput = EvalBfclInput.extend({ chunks: z.number().int().nonnegative(), dataDir: z.string(), multiTurn: z.object({ bfclEval: z.string(), data: z.string() }).optional() });

export const EvalBfclSummary = z.object({
  /** S3 key of the full results (./src/stages/eval/bfcl/score.ts `BfclResults`). */
  key: z.string(),
  label: z.string(),
  overall: Accuracy,
  categories: z.record(z.string(), Accuracy),
  seconds: z.number(),
  /** Per chunk when the evaluation ran in chunks (`eval.bfcl.chunkSize`): where and how long. */
  chunks: z.array(ChunkTiming).optional(),
});
export type EvalBfclSummary = z.infer<typeof EvalBfclSummary>;

/** τ²-Bench of one policy (`evalTau2`): tau2's episodes on a gpu worker, each finished one stored at once. */
export const EvalTau2Input = z.object({
  runId: z.string().min(1),
  policy: EvalPolicy,
  tokenizerDir: z.string().optional(),
  label: z.string().regex(/^[A-Za-z0-9._-]{1,80}$/).optional(),
  tau2: Tau2EvalConfig,
  /** The user simulator (`llm.roles.user`: an endpoint by its key's variable name, or offline). No secrets. */
  user: LlmRoleConfig,
  generation: Generation.prefault({}),
});
export type EvalTau2Input = z.input<typeof EvalTau2Input>;

export const Tau2Usage = z.object({
  calls: z.number().int(),
  cacheHits: z.number().int(),
  promptTokens: z.number().int(),
  cachedPromptTokens: z.number().int(),
  completionTokens: z.number().int(),
  costUsd: z.number(),
});

export const Tau2DomainMetrics = z.object({ tasks: z.number().int(), trials: z.number().int(), avg_reward: z.number(), pass_hat_k: z.record(z.string(), z.number()) });

export const EvalTau2Summary = z.object({
  /** S3 key of the full results (every episode with tau2's simulation) */
  key: z.string(),
  label: z.string(),
  tau2: z.string(),
  domains: z.record(z.string(), Tau2DomainMetrics),
  /** the mean over the domains of their average reward, ×100 (the paper's τ²-Bench number) */
  average: z.number(),
  episodes: z.number().int(),
  seconds: z.number(),
  /** The endpoint roles' calls over every episode (./tau2/results.ts `tau2UsageOf`): the user simulator's cost. */
  usage: z.object({ agent: Tau2Usage.optional(), user: Tau2Usage.optional() }).optional(),
});
export type EvalTau2Summary = z.infer<typeof EvalTau2Summary>;
