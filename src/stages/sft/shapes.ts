/** Inputs and outputs of the sft stage's activities (plain JSON, zod-checked at the activity's door). */
import { z } from 'zod';
import { SftConfig } from '../../run/config';
import { ObjectRef } from '../../storage/store';
import { ToolCallSample } from './evaluate';
import { ChunkTiming } from '../../kernel/chunks';

export const SftTrainInput = z.object({
  runId: z.string(),
  sft: SftConfig,
  sourceKey: z.string().min(1),
  /**
   * S3 prefix of the run's prepared data, plan and initial policy (`sftPrepare`, src/stages/sft/prepareActivity.ts), written
   * when training has a queue of its own: what a trainer that cannot tokenise or build the base itself (a PyTorch
   * worker) runs from. The tfjs trainer computes the same itself.
   */
  prepared: z.string().min(1).optional(),
});
export const SftTrainResult = z.object({
  backend: z.string(),
  params: z.number().int(),
  examples: z.number().int(),
  /** Training sequences longer than maxSeqLen (truncated). */
  truncated: z.number().int(),
  /** Examples left out because no assistant token falls within maxSeqLen. */
  untrainable: z.number().int(),
  steps: z.number().int(),
  /** Step of the checkpoint this attempt started from (0 = from the base model). */
  resumedFrom: z.number().int(),
  losses: z.array(z.number()),
  trainedTokens: z.number().int(),
  seconds: z.number(),
  /** S3 prefix of the final HF checkpoint (config.json, model.safetensors, tokenizer files). */
  finalPrefix: z.string(),
  model: ObjectRef,
});
export type SftTrainResult = z.infer<typeof SftTrainResult>;

export const SftEvalInput = z.object({ runId: z.string(), sft: SftConfig, evalSourceKey: z.string().min(1), which: z.enum(['base', 'sft']), finalPrefix: z.string().optional() });
export const SftEvalResult = z.object({
  which: z.enum(['base', 'sft']),
  prompts: z.number().int(),
  wellFormedShare: z.number(),
  correctNameShare: z.number(),
  thinkShare: z.number(),
  /** A few generations, for the report. */
  examples: z.array(z.object({ uuid: z.string(), expectedTool: z.string(), output: z.string(), wellFormed: z.boolean(), correctName: z.boolean() })),
  /** Per chunk when the check ran in chunks (`sft.eval.chunkSize`): where and how long. */
  chunks: z.array(ChunkTiming).optional(),
});
export type SftEvalResult = z.infer<typeof SftEvalResult>;

/** Chunk `chunk` of the check: held-out prompts `chunk × sft.eval.chunkSize …` of those the check takes. */
export const SftEvalChunkInput = SftEvalInput.extend({ chunk: z.number().int().nonnegative() });
/** What a chunk stores: its scored generations, in prompt order. */
export const SftEvalChunkFile = ChunkTiming.extend({ which: z.enum(['base', 'sft']), samples: z.array(ToolCallSample) });
export const SftEvalMergeInput = z.object({ runId: z.string(), which: z.enum(['base', 'sft']), chunks: z.number().int().nonnegative() });

export const SftImportInput = z.object({ runId: z.string(), sft: SftConfig });
export const SftImportResult = z.object({
  dir: z.string(),
  /** false: the folder was there already (imported before, or provided) */
  imported: z.boolean(),
  source: z.string().optional(),
  /** what `cm2 model import` printed */
  lines: z.array(z.string()),
});
export type SftImportResult = z.infer<typeof SftImportResult>;

export const SftReportInput = z.object({ runId: z.string(), train: SftTrainResult, base: SftEvalResult.optional(), sft: SftEvalResult.optional() });
export const SftReport = z.object({
  runId: z.string(),
  train: SftTrainResult,
  base: SftEvalResult.optional(),
  sft: SftEvalResult.optional(),
  reportKey: z.string(),
});
export type SftReport = z.infer<typeof SftReport>;

/** Files `sftPrepare` writes for a trainer in another language (src/stages/sft/prepareActivity.ts). */
/** A line of data.jsonl. */
export const SftDataRow = z.object({
  ids: z.array(z.number().int().nonnegative()),
  /** [start, end) of the tokens whose loss counts (the loss mask's runs of 1) */
  trained: z.array(z.tuple([z.number().int().nonnegative(), z.number().int().nonnegative()])),
});
export type SftDataRow = z.infer<typeof SftDataRow>;

const Cursor = z.object({ epoch: z.number().int().nonnegative(), index: z.number().int().nonnegative() });

/** plan.json. */
export const SftPlanFile = z.object({
  format: z.literal('cm2-sft-plan/1'),
  runId: z.string(),
  /** Dialogues in the source, those longer than maxSeqLen, those left out (no assistant token within maxSeqLen). */
  examples: z.number().int(),
  truncated: z.number().int(),
  untrainable: z.number().int(),
  /** Lines of data.jsonl. */
  dataRows: z.number().int(),
  maxSeqLen: z.number().int().positive(),
  padId: z.number().int().nonnegative(),
  maxGradNorm: z.number(),
  weightDecay: z.number(),
  checkpointEvery: z.number().int().positive(),
  /** The trainer state's RNG word (constant over a run; kept in checkpoints as the tfjs trainer keeps it). */
  rngState: z.number().int(),
  lora: z.boolean(),
  steps: z.array(z.object({ lr: z.number(), micro: z.array(z.array(z.number().int().nonnegative())), cursor: Cursor })),
});
export type SftPlanFile = z.infer<typeof SftPlanFile>;

export const SftPrepareResult = z.object({ prefix: z.string(), steps: z.number().int(), dataRows: z.number().int(), reused: z.boolean() });
export type SftPrepareResult = z.infer<typeof SftPrepareResult>;
