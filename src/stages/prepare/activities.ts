/**
 * Activities of the data-preparation stage (CM2 stages 1–2): import, rule filters, LLM-filter cascade,
 * cold-start / RL split, CoT compression, harder-sample selection, report.
 *
 * Each activity validates its input, calls the stage's pure method modules (this folder; how each shard step sorts its
 * examples: ./shardSteps.ts) and the roles (LLM-backed, or the offline world's, handed in), reads and writes S3, heartbeats, and is idempotent: its small result object is written last under
 * `.../result-*.json`, and a retry or re-run that finds it returns it without redoing the work. Within a shard, LLM
 * answers are cached by request hash as soon as they arrive, so a crash mid-shard never pays for a call twice.
 */
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { ApplicationFailure } from '@temporalio/common';
import { parseFileBytes } from './import';
import { DEFAULT_ENABLED_FILTERS, RULE_FILTERS } from './filters';
import { type DataRoles } from '../../kernel/roleContracts';
import { type Example, type ImportError } from '../../kernel/schema';
import { seededSplit } from './split';
import { LlmConfig } from '../../llm/llmConfig';
import { storeCache, type ObjectStore } from '../../storage/store';
import { prepareKeys } from '../../run/layout';
import type { OfflineWorld } from '../world';
import { recordLlmUsage } from '../activityMetrics';
import { type ActivityDeps, heartbeat, mapWithHeartbeat, once, parseInput, readShard, saveReport, shardName, ShardRef, writeShard } from '../activityKit';
import { makeDataRoles } from './llmRoles';
import { countReasons, stepSummaries, sortByCompression, sortByFilter, sortByRules, sortBySelection, type Sorted } from './shardSteps';
import { ImportInput, ImportResult, RuleFilterInput, StepResult, LlmFilterInput, SplitInput, SplitResult, CompressInput, SelectInput, ReportInput, PrepareReport } from './shapes';

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


/** The examples of `data.source`: the offline world's dialogues, or the files' rows (malformed rows as import errors). */
async function readSource(store: ObjectStore, world: OfflineWorld, source: z.infer<typeof ImportInput>['source']): Promise<{ examples: Example[]; errors: ImportError[] }> {
  if (source.kind === 'demo') return { examples: world.generate({ seed: source.seed, count: source.count, brokenRate: source.brokenRate, terseRate: source.terseRate }), errors: [] };
  const examples: Example[] = [];
  const errors: ImportError[] = [];
  for (const path of source.paths) {
    heartbeat({ importing: path });
    const bytes = path.startsWith('s3://') ? await store.getBytes(path.replace(/^s3:\/\/[^/]+\//, '')) : await readFile(path).catch((e: Error) => {
      throw ApplicationFailure.nonRetryable(`cannot read ${path}: ${e.message}`, 'BadInput');
    });
    const res = await parseFileBytes(path, bytes);
    examples.push(...res.examples);
    errors.push(...res.errors);
  }
  return { examples, errors };
}

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

  /**
   * One shard through one step, exactly once: `sort` splits its examples into kept and dropped (./shardSteps.ts); the
   * dropped records (always, even when empty, so the layout is uniform), an LLM step's ledger and the kept shard (under
   * `keptFolder`) are written, then the step's result, last.
   */
  const shardStep = (runId: string, step: string, shard: ShardRef, keptFolder: string, sort: (examples: Example[]) => Promise<Sorted>): Promise<StepResult> =>
    once(store, dataKey(runId, step, `result-${shardName(shard.index)}.json`), StepResult, async () => {
      const sorted = await sort(await readShard(store, shard));
      if (sorted.ledger) await store.putJsonl(prepareKeys.ledger(runId, step, shardName(shard.index)), sorted.ledger);
      await store.putJsonl(dataKey(runId, 'dropped', step, `${shardName(shard.index)}.jsonl`), sorted.dropped);
      const kept = await writeShard(store, dataKey(runId, keptFolder, `${shardName(shard.index)}.jsonl`), shard.index, sorted.kept);
      return { kept, dropped: sorted.dropped.length, failed: sorted.failed, reasons: countReasons(sorted.dropped), usage: sorted.usage };
    });

  return {
    /** Imports the configured source into JSONL shards (`data/imported/`); malformed rows are recorded, not fatal. */
    async importSource(raw: z.input<typeof ImportInput>): Promise<ImportResult> {
      const input = parseInput(ImportInput, raw, 'importSource');
      return once(store, dataKey(input.runId, 'imported', 'result.json'), ImportResult, async () => {
        const { examples, errors } = await readSource(store, deps.world, input.source);
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
      return shardStep(input.runId, 'rule_filter', input.shard, 'rule_filter', async (examples) => sortByRules(examples, input.enabled ?? DEFAULT_ENABLED_FILTERS));
    },

    /** One pass of the LLM-filter cascade on one shard (the workflow feeds each pass the previous pass's kept set). */
    async llmFilterShard(raw: z.input<typeof LlmFilterInput>): Promise<StepResult> {
      const input = parseInput(LlmFilterInput, raw, 'llmFilterShard');
      const step = `llm_filter_pass${input.pass}`;
      return shardStep(input.runId, step, input.shard, step, async (examples) => {
        const roles = rolesFor(input.llm);
        const outcomes = await mapWithHeartbeat(examples, input.llm.roles.filter.concurrency, (ex) => roles.filter.judge(ex, { pass: input.pass, effort: input.effort }), step);
        return sortByFilter(examples, outcomes, step, input.pass, input.effort);
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
      return shardStep(input.runId, 'compression', input.shard, 'cold_start', async (examples) => {
        const roles = rolesFor(input.llm);
        return sortByCompression(examples, await mapWithHeartbeat(examples, input.llm.roles.compressor.concurrency, (ex) => roles.compressor.compress(ex), 'compression'));
      });
    },

    /** Harder-sample selection (spec §5.1) on one RL-pool shard; the draw is seeded per shard and example. */
    async selectShard(raw: z.input<typeof SelectInput>): Promise<StepResult> {
      const input = parseInput(SelectInput, raw, 'selectShard');
      return shardStep(input.runId, 'selection', input.shard, 'rl', async (examples) => sortBySelection(examples, input.seed, input.shard.index));
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
        const { steps, usage } = stepSummaries(input.steps);
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
