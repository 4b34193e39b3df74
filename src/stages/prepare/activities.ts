/**
 * Activities of the data-preparation stage (CM2 stages 1–2): import, rule filters, LLM-filter cascade,
 * cold-start / RL split, CoT compression, harder-sample selection, report.
 *
 * Each activity validates its input, calls the stage's pure method modules (this folder) and the demo world's
 * offline roles, reads and writes S3, heartbeats, and is idempotent: its small result object is written last under
 * `.../result-*.json`, and a retry or re-run that finds it returns it without redoing the work. Within a shard, LLM
 * answers are cached by request hash as soon as they arrive, so a crash mid-shard never pays for a call twice.
 */
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { ApplicationFailure } from '@temporalio/common';
import { parseFileBytes } from './import';
import { applyRuleFilters, DEFAULT_ENABLED_FILTERS, RULE_FILTERS } from './filters';
import { reassembleCompressed } from './compression';
import { addUsage, type DataRoles, type Usage, UsageSchema, zeroUsage } from '../../kernel/roleContracts';
import { type DroppedRecord, type Example, type ImportError } from '../../kernel/schema';
import { harderSampleDrop, seededSplit } from './split';
import { computeStats } from './stats';
import { DataSource } from '../../run/config';
import { LlmConfig } from '../../llm/llmConfig';
import { storeCache } from '../../storage/store';
import { prepareKeys } from '../../run/layout';
import type { OfflineWorld } from '../world';
import { recordLlmUsage } from '../activityMetrics';
import { type ActivityDeps, heartbeat, mapWithHeartbeat, once, parseInput, readShard, saveReport, shardName, ShardRef, writeShard } from '../activityKit';
import { makeDataRoles } from './llmRoles';

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

/**
 * The number of cold-start examples: a share of the kept examples when `coldStart` < 1 (rounded), else an absolute
 * count, which must not exceed what is there (the reference raises too). Non-retryable: no retry can fix it.
 */
export function coldStartCount(coldStart: number, total: number): number {
  if (coldStart < 1) return Math.round(coldStart * total);
  if (!Number.isInteger(coldStart)) throw ApplicationFailure.nonRetryable(`data.split.coldStart: a count >= 1 must be an integer, got ${coldStart}`, 'BadConfig');
  if (coldStart > total) {
    throw ApplicationFailure.nonRetryable(`data.split.coldStart asks for ${coldStart} cold-start examples but only ${total} survived filtering; lower it or use a share < 1`, 'BadConfig');
  }
  return coldStart;
}


const countReasons = (records: DroppedRecord[]) => {
  const out: Record<string, number> = {};
  for (const r of records) for (const code of new Set(r.reasons.map((x) => x.code))) out[code] = (out[code] ?? 0) + 1;
  return out;
};

export interface PrepareDeps extends ActivityDeps {
  /** The offline world: the dialogues of `data.source.kind: demo` and the roles of a run with no endpoint (src/stages/world.ts). */
  world: OfflineWorld;
  /** Builds the roles of a run's LLM config (LLM-backed where an endpoint is configured, else offline). */
  roles?: (llm: LlmConfig) => DataRoles;
}

export function createPrepareActivities(deps: PrepareDeps) {
  const { store } = deps;
  const rolesFor = deps.roles ?? ((llm: LlmConfig) => makeDataRoles(llm, { offline: deps.world.dataRoles, cache: storeCache(store), onUsage: recordLlmUsage }));
  const dataKey = prepareKeys.data;

  /** Writes dropped records of one step/shard (always, even when empty, so the layout is uniform). */
  const writeDropped = (runId: string, step: string, index: number, records: DroppedRecord[]) =>
    store.putJsonl(dataKey(runId, 'dropped', step, `${shardName(index)}.jsonl`), records);

  return {
    /** Imports the configured source into JSONL shards (`data/imported/`); malformed rows are recorded, not fatal. */
    async importSource(raw: z.input<typeof ImportInput>): Promise<ImportResult> {
      const input = parseInput(ImportInput, raw, 'importSource');
      return once(store, dataKey(input.runId, 'imported', 'result.json'), ImportResult, async () => {
        let examples: Example[] = [];
        const errors: ImportError[] = [];
        if (input.source.kind === 'demo') {
          examples = deps.world.generate({ seed: input.source.seed, count: input.source.count, brokenRate: input.source.brokenRate, terseRate: input.source.terseRate });
        } else {
          for (const path of input.source.paths) {
            heartbeat({ importing: path });
            const bytes = path.startsWith('s3://') ? await store.getBytes(path.replace(/^s3:\/\/[^/]+\//, '')) : await readFile(path).catch((e: Error) => {
              throw ApplicationFailure.nonRetryable(`cannot read ${path}: ${e.message}`, 'BadInput');
            });
            const res = await parseFileBytes(path, bytes);
            examples.push(...res.examples);
            errors.push(...res.errors);
          }
        }
        const shards: ShardRef[] = [];
        for (let i = 0; i * input.shardSize < examples.length; i++) {
          shards.push(await writeShard(store, dataKey(input.runId, 'imported', `${shardName(i)}.jsonl`), i, examples.slice(i * input.shardSize, (i + 1) * input.shardSize)));
          heartbeat({ shards: shards.length });
        }
        const importErrorsKey = dataKey(input.runId, 'import_errors.jsonl');
        await store.putJsonl(importErrorsKey, errors);
        return { shards, total: examples.length, importErrors: errors.length, importErrorsKey };
      });
    },

    /** The eight rule-based filters on one shard; every dropped example is recorded with its reasons. */
    async ruleFilterShard(raw: z.input<typeof RuleFilterInput>): Promise<StepResult> {
      const input = parseInput(RuleFilterInput, raw, 'ruleFilterShard');
      const unknown = (input.enabled ?? []).filter((f) => !(f in RULE_FILTERS));
      if (unknown.length) throw ApplicationFailure.nonRetryable(`unknown rule filter(s): ${unknown.join(', ')}; known: ${Object.keys(RULE_FILTERS).join(', ')}`, 'BadInput');
      const { index } = input.shard;
      return once(store, dataKey(input.runId, 'rule_filter', `result-${shardName(index)}.json`), StepResult, async () => {
        const examples = await readShard(store, input.shard);
        const kept: Example[] = [];
        const dropped: DroppedRecord[] = [];
        for (const ex of examples) {
          const verdict = applyRuleFilters(ex, input.enabled ?? DEFAULT_ENABLED_FILTERS);
          if (verdict.kept) kept.push(ex);
          else dropped.push({ uuid: ex.uuid, stage: 'rule_filter', reasons: verdict.reasons });
        }
        await writeDropped(input.runId, 'rule_filter', index, dropped);
        const keptRef = await writeShard(store, dataKey(input.runId, 'rule_filter', `${shardName(index)}.jsonl`), index, kept);
        return { kept: keptRef, dropped: dropped.length, failed: 0, reasons: countReasons(dropped), usage: zeroUsage() };
      });
    },

    /** One pass of the LLM-filter cascade on one shard (the workflow feeds each pass the previous pass's kept set). */
    async llmFilterShard(raw: z.input<typeof LlmFilterInput>): Promise<StepResult> {
      const input = parseInput(LlmFilterInput, raw, 'llmFilterShard');
      const { index } = input.shard;
      const step = `llm_filter_pass${input.pass}`;
      return once(store, dataKey(input.runId, step, `result-${shardName(index)}.json`), StepResult, async () => {
        const examples = await readShard(store, input.shard);
        const roles = rolesFor(input.llm);
        const outcomes = await mapWithHeartbeat(examples, input.llm.roles.filter.concurrency, (ex) => roles.filter.judge(ex, { pass: input.pass, effort: input.effort }), step);
        const kept: Example[] = [];
        const dropped: DroppedRecord[] = [];
        let failed = 0;
        let usage: Usage = zeroUsage();
        const ledger: unknown[] = [];
        for (const [i, ex] of examples.entries()) {
          const out = outcomes[i]!;
          usage = addUsage(usage, out.usage);
          ledger.push({ uuid: ex.uuid, role: 'filter', pass: input.pass, effort: input.effort, attempts: out.attempts, usage: out.usage });
          if (!out.ok) {
            failed++;
            dropped.push({ uuid: ex.uuid, stage: step, reasons: [{ code: 'llm_filter_failed', detail: out.reason }] });
          } else if (out.value.noError) kept.push(ex);
          else dropped.push({ uuid: ex.uuid, stage: step, reasons: [{ code: 'llm_filter', detail: out.value.reasoning }] });
        }
        await store.putJsonl(prepareKeys.ledger(input.runId, step, shardName(index)), ledger);
        await writeDropped(input.runId, step, index, dropped);
        const keptRef = await writeShard(store, dataKey(input.runId, step, `${shardName(index)}.jsonl`), index, kept);
        return { kept: keptRef, dropped: dropped.length, failed, reasons: countReasons(dropped), usage };
      });
    },

    /** Seeded cold-start / RL split over all kept examples, re-sharded (`data/cold_start/`, `data/rl_pool/`). */
    async splitData(raw: z.input<typeof SplitInput>): Promise<SplitResult> {
      const input = parseInput(SplitInput, raw, 'splitData');
      return once(store, dataKey(input.runId, 'split', 'result.json'), SplitResult, async () => {
        const all: Example[] = [];
        for (const shard of input.shards) all.push(...(await readShard(store, shard)));
        const count = coldStartCount(input.coldStart, all.length);
        const { coldStart, rl } = seededSplit(all, { seed: input.seed, coldStart: count });
        const write = async (name: string, rows: Example[]) => {
          const refs: ShardRef[] = [];
          for (let i = 0; i * input.shardSize < rows.length; i++) {
            refs.push(await writeShard(store, dataKey(input.runId, name, `${shardName(i)}.jsonl`), i, rows.slice(i * input.shardSize, (i + 1) * input.shardSize)));
          }
          return refs;
        };
        return { coldStart: await write('cold_start_raw', coldStart), rl: await write('rl_pool', rl) };
      });
    },

    /** CoT compression of one cold-start shard; examples whose compression fails are dropped with the reason. */
    async compressShard(raw: z.input<typeof CompressInput>): Promise<StepResult> {
      const input = parseInput(CompressInput, raw, 'compressShard');
      const { index } = input.shard;
      return once(store, dataKey(input.runId, 'compression', `result-${shardName(index)}.json`), StepResult, async () => {
        const examples = await readShard(store, input.shard);
        const roles = rolesFor(input.llm);
        const outcomes = await mapWithHeartbeat(examples, input.llm.roles.compressor.concurrency, (ex) => roles.compressor.compress(ex), 'compression');
        const kept: Example[] = [];
        const dropped: DroppedRecord[] = [];
        let usage: Usage = zeroUsage();
        const ledger: unknown[] = [];
        for (const [i, ex] of examples.entries()) {
          const out = outcomes[i]!;
          usage = addUsage(usage, out.usage);
          ledger.push({ uuid: ex.uuid, role: 'compressor', attempts: out.attempts, usage: out.usage });
          if (out.ok) kept.push(reassembleCompressed(ex, out.value));
          else dropped.push({ uuid: ex.uuid, stage: 'compression', reasons: [{ code: 'cot_compression_failed', detail: out.reason }] });
        }
        await store.putJsonl(prepareKeys.ledger(input.runId, 'compression', shardName(index)), ledger);
        await writeDropped(input.runId, 'compression', index, dropped);
        const keptRef = await writeShard(store, dataKey(input.runId, 'cold_start', `${shardName(index)}.jsonl`), index, kept);
        return { kept: keptRef, dropped: dropped.length, failed: dropped.length, reasons: countReasons(dropped), usage };
      });
    },

    /** Harder-sample selection (spec §5.1) on one RL-pool shard; the draw is seeded per shard and example. */
    async selectShard(raw: z.input<typeof SelectInput>): Promise<StepResult> {
      const input = parseInput(SelectInput, raw, 'selectShard');
      const { index } = input.shard;
      return once(store, dataKey(input.runId, 'selection', `result-${shardName(index)}.json`), StepResult, async () => {
        const examples = await readShard(store, input.shard);
        const kept: Example[] = [];
        const dropped: DroppedRecord[] = [];
        for (const [i, ex] of examples.entries()) {
          const decision = harderSampleDrop(computeStats(ex), { seed: input.seed, stream: index, position: i });
          if (decision.drop) dropped.push({ uuid: ex.uuid, stage: 'selection', reasons: [{ code: 'harder_selection', detail: decision.detail }] });
          else kept.push(ex);
        }
        await writeDropped(input.runId, 'selection', index, dropped);
        const keptRef = await writeShard(store, dataKey(input.runId, 'rl', `${shardName(index)}.jsonl`), index, kept);
        return { kept: keptRef, dropped: dropped.length, failed: 0, reasons: countReasons(dropped), usage: zeroUsage() };
      });
    },

    /**
     * Concatenates the final splits (`data/cold_start.jsonl`, `data/rl.jsonl`) and writes the stage report
     * (`prepare/report.json`): counts per step and reason, LLM usage and cost.
     */
    async writePrepareReport(raw: z.input<typeof ReportInput>): Promise<PrepareReport> {
      const input = parseInput(ReportInput, raw, 'writePrepareReport');
      const reportKey = prepareKeys.report(input.runId);
      return once(store, reportKey + '.result', PrepareReport, async () => {
        const concat = async (refs: ShardRef[], key: string) => {
          const rows: Example[] = [];
          for (const ref of refs) rows.push(...(await readShard(store, ref)));
          await store.putJsonl(key, rows);
          return { count: rows.length, key };
        };
        const coldStart = await concat(input.coldStart, prepareKeys.coldStart(input.runId));
        const rl = await concat(input.rl, prepareKeys.rl(input.runId));
        let usage = zeroUsage();
        const steps = input.steps.map((s) => {
          const reasons: Record<string, number> = {};
          let stepUsage = zeroUsage();
          for (const r of s.results) {
            for (const [code, n] of Object.entries(r.reasons)) reasons[code] = (reasons[code] ?? 0) + n;
            stepUsage = addUsage(stepUsage, r.usage);
          }
          usage = addUsage(usage, stepUsage);
          const kept = s.results.reduce((n, r) => n + r.kept.count, 0);
          const dropped = s.results.reduce((n, r) => n + r.dropped, 0);
          return { name: s.name, in: kept + dropped, kept, dropped, failed: s.results.reduce((n, r) => n + r.failed, 0), reasons, usage: stepUsage };
        });
        const report: PrepareReport = {
          runId: input.runId,
          total: input.imported.total,
          importErrors: input.imported.importErrors,
          steps,
          coldStart,
          rl,
          usage,
          reportKey,
        };
        return saveReport(store, reportKey, report);
      });
    },
  };
}

export type PrepareActivities = ReturnType<typeof createPrepareActivities>;
