/** Inputs and outputs of the prepare stage's activities (plain JSON, zod-checked at the activity's door). */
import { z } from 'zod';
import { UsageSchema } from '../../kernel/roleContracts';
import { DataSource } from '../../run/config';
import { LlmConfig } from '../../llm/llmConfig';
import { ShardRef } from '../activityKit';

// ---------- import ----------

export const ImportInput = z.object({ runId: z.string(), source: DataSource, shardSize: z.number().int().positive() });
export const ImportResult = z.object({
  shards: z.array(ShardRef),
  total: z.number().int(),
  importErrors: z.number().int(),
  importErrorsKey: z.string(),
});
export type ImportResult = z.infer<typeof ImportResult>;

// ---------- rule filters ----------

export const RuleFilterInput = z.object({ runId: z.string(), shard: ShardRef, enabled: z.array(z.string()).optional() });
export const StepResult = z.object({
  kept: ShardRef,
  dropped: z.number().int(),
  /** Examples that failed for a non-data reason (LLM output unparseable after retries, ...). */
  failed: z.number().int(),
  reasons: z.record(z.string(), z.number().int()),
  usage: UsageSchema,
});
export type StepResult = z.infer<typeof StepResult>;

// ---------- LLM filter ----------

export const LlmFilterInput = z.object({
  runId: z.string(),
  pass: z.number().int().nonnegative(),
  effort: z.enum(['low', 'medium', 'high']),
  shard: ShardRef,
  llm: LlmConfig,
});

// ---------- split / compression / selection / report ----------

export const SplitInput = z.object({
  runId: z.string(),
  shards: z.array(ShardRef),
  seed: z.number().int(),
  coldStart: z.number().positive(),
  shardSize: z.number().int().positive(),
});
export const SplitResult = z.object({ coldStart: z.array(ShardRef), rl: z.array(ShardRef) });
export type SplitResult = z.infer<typeof SplitResult>;

export const CompressInput = z.object({ runId: z.string(), shard: ShardRef, llm: LlmConfig });
export const SelectInput = z.object({ runId: z.string(), shard: ShardRef, seed: z.number().int() });

export const ReportInput = z.object({
  runId: z.string(),
  imported: ImportResult,
  steps: z.array(z.object({ name: z.string(), results: z.array(StepResult) })),
  coldStart: z.array(ShardRef),
  rl: z.array(ShardRef),
});
export const PrepareReport = z.object({
  runId: z.string(),
  total: z.number().int(),
  importErrors: z.number().int(),
  steps: z.array(z.object({ name: z.string(), in: z.number().int(), kept: z.number().int(), dropped: z.number().int(), failed: z.number().int(), reasons: z.record(z.string(), z.number().int()), usage: UsageSchema })),
  coldStart: z.object({ count: z.number().int(), key: z.string() }),
  rl: z.object({ count: z.number().int(), key: z.string() }),
  usage: UsageSchema,
  reportKey: z.string(),
});
export type PrepareReport = z.infer<typeof PrepareReport>;
