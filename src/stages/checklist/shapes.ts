/** Inputs and outputs of the checklist stage's activities (plain JSON, zod-checked at the activity's door). */
import { z } from 'zod';
import { UsageSchema } from '../../kernel/roleContracts';
import { LlmConfig } from '../../llm/llmConfig';
import { ShardRef } from '../activityKit';

export const ChecklistInputArgs = z.object({ runId: z.string(), sourceKey: z.string().min(1), shardSize: z.number().int().positive() });
export const ChecklistInputResult = z.object({
  shards: z.array(ShardRef),
  total: z.number().int(),
  /** Lines of the source that are not examples (reported with line and field, skipped). */
  inputErrors: z.number().int(),
  inputErrorsKey: z.string(),
  sourceSha256: z.string(),
});
export type ChecklistInputResult = z.infer<typeof ChecklistInputResult>;

export const AnnotateShardArgs = z.object({
  runId: z.string(),
  shard: ShardRef,
  llm: LlmConfig,
  variants: z.number().int().min(1),
  maxAttempts: z.number().int().min(1),
  retryFailed: z.boolean().default(false),
});
export const AnnotateShardResult = z.object({
  index: z.number().int(),
  in: z.number().int(),
  /** Annotated by this attempt. */
  annotated: z.number().int(),
  /** Failed in this attempt (recorded). */
  failed: z.number().int(),
  /** Already annotated before this attempt: not sent again. */
  alreadyAnnotated: z.number().int(),
  /** Failed in an earlier run and skipped (`retryFailed` off). */
  previouslyFailed: z.number().int(),
  /** Cost of this attempt's new work. */
  usage: UsageSchema,
});
export type AnnotateShardResult = z.infer<typeof AnnotateShardResult>;

export const ChecklistReportArgs = z.object({
  runId: z.string(),
  shards: z.array(ShardRef),
  inputErrors: z.number().int(),
  /** `checklist.minAnnotated`: fewer annotated examples fail the stage. */
  minAnnotated: z.number().int().min(0).default(1),
});
export const ChecklistReport = z.object({
  runId: z.string(),
  annotator: z.string(),
  total: z.number().int(),
  inputErrors: z.number().int(),
  annotated: z.number().int(),
  failed: z.number().int(),
  /** Failure reasons, by their first words (e.g. "invalid checklist after 3 attempt(s)"), with counts. */
  failureReasons: z.record(z.string(), z.number().int()),
  variants: z.number().int(),
  turns: z.number().int(),
  items: z.number().int(),
  meanItemsPerTurn: z.number(),
  /** Answers per variant (1 = accepted at once). */
  attempts: z.record(z.string(), z.number().int()),
  usage: UsageSchema,
  meanCostPerExampleUsd: z.number(),
  annotatedKey: z.string(),
  failedKey: z.string(),
  reportKey: z.string(),
});
export type ChecklistReport = z.infer<typeof ChecklistReport>;

/** The failure record of an example. */
export const FailedAnnotation = z.object({
  uuid: z.string(),
  reason: z.string(),
  violations: z.array(z.unknown()),
  usage: UsageSchema,
  attempts: z.number().int(),
  raw: z.string().optional(),
});
export type FailedAnnotation = z.infer<typeof FailedAnnotation>;
