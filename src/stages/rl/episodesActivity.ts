/**
 * The RL activities' shared worker state and the two phases of an episode's turn, as plain functions (`activities.ts`
 * wraps them: input parsing, exactly-once, heap guard): `rolloutPhase` advances every live episode by one turn
 * (batched generation and tool calls; phase 0 creates the episodes), `judgePhase` judges the turns that just completed
 * and applies turn control.
 *
 * The worker state (`rlWorker`) holds what outlives one activity in a worker process: the datasets, tokenizers, tool
 * environments and policies loaded so far (the policy being trained is taken out of the cache while it is mutated),
 * and the tensor backend.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { z } from 'zod';
import { loadChatTokenizer, type ChatTokenizer } from '../../chat/tokenize';
import { canonicalJson } from '../../kernel/canonicalJson';
import { type JudgeTotals } from '../../kernel/counts';
import { resolveFromRoot } from '../../infra/binaries';
import { isOnline, type LlmConfig } from '../../llm/llmConfig';
import { selectBackend } from '../../model/net/backend';
import type { RlSettings } from '../../run/config';
import { policyKey, rlKeys } from '../../run/layout';
import { sameFingerprint } from '../../llm/engine';
import { PolicyCache } from '../../storage/policyStore';
import { storeVerdictCache, type ObjectStore } from '../../storage/store';
import { type ActivityDeps, asTemporalFailure, cancellationSignal, heartbeat, llmClients, stageLog } from '../activityKit';
import { AnnotatedExample, type ChecklistVariant } from '../checklist/schema';
import type { OfflineWorld } from '../world';
import { countsOf } from './algo/batch';
import { executableToolNames } from './env/answers';
import { withSimulatorDefaults } from './env/simulator';
import { ToolEnvironment } from './env/toolEnv';
import { Judge, type JudgeConfig, judgeConfigOf, withJudgeDefaults } from './judge/judge';
import { judgePending } from './judge/phase';
import { advanceRollouts, applyTurnDecisions, initRollouts, type RolloutLimits } from './rollout';
import { engineOf, usesEngine } from './engineClient';
import { engineSync } from './engineActivity';
import { RolloutFile, type PhaseResult, type RlJudgeInput, type RlRolloutInput } from './shapes';
import type { Rollout } from './rolloutSchema';

export interface RlDeps extends ActivityDeps {
  /** The offline world, whose tools RL may execute instead of simulating (`rl.executableTools`, src/stages/world.ts). */
  world: OfflineWorld;
}

export interface Dataset {
  examples: AnnotatedExample[];
  byUuid: Map<string, AnnotatedExample>;
  checklists: Map<string, ChecklistVariant[]>;
  env?: ToolEnvironment;
  envKey?: string;
}

/** A worker's RL state (see the module comment). */
export interface RlWorker {
  store: ObjectStore;
  log: (line: string) => void;
  /** Loaded policies. The policy being trained is taken OUT of the cache while it is mutated. */
  policies: PolicyCache;
  tokenizer(dir: string): ChatTokenizer;
  dataset(key: string): Promise<Dataset>;
  environment(d: Dataset, rl: RlSettings, llm: LlmConfig): ToolEnvironment;
  readRollouts(key: string): Promise<Rollout[]>;
  ensureBackend(): Promise<string>;
  llmClient: ReturnType<typeof llmClients>;
  /**
   * The world's tools executed in this run. Workflow inputs carry the list resolved from the config and the data
   * source (src/cli/stages.ts `rlInput`); a bare `true` comes only from inputs recorded before that, when it meant the
   * demo world's tools.
   */
  executableNames(rl: RlSettings): string[];
}

export function rlWorker(deps: RlDeps): RlWorker {
  const { store } = deps;
  const log = stageLog(deps, 'rl');
  const datasets = new Map<string, Dataset>();
  const tokenizers = new Map<string, ChatTokenizer>();
  const llmClient = llmClients(store);
  const executableNames = (rl: RlSettings): string[] => executableToolNames(rl.executableTools, true, deps.world.toolNames);
  let backend: Promise<string> | undefined;
  return {
    store,
    log,
    policies: new PolicyCache(store),
    llmClient,
    executableNames,
    tokenizer(dir) {
      let t = tokenizers.get(dir);
      if (!t) tokenizers.set(dir, (t = loadChatTokenizer(resolveFromRoot(dir))));
      return t;
    },
    async dataset(key) {
      let d = datasets.get(key);
      if (!d) {
        const examples = await store.getJsonl(key, AnnotatedExample);
        d = { examples, byUuid: new Map(examples.map((e) => [e.uuid, e])), checklists: new Map(examples.map((e) => [e.uuid, e.checklists])) };
        datasets.set(key, d);
      }
      return d;
    },
    environment(d, rl, llm) {
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
    },
    readRollouts: async (key) => (await store.getJson(key, RolloutFile)).rollouts,
    ensureBackend: () => (backend ??= selectBackend('auto', log)),
  };
}

const policyTokens = (rollouts: readonly Rollout[]): number => rollouts.reduce((n, r) => n + r.segments.reduce((m, s) => m + s.end - s.start, 0), 0);

/** Advance every live episode by one turn (phase 0 creates them); the episodes are written to the phase's key. */
export async function rolloutPhase(w: RlWorker, input: z.infer<typeof RlRolloutInput>): Promise<PhaseResult> {
  const outKey = rlKeys.phase(input.folder, input.phase);
  const t0 = Date.now();
  await w.ensureBackend();
  const tok = w.tokenizer(input.tokenizerDir);
  const d = await w.dataset(input.dataKey);
  let rollouts: Rollout[];
  if (input.phase === 0) {
    if (!input.init) throw ApplicationFailure.nonRetryable('rlRollout phase 0 needs init', 'BadInput');
    rollouts = initRollouts(input.init.indices.map((i) => d.examples[i]!), input.init.groupSize, tok, input.init.groupOffset ?? 0);
  } else {
    rollouts = await w.readRollouts(rlKeys.phase(input.folder, input.phase - 1));
  }
  const before = policyTokens(rollouts);
  // On a serving engine (rl.engine) the tokens come from it; rlEngineSync made it serve `policy` before the batch.
  // (as the adapter rlEngineSync loaded, with rl.engine.sync adapter). An engine that no longer answers the probe as
  // it did after that sync (restarted with its first weights, loaded by someone else) is synced again first.
  const model = usesEngine(input.rl) ? engineOf(input.rl.engine, process.env, input.engineAdapter) : await w.policies.get(input.policy);
  if ('loadWeights' in model && input.engineFingerprint) {
    const check = await sameFingerprint(model, input.engineFingerprint, input.rl.engine.probeTolerance).catch((e: unknown) => {
      throw asTemporalFailure(e);
    });
    if (!check.same) {
      w.log(`rlRollout ${input.folder} phase ${input.phase}: ${input.rl.engine.url} no longer answers the probe as after its sync (gap ${check.gap}): restarted? syncing ${policyKey(input.policy)} again`);
      await engineSync(w, { runId: input.runId, policy: input.policy, rl: input.rl });
    }
  }
  const limits: RolloutLimits = { ...input.rl.rollout, ...(input.temperature !== undefined ? { temperature: input.temperature } : {}) };
  const signal = cancellationSignal();
  await advanceRollouts(rollouts, d.byUuid, model, tok, w.environment(d, input.rl, input.llm), {
    limits,
    // Per-episode seeds need no phase: an episode's generation index already tells its turns apart.
    seed: input.episodeSeeds ? input.seed >>> 0 : (input.seed ^ Math.imul(input.phase + 1, 0x27d4eb2d)) >>> 0,
    ...(input.episodeSeeds ? { episodeSeeds: true } : {}),
    salt: `${input.folder}/p${input.phase}`,
    onRound: (round, live) => heartbeat({ phase: input.phase, round, live }),
    onCounts: (c) => w.log(`rlRollout ${input.folder} phase ${input.phase}: tokens prefilled ${c.prefilled}, reused ${c.reused}, shared prompt ${c.shared}, decoded ${c.decoded}`),
    onDecodeStep: (step) => {
      if (signal?.aborted) throw new Error('cancelled');
      heartbeat({ phase: input.phase, decodeStep: step });
    },
  }).catch((e: unknown) => {
    throw asTemporalFailure(e);
  });
  // Written once: a serving engine samples differently on each attempt, so an attempt that outlived its heartbeat
  // timeout and its retry must not both land; the later one adopts the phase the first wrote.
  if (!(await w.store.putJsonIfAbsent(outKey, { rollouts }))) {
    w.log(`rlRollout ${input.folder} phase ${input.phase}: another attempt wrote this phase first; adopting its episodes`);
    rollouts = await w.readRollouts(outKey);
  }
  return { key: outKey, counts: countsOf(rollouts), seconds: (Date.now() - t0) / 1000, generatedTokens: policyTokens(rollouts) - before };
}

/** Judge the turns that just completed, then continue or end each episode (turn control); written to the phase's key. */
export async function judgePhase(w: RlWorker, input: z.infer<typeof RlJudgeInput>): Promise<PhaseResult> {
  const outKey = rlKeys.phase(input.folder, input.phase);
  const t0 = Date.now();
  const d = await w.dataset(input.dataKey);
  const rollouts = await w.readRollouts(rlKeys.phase(input.folder, input.phase - 1));
  const judgeCfg: JudgeConfig = judgeConfigOf(input.rl);
  const judge = new Judge(
    {
      ...(isOnline(input.llm.roles.judge) ? { llm: w.llmClient(withJudgeDefaults(input.llm)) } : {}),
      ...(input.rl.judge.cache ? { cache: storeVerdictCache(w.store) } : {}),
    },
    judgeCfg,
  );
  let stats: JudgeTotals;
  let judged = { done: 0, total: 0 };
  // Also while no step completes (calls waiting out a rate limit): a silent attempt would be timed out and started
  // again beside itself.
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
  await w.store.putJson(outKey, { rollouts });
  return { key: outKey, counts: countsOf(rollouts), seconds: (Date.now() - t0) / 1000, judge: stats };
}
