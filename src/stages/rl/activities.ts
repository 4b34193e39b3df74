/**
 * Stage 5 activities: RL with checklist rewards. Thin adapters over this folder's method modules (rollout loop,
 * judge phase, rewards, advantages, batch summary, GRPO) and src/model.
 *
 * - gpu queue: `rlRollout` (advance every live episode of a step by one turn: batched generation + tool calls),
 *   `rlTrain` (one GRPO update → checkpoint).
 * - api queue: `rlJudge` (verdicts for the turns that just completed, then turn control), `rlAdvantages`,
 *   `rlRecordStep` (metrics JSONL), `rlPruneCheckpoints` (retention, `rl.keepCheckpoints`).
 *
 * Everything large lives in S3; activities exchange keys and small numbers. Each activity writes its output under
 * a key fixed by (run, step, phase), so a retry after a crash overwrites the same object with the same content
 * (rollouts are seeded, LLM answers cached) and a completed one is not redone (`once`).
 *
 * Metrics: the judge and batch counters are added when a phase's result is first stored (`once`'s `onStored`), so a
 * retry or a resumed run that finds the result does not count it again (src/stages/activityMetrics.ts).
 *
 * Exactly-once updates: `rlTrain(step n)` returns the step-n checkpoint when its manifest exists; otherwise it loads
 * step n−1 (weights + AdamW state), applies one update and writes step n, manifest last. The worker's in-memory
 * policy is dropped before it is mutated, so a failed attempt never leaves a half-updated model in the cache.
 */
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { loadChatTokenizer, promptIds, type ChatTokenizer } from '../../chat/tokenize';
import { AnnotatedExample, type ChecklistVariant } from '../checklist/schema';
import type { Example } from '../../kernel/schema';
import { resolveFromRoot } from '../../infra/binaries';
import { stepFolder, listCheckpointFolders, removeCheckpoint } from '../../storage/checkpoints';
import { checkpointsToPrune } from '../../run/retention';
import { RlConfig } from '../../run/config';
import { LlmConfig, isOnline } from '../../llm/config';
import { canonicalJson } from '../../kernel/canonicalJson';
import { ifExists, storeVerdictCache } from '../../storage/store';
import { rlKeys } from '../../run/layout';
import { selectBackend } from '../../model/backend';
import { Judge, JudgeConfig, judgeConfigOf, withJudgeDefaults } from './judge/judge';
import { judgePending } from './judge/phase';
import { advanceRollouts, applyTurnDecisions, initRollouts, type RolloutLimits } from './rollout';
import { ToolEnvironment } from './env/toolEnv';
import { Rollout } from './types';
import { PolicyCache } from '../../storage/policyStore';
import { trainStep } from './trainActivity';
import { type ActivityDeps, asTemporalFailure, cancellationSignal, heapGuard, heartbeat, llmClients, once, parseInput, stageLog } from '../activityKit';
import type { OfflineWorld } from '../world';
import { withSimulatorDefaults } from './env/simulator';
import { executableToolNames, missingSimulatorMessage, toolsNeedingSimulator } from './env/answers';
import { countsOf, summariseBatch } from './algo/batch';
import { heldOutShrunk, rlDataShortfall, selectRlData } from './data';
import { formatReasons } from '../../kernel/floor';
import { type JudgeTotals } from '../../kernel/counts';
import { recordJudgePhase, recordRlBatch } from '../activityMetrics';
import { RlDataInput, RlData, PhaseResult, RlJudgeInput, RlRolloutInput, RlAdvantagesInput, RlMergeInput, RlMergeResult, RlAdvantagesResult, RlTrainInput, RlTrainResult, RlRecordInput, RlPruneInput, RlPruneResult, RolloutFile } from './shapes';

export * from './shapes';


// ---------------------------------------------------------------------------------------------------------------
// Per-worker caches: datasets, tokenizer, models


interface Dataset {
  examples: AnnotatedExample[];
  byUuid: Map<string, AnnotatedExample>;
  checklists: Map<string, ChecklistVariant[]>;
  env?: ToolEnvironment;
  envKey?: string;
}

export interface RlDeps extends ActivityDeps {
  /** The offline world, whose tools RL may execute instead of simulating (`rl.executableTools`, src/stages/world.ts). */
  world: OfflineWorld;
}

export function createRlActivities(deps: RlDeps) {
  /**
   * The world's tools executed in this run. Workflow inputs carry the list resolved from the config and the data
   * source (src/cli/stages.ts `rlInput`); a bare `true` comes only from inputs recorded before that, when it meant the
   * demo world's tools.
   */
  const executableNames = (rl: RlConfig): string[] => executableToolNames(rl.executableTools, true, deps.world.toolNames);
  const { store } = deps;
  const log = stageLog(deps, 'rl');
  const datasets = new Map<string, Dataset>();
  const tokenizers = new Map<string, ChatTokenizer>();
  /** Loaded policies. The policy being trained is taken OUT of the cache while it is mutated. */
  const policies = new PolicyCache(store);

  const tokenizer = (dir: string): ChatTokenizer => {
    let t = tokenizers.get(dir);
    if (!t) tokenizers.set(dir, (t = loadChatTokenizer(resolveFromRoot(dir))));
    return t;
  };
  const llmClient = llmClients(store);
  const dataset = async (key: string): Promise<Dataset> => {
    let d = datasets.get(key);
    if (!d) {
      const examples = await store.getJsonl(key, AnnotatedExample);
      d = { examples, byUuid: new Map(examples.map((e) => [e.uuid, e])), checklists: new Map(examples.map((e) => [e.uuid, e.checklists])) };
      datasets.set(key, d);
    }
    return d;
  };
  const environment = (d: Dataset, rl: RlConfig, llm: LlmConfig): ToolEnvironment => {
    const executable = executableNames(rl);
    const key = canonicalJson({ exe: executable, llm: llm.roles.simulator });
    if (!d.env || d.envKey !== key) {
      d.env = new ToolEnvironment(d.examples, {
        ...(isOnline(llm.roles.simulator) ? { llm: llmClient(withSimulatorDefaults(llm)) } : {}),
        ...(executable.length ? { executables: deps.world.executables(executable) } : {}),
      });
      d.envKey = key;
    }
    return d.env;
  };
  const readRollouts = async (key: string): Promise<Rollout[]> => (await store.getJson(key, RolloutFile)).rollouts;
  let backend: Promise<string> | undefined;
  const ensureBackend = () => (backend ??= selectBackend('auto', log));

  return {
    /**
     * The RL data (./data.ts): annotated examples whose prompt fits the context (spec §6.1's length filter), the first
     * `eval.prompts` of them held out. Invalid lines are counted by reason; a held-out set smaller than asked for is
     * logged and in the result; fewer than `rl.minExamples` left to train on fails the stage (not retried), and so
     * (`ConfigError`) does a tool of the data that has neither an executable nor a simulator endpoint.
     */
    async rlPrepareData(raw: z.input<typeof RlDataInput>): Promise<RlData> {
      const input = parseInput(RlDataInput, raw, 'rlPrepareData');
      return once(store, rlKeys.folder(input.runId, 'data', 'result.json'), RlData, async () => {
        const tok = tokenizer(input.tokenizerDir);
        const lines = (await store.getText(input.sourceKey)).split('\n').filter((l) => l.trim() !== '');
        const maxPromptTokens = input.rl.rollout.maxModelLen - input.rl.rollout.promptMargin;
        const promptLength = (ex: AnnotatedExample) => promptIds(ex.messages.slice(0, ex.messages.findIndex((m) => m.role === 'user') + 1), ex.tools, tok).length;
        const { kept, ...sel } = selectRlData(lines, { promptLength, maxPromptTokens, heldOut: input.rl.eval.prompts, validation: input.rl.eval.validation });
        if (input.rl.eval.on === 'validation' && sel.validation === 0) throw ApplicationFailure.nonRetryable(`rl.eval.on: validation, but no validation prompts (rl.eval.validation ${input.rl.eval.validation}; ${kept.length} usable examples, ${sel.heldOut} held out)`, 'BadConfig');
        if (sel.validation < sel.validationRequested) log(`validation prompts: ${sel.validation} of ${sel.validationRequested} asked for (rl.eval.validation; only ${kept.length} usable examples)`);
        const short = rlDataShortfall({ ...sel, lines: lines.length }, input.rl.minExamples, input.sourceKey, maxPromptTokens);
        if (short) throw ApplicationFailure.nonRetryable(short, 'TooFewOutputs');
        if (sel.invalid) log(`${input.sourceKey}: ${sel.invalid} invalid line(s) left out: ${formatReasons(sel.invalidReasons)}`);
        const shrunk = heldOutShrunk({ ...sel, kept });
        if (shrunk) log(shrunk);
        // No silent zeros: tools that neither an executable nor the simulator answers fail the run here (./env/answers.ts).
        if (input.llm && !isOnline(input.llm.roles.simulator)) {
          const unanswered = toolsNeedingSimulator(kept, new Set(executableNames(input.rl)));
          if (unanswered.size) throw ApplicationFailure.nonRetryable(`${input.sourceKey}: ${missingSimulatorMessage(unanswered, kept.length)}`, 'ConfigError');
        }
        const key = rlKeys.folder(input.runId, 'data', 'examples.jsonl');
        await store.putJsonl(key, kept);
        return { key, train: sel.train, heldOut: sel.heldOut, ...(sel.validation ? { validation: sel.validation } : {}), tooLong: sel.tooLong, invalid: sel.invalid, invalidReasons: sel.invalidReasons, heldOutRequested: sel.heldOutRequested };
      });
    },

    /** Advance every live episode by one turn (phase 0 creates them). gpu queue. */
    async rlRollout(raw: z.input<typeof RlRolloutInput>): Promise<PhaseResult> {
      const input = parseInput(RlRolloutInput, raw, 'rlRollout');
      const outKey = rlKeys.phase(input.folder, input.phase);
      return heapGuard('rlRollout', log, () => once(store, `${outKey}.result`, PhaseResult, async () => {
        const t0 = Date.now();
        await ensureBackend();
        const tok = tokenizer(input.tokenizerDir);
        const d = await dataset(input.dataKey);
        let rollouts: Rollout[];
        if (input.phase === 0) {
          if (!input.init) throw ApplicationFailure.nonRetryable('rlRollout phase 0 needs init', 'BadInput');
          rollouts = initRollouts(input.init.indices.map((i) => d.examples[i]!), input.init.groupSize, tok, input.init.groupOffset ?? 0);
        } else {
          rollouts = await readRollouts(rlKeys.phase(input.folder, input.phase - 1));
        }
        const before = rollouts.reduce((n, r) => n + r.segments.reduce((m, s) => m + s.end - s.start, 0), 0);
        const model = await policies.get(input.policy);
        const limits: RolloutLimits = { ...input.rl.rollout, ...(input.temperature !== undefined ? { temperature: input.temperature } : {}) };
        const signal = cancellationSignal();
        await advanceRollouts(rollouts, d.byUuid, model, tok, environment(d, input.rl, input.llm), {
          limits,
          // Per-episode seeds need no phase: an episode's generation index already tells its turns apart.
          seed: input.episodeSeeds ? input.seed >>> 0 : (input.seed ^ Math.imul(input.phase + 1, 0x27d4eb2d)) >>> 0,
          ...(input.episodeSeeds ? { episodeSeeds: true } : {}),
          salt: `${input.folder}/p${input.phase}`,
          onRound: (round, live) => heartbeat({ phase: input.phase, round, live }),
          onCounts: (c) => log(`rlRollout ${input.folder} phase ${input.phase}: tokens prefilled ${c.prefilled}, reused ${c.reused}, shared prompt ${c.shared}, decoded ${c.decoded}`),
          onDecodeStep: (step) => {
            if (signal?.aborted) throw new Error('cancelled');
            heartbeat({ phase: input.phase, decodeStep: step });
          },
        }).catch((e: unknown) => {
          throw asTemporalFailure(e);
        });
        await store.putJson(outKey, { rollouts });
        const after = rollouts.reduce((n, r) => n + r.segments.reduce((m, s) => m + s.end - s.start, 0), 0);
        return { key: outKey, counts: countsOf(rollouts), seconds: (Date.now() - t0) / 1000, generatedTokens: after - before };
      }));
    },

    /** Judge the turns that just completed, then continue or end each episode (turn control). api queue. */
    async rlJudge(raw: z.input<typeof RlJudgeInput>): Promise<PhaseResult> {
      const input = parseInput(RlJudgeInput, raw, 'rlJudge');
      const outKey = rlKeys.phase(input.folder, input.phase);
      return once(store, `${outKey}.result`, PhaseResult, async () => {
        const t0 = Date.now();
        const d = await dataset(input.dataKey);
        const rollouts = await readRollouts(rlKeys.phase(input.folder, input.phase - 1));
        const judgeCfg: JudgeConfig = judgeConfigOf(input.rl);
        const judge = new Judge(
          {
            ...(isOnline(input.llm.roles.judge) ? { llm: llmClient(withJudgeDefaults(input.llm)) } : {}),
            ...(input.rl.judge.cache ? { cache: storeVerdictCache(store) } : {}),
          },
          judgeCfg,
        );
        let stats: JudgeTotals;
        let judged = { done: 0, total: 0 };
        // Also while no step completes (calls waiting out a rate limit): a silent attempt would be timed out and
        // started again beside itself.
        const ticker = setInterval(() => heartbeat({ phase: input.phase, judged: judged.done, total: judged.total }), 5_000);
        try {
          stats = await judgePending(rollouts, d.checklists, judge, {
            concurrency: input.rl.judge.concurrency,
            salt: `${input.folder}/p${input.phase}`,
            onProgress: (done, total) => {
              judged = { done, total };
              heartbeat({ phase: input.phase, judged: done, total });
            },
          });
        } catch (e) {
          throw asTemporalFailure(e);
        } finally {
          clearInterval(ticker);
        }
        applyTurnDecisions(rollouts, d.checklists, d.byUuid, input.rl.rollout);
        await store.putJson(outKey, { rollouts });
        return { key: outKey, counts: countsOf(rollouts), seconds: (Date.now() - t0) / 1000, judge: stats };
      }, (result) => recordJudgePhase(input.runId, result.judge));
    },

    /** Merge the finished chunks of a fanned-out batch, in chunk order (groups were numbered per step). api queue. */
    async rlMergeChunks(raw: z.input<typeof RlMergeInput>): Promise<RlMergeResult> {
      const input = parseInput(RlMergeInput, raw, 'rlMergeChunks');
      const outKey = rlKeys.merged(input.folder);
      return once(store, `${outKey}.result`, RlMergeResult, async () => {
        const rollouts = (await Promise.all(input.parts.map(readRollouts))).flat();
        const ids = new Set<string>();
        for (const r of rollouts) {
          if (ids.has(r.id)) throw ApplicationFailure.nonRetryable(`${input.folder}: rollout ${r.id} is in two chunks`, 'BadInput');
          ids.add(r.id);
        }
        await store.putJson(outKey, { rollouts });
        return { key: outKey, counts: countsOf(rollouts), rollouts: rollouts.length };
      });
    },

    /** Rewards and advantages of a finished batch (pure functions over the verdicts). api queue. */
    async rlAdvantages(raw: z.input<typeof RlAdvantagesInput>): Promise<RlAdvantagesResult> {
      const input = parseInput(RlAdvantagesInput, raw, 'rlAdvantages');
      const outKey = rlKeys.advantages(input.folder);
      return once(store, `${outKey}.result`, RlAdvantagesResult, async () => {
        const t0 = Date.now();
        const d = await dataset(input.dataKey);
        const rollouts = await readRollouts(input.rolloutsKey ?? rlKeys.phase(input.folder, input.phase));
        const summary = summariseBatch(rollouts, d.checklists, input.rl, input.granularity);
        await store.putJson(outKey, { granularity: input.granularity, rows: summary.rows, advantages: summary.rows.map((r) => r.advantages) });
        return {
          key: outKey,
          ...summary.metrics,
          seconds: (Date.now() - t0) / 1000,
        };
      }, (result) => recordRlBatch(input.runId, input.folder.startsWith(`${rlKeys.folder(input.runId, 'eval')}/`) ? 'heldout' : 'train', result.rollouts, result.failed));
    },

    /** One GRPO update from step−1's policy; writes step's checkpoint. Exactly once per step (./trainActivity.ts). gpu. */
    async rlTrain(raw: z.input<typeof RlTrainInput>): Promise<RlTrainResult> {
      const input = parseInput(RlTrainInput, raw, 'rlTrain');
      return heapGuard('rlTrain', log, () => once(store, `${stepFolder(rlKeys.checkpoints(input.runId), input.step)}/train-result.json`, RlTrainResult, async () => {
        await ensureBackend();
        const ctx = { store, policies, tokenizer: tokenizer(input.tokenizerDir), onMicro: (micro: number, total: number) => heartbeat({ step: input.step, micro, total }) };
        return trainStep(ctx, input);
      }));
    },

    /** Append (idempotently) one row to `runs/<id>/rl/metrics.jsonl`: rows of steps ≥ this one are replaced. api. */
    async rlRecordStep(raw: z.input<typeof RlRecordInput>): Promise<{ key: string; rows: number }> {
      const input = parseInput(RlRecordInput, raw, 'rlRecordStep');
      const key = rlKeys.metrics(input.runId);
      const text = (await ifExists(() => store.getText(key))) ?? '';
      let rows = text.split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l) as Record<string, unknown>);
      rows = rows.filter((r) => Number(r['step']) < input.step || (r['kind'] !== input.row['kind'] && Number(r['step']) <= input.step));
      rows.push({ step: input.step, ...input.row });
      await store.putJsonl(key, rows);
      await store.putJson(rlKeys.metricsRow(input.runId, input.step, String(input.row['kind'] ?? 'step')), { step: input.step, ...input.row });
      return { key, rows: rows.length };
    },

    /**
     * Removes the checkpoints at or below `step` that `keep` does not list (src/run/retention.ts), each manifest first,
     * so a kill midway leaves no folder that passes for a checkpoint; a retry lists again and finishes. api.
     */
    async rlPruneCheckpoints(raw: z.input<typeof RlPruneInput>): Promise<z.infer<typeof RlPruneResult>> {
      const input = parseInput(RlPruneInput, raw, 'rlPruneCheckpoints');
      if (!input.keep.includes(input.step)) throw ApplicationFailure.nonRetryable(`rlPruneCheckpoints: the current policy (step ${input.step}) is not in keep`, 'BadInput');
      const prefix = rlKeys.checkpoints(input.runId);
      const folders = await listCheckpointFolders(store, prefix);
      const removed = checkpointsToPrune([...folders.keys()], input.step, input.keep);
      // Tests only: a pause after each removal, so a kill can land in the middle of pruning.
      const delayMs = Number(process.env['CM2_TEST_PRUNE_DELAY_MS'] ?? 0);
      let objects = 0;
      for (const step of removed) {
        objects += await removeCheckpoint(store, prefix, step, folders.get(step) ?? [], async (key) => {
          heartbeat({ step, key });
          if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
        });
      }
      if (removed.length) log(`pruned RL checkpoints ${removed.join(', ')} (${objects} objects)`);
      return { removed, objects };
    },
  };
}

export type RlActivities = ReturnType<typeof createRlActivities>;

// ---------------------------------------------------------------------------------------------------------------
// Helpers

export type { Example };
