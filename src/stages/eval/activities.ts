/**
 * Evaluation activities, on the `cm2-gpu` task queue: BFCL function-calling accuracy of a policy (issue 7).
 *
 * `evalBfcl` runs a policy — an SFT policy (HF folder in S3), an RL checkpoint, or an OpenAI-compatible endpoint —
 * over BFCL categories, writes the full results JSON to S3 and returns a small summary. Thin adapter: loading,
 * decoding and scoring live in src/stages/eval/bfcl. Idempotent: a summary already written at the output key is returned
 * as it is (`once`), so a retried or replayed activity does not evaluate twice; endpoint answers are cached under
 * `cache/llm/` by request hash, so an attempt that died halfway does not pay twice either.
 */
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { ChatTokenizer, loadChatTokenizer } from '../../chat/tokenize';
import { BfclDataError, BfclInputError } from './bfcl/data';
import { stringifyPyJson } from './bfcl/pyValue';
import { BfclChunkFile, chunkExamples, mergeChunkFiles, planChunks } from './bfcl/chunks';
import { EndpointPolicy, evaluateBfcl, evaluateChunk, loadCategory, loadChunk, ModelPolicy, type Policy } from './bfcl/runner';
import { formatSummary, type BfclResults } from './bfcl/score';
import { ChunkTiming } from '../../kernel/chunks';
import { canonicalJson } from '../../kernel/canonicalJson';
import { PolicySlot } from '../../model/net/policySlot';
import { bfclDataDir, resolveFromRoot } from '../../infra/binaries';
import { ifExists, NotFoundError, storeCache, type ObjectStore } from '../../storage/store';
import { evalKeys } from '../../run/layout';
import { selectBackend } from '../../model/net/backend';
import { QwenModel } from '../../model/net/qwen';
import { BadPolicyError, loadPolicy } from '../../storage/policyStore';
import { PolicyRef } from '../../run/layout';
import { engineFor, type EngineTarget } from '../../llm/engine';
import { type ActivityDeps, activityAttempt, asTemporalFailure, cancellationSignal, heartbeat, once, parseInput, stageLog, workerName } from '../activityKit';
import { sharedBfclBridge } from '../../infra/bfclBridge';
import type { TokenEngine } from '../../llm/engine';
import { evaluateMultiTurnEpisodes, isMultiTurn, type EpisodeTranscript, type MultiTurnPolicy } from './bfcl/multiTurn';
import { bridgeBackend, bridgeFormatter, bridgeInfo, loadMultiTurnCategory } from './bfcl/multiTurnBridge';
import { EndpointMultiTurnPolicy, EndpointPromptPolicy, ModelMultiTurnPolicy, type BfclFormatter } from './bfcl/multiTurnPolicies';
import { ExampleResult } from './bfcl/score';
import { EvalPolicy, EvalBfclInput, EvalBfclPlanInput, EvalBfclPlan, EvalBfclChunkInput, EvalBfclMergeInput, EvalBfclSummary, EvalTau2Input, EvalTau2Summary } from './shapes';
import { sharedTau2Bridge } from '../../infra/tau2Bridge';
import { mapConcurrent } from '../../kernel/mapConcurrent';
import { loadTau2Tasks, playTau2Episode, tau2Metrics, type Tau2EpisodeResult, type Tau2Metrics, type Tau2Responder } from './tau2/episode';
import { EndpointResponder, userSimulator } from './tau2/responders';
import { ModelAgent } from './tau2/modelAgent';
import { formatTau2Summary, tau2UsageOf, type Tau2Results } from './tau2/results';

/** What the results file records as the evaluated policy (never a secret), and the serving engine that generated, if any. */
export function policyDescription(policy: EvalPolicy, engine?: EngineTarget): Record<string, unknown> {
  if (policy.kind === 'endpoint') return new EndpointPolicy(policy.endpoint).description;
  const served = engine ? { engine: { kind: engine.kind, url: engine.url, ...(engine.adapter ? { adapter: engine.adapter } : {}) } } : {};
  return policy.kind === 'hf' ? { kind: 'hf', prefix: policy.prefix, ...served } : { kind: 'ckpt', manifestKey: policy.manifestKey, step: policy.step, ...served };
}

/** Where an evaluation's results go, its summary and its label. */
function outputOf(input: z.infer<typeof EvalBfclInput>): { label: string; key: string; summaryKey: string } {
  const label = input.label ?? policyLabel(input.policy);
  const key = input.outputKey ?? evalKeys.bfcl(input.runId, label);
  return { label, key, summaryKey: `${key.replace(/\.json$/, '')}.summary.json` };
}

/** The summary of a results document. */
function summaryOf(key: string, label: string, results: BfclResults): EvalBfclSummary {
  const strip = (a: { accuracy: number; correct: number; total: number }) => ({ accuracy: a.accuracy, correct: a.correct, total: a.total });
  return {
    key,
    label,
    overall: results.overall,
    categories: Object.fromEntries(Object.entries(results.categories).map(([c, r]) => [c, strip(r)])),
    seconds: results.seconds,
  };
}

/** Bad data or an unknown category cannot be fixed by retrying; endpoint failures become Temporal failures. */
async function asActivityFailure<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    if (e instanceof BfclDataError || e instanceof BfclInputError) throw ApplicationFailure.nonRetryable(e.message, 'BadInput');
    throw asTemporalFailure(e);
  }
}

/** The input's policy as a player of multi-turn episodes, given BFCL's formatter. */
type MultiTurnFactory = (formatter: BfclFormatter) => MultiTurnPolicy;

/** A multi-turn entry's stored episode: its verdict (as the results record it) and its transcript. */
const StoredEpisode = z.object({ result: ExampleResult, transcript: z.looseObject({ id: z.string() }) });

/** A stored τ²-Bench episode (./tau2/episode.ts `Tau2EpisodeResult`). */
const StoredTau2Episode = z.looseObject({ domain: z.string(), taskId: z.string(), trial: z.number().int(), reward: z.number(), termination: z.string().nullable() });

/** A loaded model policy and its tokenizer, kept in the worker's slot between chunks. */
interface LoadedModel {
  model: QwenModel;
  tok: ChatTokenizer;
  dispose(): void;
}

/** The default label of a policy: `sft` for `…/sft/final`, `rl-step-N` for an RL checkpoint, else a slug. */
export function policyLabel(policy: EvalPolicy): string {
  const slug = (s: string) => s.replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 80) || 'policy';
  if (policy.kind === 'ckpt') return `rl-step-${policy.step}`;
  if (policy.kind === 'endpoint') return slug(`endpoint-${policy.endpoint.model}`);
  const parts = policy.prefix.split('/').filter(Boolean);
  return parts.at(-1) === 'final' && parts.length >= 2 ? slug(parts.at(-2)!) : slug(parts.slice(-2).join('-'));
}


const optionalJson = (store: ObjectStore, key: string) => ifExists(async () => JSON.parse(await store.getText(key)) as Record<string, unknown>);

/**
 * A policy in S3 and its tokenizer: an HF folder (config.json, model.safetensors, tokenizer files as the SFT stage
 * writes them) or an RL checkpoint (manifest-verified files; the tokenizer then comes from `tokenizerDir`).
 */
export async function loadStoredModel(store: ObjectStore, ref: z.infer<typeof PolicyRef>, tokenizerDir?: string): Promise<{ model: QwenModel; tok: ChatTokenizer }> {
  try {
    return await readStoredModel(store, ref, tokenizerDir);
  } catch (e) {
    // A policy that is not there will not appear by retrying.
    if (e instanceof NotFoundError) throw ApplicationFailure.nonRetryable(`policy not found: ${e.message}`, 'BadInput');
    if (e instanceof BadPolicyError) throw ApplicationFailure.nonRetryable(e.message, 'BadInput');
    throw e;
  }
}

async function readStoredModel(store: ObjectStore, ref: z.infer<typeof PolicyRef>, tokenizerDir?: string): Promise<{ model: QwenModel; tok: ChatTokenizer }> {
  // Weights stream from S3 through a temp folder, one tensor at a time (an RL checkpoint's optimizer state is not fetched).
  const model = await loadPolicy(store, ref);
  try {
    return { model, tok: await storedTokenizer(store, ref, tokenizerDir) };
  } catch (e) {
    model.dispose();
    throw e;
  }
}

/** A stored policy's tokenizer, with loadStoredModel's failures. */
async function loadTokenizerOf(store: ObjectStore, ref: z.infer<typeof PolicyRef>, tokenizerDir?: string): Promise<ChatTokenizer> {
  try {
    return await storedTokenizer(store, ref, tokenizerDir);
  } catch (e) {
    if (e instanceof NotFoundError) throw ApplicationFailure.nonRetryable(`policy not found: ${e.message}`, 'BadInput');
    throw e;
  }
}

/** A stored policy's tokenizer: the HF folder's own, else `tokenizerDir`'s (RL checkpoints). */
async function storedTokenizer(store: ObjectStore, ref: z.infer<typeof PolicyRef>, tokenizerDir?: string): Promise<ChatTokenizer> {
  if (ref.kind === 'hf' && !tokenizerDir) {
    const tj = await optionalJson(store, `${ref.prefix}/tokenizer.json`);
    if (tj) return new ChatTokenizer(tj, (await optionalJson(store, `${ref.prefix}/tokenizer_config.json`)) ?? {}, (await optionalJson(store, `${ref.prefix}/generation_config.json`)) ?? {});
  }
  if (!tokenizerDir) throw ApplicationFailure.nonRetryable('the policy folder has no tokenizer.json: give tokenizerDir', 'BadInput');
  return loadChatTokenizer(resolveFromRoot(tokenizerDir));
}

export function createEvalActivities(deps: ActivityDeps) {
  const { store } = deps;
  const log = stageLog(deps, 'eval');
  /** The model policy of the chunks on this worker: loaded once per policy, not once per chunk. */
  const slot = new PolicySlot<LoadedModel>();

  /**
   * Runs `use` with the input's policy: an endpoint, or a model from S3 (through the slot when `shared`); `multiTurn`
   * makes the same policy play BFCL's multi-turn episodes.
   */
  const withPolicy = async <R>(input: z.infer<typeof EvalBfclInput>, shared: boolean, use: (policy: Policy, multiTurn: MultiTurnFactory) => Promise<R>): Promise<R> => {
    const ref = input.policy;
    const g = input.generation;
    if (ref.kind === 'endpoint') {
      const endpoint = new EndpointPolicy(ref.endpoint, { cache: storeCache(store) });
      // BFCL's prompting mode: its system prompt and decoder (bfcl-eval, the worker's bridge) for the single-turn categories too
      const single = g.mode === 'prompt' ? new EndpointPromptPolicy(endpoint, bridgeFormatter(sharedBfclBridge({ log }))) : endpoint;
      return use(single, (formatter) => new EndpointMultiTurnPolicy(endpoint, formatter, g.mode, cancellationSignal()));
    }
    const target = input.generation.engine;
    const description = policyDescription(ref, target);
    const multiTurnOf = (model: QwenModel | TokenEngine, tok: ChatTokenizer, positions: number): MultiTurnFactory => (formatter) => new ModelMultiTurnPolicy(model, tok, description, formatter, {
      maxNewTokens: g.maxNewTokens,
      batchSize: g.batchSize,
      maxPromptTokens: Math.max(1, positions - g.maxNewTokens),
      ...(g.enableThinking !== undefined ? { enableThinking: g.enableThinking } : {}),
    }, () => heartbeat());
    if (target) {
      // a serving engine that serves this policy (the caller synced it): only the tokenizer is needed here
      const tok = await loadTokenizerOf(store, ref, input.tokenizerDir);
      const engine = engineFor(target);
      return use(new ModelPolicy(engine, tok, description, { ...input.generation, maxModelLen: target.maxModelLen }), multiTurnOf(engine, tok, target.maxModelLen));
    }
    await selectBackend(input.generation.backend, log);
    const run = ({ model, tok }: LoadedModel) => use(new ModelPolicy(model, tok, description, input.generation), multiTurnOf(model, tok, model.config.max_position_embeddings));
    const load = async (): Promise<LoadedModel> => {
      log(`loading policy ${JSON.stringify(description)} on ${workerName()}`);
      const { model, tok } = await loadStoredModel(store, ref, input.tokenizerDir);
      return { model, tok, dispose: () => model.dispose() };
    };
    if (shared) return slot.with(canonicalJson({ policy: ref, tokenizerDir: input.tokenizerDir ?? null }), load, run);
    const loaded = await load();
    try {
      return await run(loaded);
    } finally {
      loaded.dispose();
    }
  };

  /**
   * The multi-turn entries of a chunk's segment, played as episodes (`batchSize` at once) and scored by bfcl-eval;
   * each finished entry's transcript and verdict go to S3 at once, so a retried chunk plays only the others.
   */
  const playMultiTurnSegment = async (key: string, index: number, segment: { category: string; start: number; count: number }, multiTurn: MultiTurnFactory, batchSize: number, signal?: AbortSignal): Promise<ExampleResult[]> => {
    const bridge = sharedBfclBridge({ log });
    const entries = (await loadMultiTurnCategory(bridge, segment.category, segment.start + segment.count)).slice(segment.start);
    if (entries.length !== segment.count) throw new BfclInputError(`chunk ${index}: ${segment.category} has ${segment.start + entries.length} entries in bfcl-eval, the plan expected at least ${segment.start + segment.count}`);
    const t0 = Date.now();
    const results = await evaluateMultiTurnEpisodes(entries, multiTurn(bridgeFormatter(bridge)), bridgeBackend(bridge), {
      concurrency: batchSize,
      sessionPrefix: `${workerName()}-${index}-${activityAttempt()}`,
      onProgress: (done, total) => heartbeat({ chunk: index, category: segment.category, done, total }),
      onBusy: () => heartbeat(),
      ...(signal ? { signal } : {}),
      recorded: async (entry) => (await ifExists(() => store.getJson(evalKeys.bfclEpisode(key, index, entry.id), StoredEpisode)))?.result,
      record: async (entry, result, transcript: EpisodeTranscript) => {
        await store.putJson(evalKeys.bfclEpisode(key, index, entry.id), { result, transcript });
      },
    });
    log(`chunk ${index}: ${segment.category} [${segment.start}, ${segment.start + segment.count}): ${results.filter((r) => r.valid).length}/${results.length} correct in ${((Date.now() - t0) / 1000).toFixed(1)}s`);
    return results as ExampleResult[];
  };

  /** The input's policy as a τ²-Bench agent (an endpoint, a serving engine that serves it, or the model loaded here). */
  const withTau2Agent = async <R>(input: z.infer<typeof EvalTau2Input>, use: (agent: Tau2Responder) => Promise<R>): Promise<R> => {
    const ref = input.policy;
    if (ref.kind === 'endpoint') return use(new EndpointResponder(new EndpointPolicy(ref.endpoint, { cache: storeCache(store) }), cancellationSignal()));
    const g = input.generation;
    const target = g.engine;
    const description = policyDescription(ref, target);
    const opts = (positions: number) => ({
      maxNewTokens: input.tau2.maxNewTokens,
      batchSize: input.tau2.concurrency,
      maxPromptTokens: Math.max(1, positions - input.tau2.maxNewTokens),
      ...(g.enableThinking !== undefined ? { enableThinking: g.enableThinking } : {}),
    });
    if (target) {
      const tok = await loadTokenizerOf(store, ref, input.tokenizerDir);
      return use(new ModelAgent(engineFor(target), tok, description, opts(target.maxModelLen), () => heartbeat()));
    }
    await selectBackend(g.backend, log);
    log(`loading policy ${JSON.stringify(description)} on ${workerName()}`);
    const { model, tok } = await loadStoredModel(store, ref, input.tokenizerDir);
    try {
      return await use(new ModelAgent(model, tok, description, opts(model.config.max_position_embeddings), () => heartbeat()));
    } finally {
      model.dispose();
    }
  };

  return {
    /**
     * τ²-Bench of a policy (issue 34 item 6): every (task, trial) of the configured domains played as tau2's own
     * simulation (the worker's bridge process), `concurrency` at once, the user simulator `llm.roles.user`; each
     * finished episode goes to S3 at once, so a retried activity plays only the others. Results and summary to S3.
     */
    async evalTau2(raw: EvalTau2Input): Promise<EvalTau2Summary> {
      const input = parseInput(EvalTau2Input, raw, 'evalTau2');
      const label = input.label ?? policyLabel(input.policy);
      const key = evalKeys.tau2(input.runId, label);
      const summaryKey = `${key.replace(/\.json$/, '')}.summary.json`;
      return once(store, summaryKey, EvalTau2Summary, () => asActivityFailure(async () => {
        const t0 = Date.now();
        const cfg = input.tau2;
        const bridge = sharedTau2Bridge({ log });
        const signal = cancellationSignal();
        const hello = await bridge.request<{ tau2: string; domains: string[] }>('hello');
        for (const d of cfg.domains) if (!hello.domains.includes(d)) throw new BfclInputError(`eval.tau2.domains: tau2 ${hello.tau2} has no domain ${d} (it has ${hello.domains.join(', ')})`);
        const user = userSimulator(input.user, { cache: storeCache(store) }, signal);
        return withTau2Agent(input, async (agent) => {
          const episodes: Tau2EpisodeResult[] = [];
          const domains: Record<string, Tau2Metrics> = {};
          let reused = 0;
          for (const domain of cfg.domains) {
            const tasks = (await loadTau2Tasks(bridge, domain, cfg.split)).slice(0, cfg.limit);
            const runs = tasks.flatMap((task) => Array.from({ length: cfg.trials }, (_, trial) => ({ domain, task, trial })));
            let done = 0;
            const got = await mapConcurrent(runs, cfg.concurrency, async (ref) => {
              const at = evalKeys.tau2Episode(key, domain, ref.task.id, ref.trial);
              let r = (await ifExists(() => store.getJson(at, StoredTau2Episode))) as Tau2EpisodeResult | undefined;
              if (r) reused++;
              else {
                r = await playTau2Episode(bridge, ref, agent, user, { seed: cfg.seed, maxSteps: cfg.maxSteps, maxErrors: cfg.maxErrors, ...(signal ? { signal } : {}) });
                await store.putJson(at, r);
              }
              heartbeat({ domain, done: ++done, total: runs.length });
              return r;
            });
            episodes.push(...got);
            domains[domain] = await tau2Metrics(bridge, got);
            log(`${label}: τ²-Bench ${domain}: average reward ${domains[domain]!.avg_reward.toFixed(4)} over ${got.length} episodes`);
          }
          const average = (100 * Object.values(domains).reduce((n, m) => n + m.avg_reward, 0)) / cfg.domains.length;
          const results: Tau2Results = {
            benchmark: 'tau2-bench', tau2: hello.tau2, policy: agent.description, user: user.description, split: cfg.split, trials: cfg.trials,
            ...(cfg.limit !== undefined ? { limit: cfg.limit } : {}), seed: cfg.seed, domains, average, seconds: (Date.now() - t0) / 1000, ...tau2UsageOf(episodes), episodes,
          };
          await store.putText(key, `${JSON.stringify(results)}\n`, 'application/json');
          log(`${label}: τ²-Bench results in ${key} (${reused} episode(s) from an earlier attempt)\n${formatTau2Summary(results)}`);
          return { key, label, tau2: hello.tau2, domains, average, episodes: episodes.length, seconds: results.seconds, ...(results.usage ? { usage: results.usage } : {}) };
        });
      }));
    },

    /** BFCL accuracy of a policy in one activity: full results to S3, summary returned. Heartbeats per batch / answered example. */
    async evalBfcl(raw: EvalBfclInput): Promise<EvalBfclSummary> {
      const input = parseInput(EvalBfclInput, raw, 'evalBfcl');
      const { label, key, summaryKey } = outputOf(input);
      return once(store, summaryKey, EvalBfclSummary, () => asActivityFailure(async () => {
        if (input.categories.some(isMultiTurn)) throw new BfclInputError('multi-turn categories are evaluated in chunks (eval.bfcl.chunkSize), not by evalBfcl');
        const signal = cancellationSignal();
        const results = await withPolicy(input, false, (policy) => evaluateBfcl(policy, {
          categories: input.categories,
          ...(input.limit !== undefined ? { limit: input.limit } : {}),
          ...(input.chunkSize !== undefined ? { chunkSize: input.chunkSize } : {}),
          dataDir: input.dataDir ?? bfclDataDir(),
          onProgress: (category, done, total) => heartbeat({ category, done, total }),
          log: (l) => log(`${label}: ${l}`),
          ...(signal ? { signal } : {}),
        }));
        await store.putText(key, `${stringifyPyJson(results, 1)}\n`, 'application/json');
        log(`${label}: BFCL results in ${key}\n${formatSummary(results)}`);
        return summaryOf(key, label, results);
      }));
    },

    /** The chunks of an evaluation: loads (and validates) the chosen categories on this gpu worker and cuts them. */
    async evalBfclPlan(raw: z.input<typeof EvalBfclPlanInput>): Promise<EvalBfclPlan> {
      const input = parseInput(EvalBfclPlanInput, raw, 'evalBfclPlan');
      return asActivityFailure(async () => {
        const dataDir = input.dataDir ?? bfclDataDir();
        const counts: { category: string; count: number }[] = [];
        for (const category of input.categories) {
          // multi-turn categories come from the installed bfcl-eval (the worker's bridge process)
          const count = isMultiTurn(category) ? (await loadMultiTurnCategory(sharedBfclBridge(), category, input.limit)).length : loadCategory(dataDir, category, input.limit).length;
          counts.push({ category, count });
        }
        const chunks = planChunks(counts, input.chunkSize);
        const multiTurn = input.categories.some(isMultiTurn) ? await bridgeInfo(sharedBfclBridge()) : undefined;
        return { chunks, examples: counts.reduce((n, c) => n + c.count, 0), dataDir, ...(multiTurn ? { multiTurn: { bfclEval: multiTurn.bfclEval, data: multiTurn.data } } : {}) };
      });
    },

    /**
     * One chunk of an evaluation, on any gpu worker: its scored examples go to S3 under the chunk's own key (`once`:
     * a retried or repeated chunk returns what it stored); the workflow gets where and how long it ran.
     */
    async evalBfclChunk(raw: z.input<typeof EvalBfclChunkInput>): Promise<ChunkTiming> {
      const input = parseInput(EvalBfclChunkInput, raw, 'evalBfclChunk');
      const { label, key } = outputOf(input);
      const { chunk } = input;
      const stored = await once(store, evalKeys.bfclChunk(key, chunk.index), BfclChunkFile, () => asActivityFailure(async () => {
        const startedAt = Date.now();
        log(`${label} chunk ${chunk.index}: ${chunkExamples(chunk)} examples on ${workerName()} (attempt ${activityAttempt()})`);
        const signal = cancellationSignal();
        const results = await withPolicy(input, true, async (policy, multiTurn) => {
          const out: ExampleResult[] = [];
          // segments in order: single-turn ones from the data folder, multi-turn ones played through the bridge
          for (const segment of chunk.segments) {
            if (!isMultiTurn(segment.category)) {
              const single = loadChunk(input.dataDir ?? bfclDataDir(), { ...chunk, segments: [segment] });
              out.push(...(await evaluateChunk(policy, single, {
                onProgress: (category, done, total) => heartbeat({ chunk: chunk.index, category, done, total }),
                log: (l) => log(`${label} chunk ${chunk.index}: ${l}`),
                ...(signal ? { signal } : {}),
              })));
              continue;
            }
            out.push(...(await playMultiTurnSegment(key, chunk.index, segment, multiTurn, input.generation.batchSize, signal)));
          }
          return out;
        });
        const finishedAt = Date.now();
        const seconds = (finishedAt - startedAt) / 1000;
        log(`${label} chunk ${chunk.index}: ${results.length} examples in ${seconds.toFixed(1)}s on ${workerName()}`);
        return { index: chunk.index, items: results.length, seconds, startedAt, finishedAt, worker: workerName(), chunk, results };
      }));
      const { chunk: _chunk, results: _results, ...timing } = stored;
      return timing;
    },

    /** The results file and summary of an evaluation from its chunks (S3 only: api or gpu queue), as one activity writes them. */
    async evalBfclMerge(raw: z.input<typeof EvalBfclMergeInput>): Promise<EvalBfclSummary> {
      const input = parseInput(EvalBfclMergeInput, raw, 'evalBfclMerge');
      const { label, key, summaryKey } = outputOf(input);
      return once(store, summaryKey, EvalBfclSummary, async () => {
        const files: BfclChunkFile[] = [];
        for (let i = 0; i < input.chunks; i++) files.push(await store.getJson(evalKeys.bfclChunk(key, i), BfclChunkFile));
        let results: BfclResults;
        try {
          results = mergeChunkFiles(files, {
            categories: input.categories,
            policy: policyDescription(input.policy, input.generation.engine),
            dataDir: input.dataDir,
            ...(input.limit !== undefined ? { limit: input.limit } : {}),
            createdAt: new Date().toISOString(),
          });
          if (input.multiTurn) results.multiTurn = input.multiTurn;
        } catch (e) {
          throw ApplicationFailure.nonRetryable(`${key}: ${e instanceof Error ? e.message : String(e)}`, 'BadInput');
        }
        await store.putText(key, `${stringifyPyJson(results, 1)}\n`, 'application/json');
        log(`${label}: BFCL results of ${files.length} chunk(s) in ${key}\n${formatSummary(results)}`);
        return { ...summaryOf(key, label, results), chunks: files.map(({ chunk: _chunk, results: _results, ...timing }) => timing) };
      });
    },
  };
}

export type EvalActivities = ReturnType<typeof createEvalActivities>;
