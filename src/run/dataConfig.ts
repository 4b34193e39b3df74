/** The data-preparation section of the config (stages 1–2): the source, rule filters, LLM filter cascade, split, compression, selection. */
import { z } from 'zod';
import type { Effort } from '../kernel/roleContracts';

/** A switch that is on unless the config turns it off. */
export const onByDefault = (description: string) => z.boolean().default(true).describe(description);

/** The LLM filter's passes (spec §2.2): one reasoning effort per pass. */
export const FilterEffort = z.enum(['low', 'medium', 'high']);

export const FilterPass = z.object({ effort: FilterEffort });
export type FilterPass = z.infer<typeof FilterPass>;

/** The reference `run.sh` cascade ("low*2, medium*2, and high*4"). The paper says 2/2/2 (spec §9.2). */
export const REFERENCE_CASCADE: readonly Effort[] = ['low', 'low', 'medium', 'medium', 'high', 'high', 'high', 'high'];

export const FilterCascade = z.object({
  passes: z
    .array(FilterPass)
    .min(1)
    .default(() => REFERENCE_CASCADE.map((effort) => ({ effort }))),
});
export type FilterCascade = z.infer<typeof FilterCascade>;

export const DemoSource = z.object({
  kind: z.literal('demo'),
  count: z.number().int().positive().default(400).describe('Dialogues to generate.'),
  seed: z.number().int().default(7).describe('Generator seed: the same seed and count give the same dialogues.'),
  brokenRate: z.number().min(0).max(1).default(0.15)
    .describe('Share of dialogues with one deliberate defect (a rule violation, or a semantic error for the LLM filter).'),
  terseRate: z.number().min(0).max(1).default(0)
    .describe('Share of dialogues whose demonstrator is terse: final replies state only the first fact asked for. Well formed, so no filter drops them; SFT imitates them and the checklist still asks for every fact.'),
}).describe('The built-in synthetic demo tool world: generated dialogues, some with a deliberate defect for the filters to catch.');
export const FileSource = z.object({
  kind: z.literal('file'),
  paths: z.array(z.string().min(1)).min(1)
    .describe('Local paths readable by the api workers, or `s3://bucket/key`; JSONL, JSON or parquet by extension.'),
}).describe('Your own dialogues: OpenAI-chat JSONL or a JSON array (`{uuid?, messages, tools}`), or Nemotron tool-calling parquet.');
export const DataSource = z.discriminatedUnion('kind', [DemoSource, FileSource]);

export const DataConfig = z.object({
  source: DataSource.default({ kind: 'demo', count: 400, seed: 7, brokenRate: 0.15, terseRate: 0 })
    .describe('Where the examples come from: the built-in demo tool world or your own files.'),
  shardSize: z.number().int().positive().default(100).describe('Examples per shard: the unit of work, of retry and of progress.'),
  shardConcurrency: z.number().int().positive().default(4).describe('Concurrent shard activities per stage.'),
  ruleFilters: z.object({
    enabled: z.array(z.string()).optional()
      .describe('Rule filter codes to run; default: the set of the reference run.sh (every filter but `duplicate_tools_by_schema` and the opt-in `tool_argument_types`).'),
  }).prefault({}).describe('The rule filters, the first step after the import.'),
  llmFilter: z.object({
    enabled: onByDefault('Run the LLM filter cascade (role `filter`) after the rule filters.'),
    cascade: FilterCascade.optional()
      .describe('Filter passes, run in order, each one `filter` call at its reasoning `effort` (`low`, `medium` or `high`); the first pass that judges an error or gives no verdict drops the example. Default: the reference cascade low, low, medium, medium, high, high, high, high.'),
  }).prefault({}).describe('The LLM filter cascade.'),
  split: z.object({
    seed: z.number().int().default(42).describe('Shuffle seed of the split.'),
    coldStart: z.number().positive().default(0.3).refine((v) => v < 1 || Number.isInteger(v), 'a share in (0, 1) or a whole count >= 1')
      .describe('Cold-start share when < 1, else an absolute count (paper: 8k of 30k); the rest is the RL split.'),
  }).prefault({}).describe('The cold-start / RL split of the kept examples.'),
  compression: z.object({ enabled: onByDefault('Compress the reasoning of the cold-start split.') }).prefault({})
    .describe('Chain-of-thought compression of the cold-start split (role `compressor`); `enabled: false` keeps the reasoning as it is.'),
  selection: z.object({
    enabled: onByDefault('Run the selection; off keeps the whole RL split.'),
    seed: z.number().int().default(42).describe('Seed of the random drop decisions.'),
  }).prefault({})
    .describe('Harder-sample selection of the RL split (spec §5.1): easy examples are dropped at random, with metric-based probabilities.'),
});
export type DataConfig = z.infer<typeof DataConfig>;
