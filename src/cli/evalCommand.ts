/**
 * `cm2 eval bfcl`: BFCL v4 function-calling accuracy of a policy, locally (no Temporal; see docs/eval.md).
 *
 *   cm2 eval bfcl --policy DIR                  a local HF checkpoint folder of the project's model
 *   cm2 eval bfcl --policy s3://BUCKET/PREFIX   an SFT policy folder (…/sft/final) or an RL checkpoint (…/step-N) in S3
 *   cm2 eval bfcl --policy openai:MODEL@URL     an OpenAI-compatible endpoint with native tool calling
 *                 (or --endpoint URL --model MODEL; --api-key-env VAR names the variable holding the key)
 *   cm2 eval bfcl --policy reference            every example's own reference answer (checks the harness)
 *   cm2 eval bfcl --answers FILE.jsonl          score precomputed outputs: {"id", "result": [{"f": {"a": 1}}]} per line
 *
 * with `--category a,b` (or `all`; default: the seven categories CM2 reports), `--ids a,b` (only these examples; their
 * categories when `--category` is not given: e.g. the failures of an earlier run), `--limit N`, `--data DIR`, `--out FILE`,
 * `--chunk-size N` (examples generated together as one of the evaluation stage's chunks; default the stage's, 64).
 *
 * Multi-turn categories (`multi_turn_base`, `…_miss_func`, `…_miss_param`, `…_long_context`, or `multi_turn` for the
 * four) come from the installed `bfcl-eval` and are executed and scored by it (src/infra/bfclBridge.ts); answers rows
 * are BFCL's decoded multi-turn results (`{"id", "result": [[["call(a=1)", …], …steps], …turns]}`).
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { loadStoredModel } from '../stages/eval/activities';
import { type EvalPolicy } from '../stages/eval/shapes';
import { loadChatTokenizer } from '../chat/tokenize';
import { categoryOfId, DEFAULT_CATEGORIES, parseCategoryList, parseIdList } from '../stages/eval/bfcl/categories';
import { BfclDataError, BfclInputError, parseAnswers } from '../stages/eval/bfcl/data';
import { stringifyPyJson } from '../stages/eval/bfcl/pyValue';
import { AnswersPolicy, availableCategories, EndpointConfig, EndpointPolicy, evaluateBfcl, ModelPolicy, ReferencePolicy, type Policy } from '../stages/eval/bfcl/runner';
import { aggregate, formatSummary, type BfclResults, type ExampleResult } from '../stages/eval/bfcl/score';
import { isMultiTurn, MULTI_TURN_CATEGORIES, multiTurnResultProblem, evaluateMultiTurnEpisodes, ReferenceMultiTurnPolicy, scoreMultiTurnAnswers, type MultiTurnPolicy, type MultiTurnResult } from '../stages/eval/bfcl/multiTurn';
import { bridgeBackend, bridgeFormatter, bridgeInfo, loadMultiTurnCategory } from '../stages/eval/bfcl/multiTurnBridge';
import { EndpointMultiTurnPolicy, EndpointPromptPolicy, ModelMultiTurnPolicy, type BfclFormatter, type MultiTurnMode } from '../stages/eval/bfcl/multiTurnPolicies';
import { BfclBridge } from '../infra/bfclBridge';
import type { Tau2Responder } from '../stages/eval/tau2/episode';
import { ModelAgent } from '../stages/eval/tau2/modelAgent';
import { EndpointResponder, ReferenceAgent } from '../stages/eval/tau2/responders';
import { bfclDataDir, projectRoot } from '../infra/binaries';
import { EvalConfig, type Cm2Config } from '../run/config';
import { ObjectStore } from '../storage/store';
import { selectBackend, type BackendPref } from '../model/net/backend';
import { loadHfCheckpoint } from '../model/formats/checkpoint';
import type { QwenModel } from '../model/net/qwen';

export interface EvalBfclCommandOptions {
  policy?: string;
  endpoint?: string;
  model?: string;
  apiKeyEnv?: string;
  answers?: string;
  /** The answers call `a.b` as `a_b` (they come from an OpenAI-style endpoint). */
  underscoreNames?: boolean;
  category?: string;
  limit?: string;
  /** `--ids a,b`: only these examples (their categories, when `--category` is not given). */
  ids?: string;
  data?: string;
  out?: string;
  tokenizer?: string;
  maxNewTokens?: string;
  batchSize?: string;
  /** Examples per chunk (default: the config's `eval.bfcl.chunkSize` default), as the evaluation stage cuts them. */
  chunkSize?: string;
  backend?: string;
  concurrency?: string;
  temperature?: string;
  /** One endpoint request's timeout, in milliseconds. */
  timeoutMs?: string;
  /** An endpoint's calls: `fc` native tool calls (default), `prompt` BFCL's prompting mode (multi-turn so far). */
  mode?: string;
  /** commander's `--no-thinking`: false appends an empty think block. */
  thinking?: boolean;
  json?: boolean;
  quiet?: boolean;
}

/** `--mode fc|prompt` (default fc): how an endpoint is asked for calls. */
export function parseMode(mode: string | undefined): MultiTurnMode {
  if (mode === undefined || mode === 'fc' || mode === 'prompt') return mode ?? 'fc';
  throw new BfclInputError(`--mode ${mode}: expected fc (native tool calls) or prompt (BFCL's prompting mode: calls written as text)`);
}

export const int = (v: string | undefined, name: string, min = 1): number | undefined => {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new BfclInputError(`--${name}: expected an integer ≥ ${min}, got '${v}'`);
  return n;
};

/** `openai:MODEL@URL` → endpoint parts (the model may contain `@`; the URL starts at the last `@http`). */
export function parseEndpointSpec(spec: string): { model: string; baseUrl: string } {
  const body = spec.slice('openai:'.length);
  const at = body.lastIndexOf('@http');
  if (at <= 0) throw new BfclInputError(`--policy ${spec}: expected openai:MODEL@URL, e.g. openai:qwen3-8b@http://localhost:8000/v1`);
  return { model: body.slice(0, at), baseUrl: body.slice(at + 1) };
}

/** `s3://bucket/key/prefix` → bucket and prefix (no trailing slash). */
export function parseS3Ref(ref: string): { bucket: string; prefix: string } {
  const m = /^s3:\/\/([^/]+)\/(.+?)\/?$/.exec(ref);
  if (!m) throw new BfclInputError(`--policy ${ref}: expected s3://BUCKET/PREFIX`);
  return { bucket: m[1]!, prefix: m[2]! };
}

export interface Loaded {
  policy: Policy;
  dispose: () => void;
  /** The same policy for multi-turn episodes (checkpoints and endpoints). */
  multiTurn?: (formatter: BfclFormatter) => MultiTurnPolicy;
  /** The same policy as a τ²-Bench agent (checkpoints, endpoints, the reference). */
  tau2?: () => Tau2Responder;
}

async function modelPolicy(model: QwenModel, tok: ReturnType<typeof loadChatTokenizer>, description: Record<string, unknown>, opts: EvalBfclCommandOptions): Promise<Loaded> {
  const maxNewTokens = int(opts.maxNewTokens, 'max-new-tokens') ?? 256;
  const batchSize = int(opts.batchSize, 'batch-size') ?? 8;
  const policy = new ModelPolicy(model, tok, description, { maxNewTokens, batchSize, ...(opts.thinking === false ? { enableThinking: false } : {}) });
  const multiTurn = (formatter: BfclFormatter) => new ModelMultiTurnPolicy(model, tok, description, formatter, {
    maxNewTokens,
    batchSize,
    maxPromptTokens: Math.max(1, model.config.max_position_embeddings - maxNewTokens),
    ...(opts.thinking === false ? { enableThinking: false } : {}),
  });
  const maxPromptTokens = Math.max(1, model.config.max_position_embeddings - maxNewTokens);
  const tau2 = () => new ModelAgent(model, tok, description, { maxNewTokens, batchSize, maxPromptTokens, ...(opts.thinking === false ? { enableThinking: false } : {}) });
  return { policy, dispose: () => model.dispose(), multiTurn, tau2 };
}

/** Resolves the policy options into a runnable policy. `config` is loaded only for S3 references. */
export async function resolvePolicy(opts: EvalBfclCommandOptions, config: () => Cm2Config, log: (l: string) => void, bridge: () => BfclBridge): Promise<Loaded> {
  const given = [opts.policy, opts.endpoint, opts.answers].filter((x) => x !== undefined).length;
  if (given !== 1) throw new BfclInputError('give exactly one of --policy, --endpoint (with --model) or --answers');
  const none = () => undefined;
  if (opts.answers !== undefined) {
    const file = opts.answers;
    if (!existsSync(file)) throw new BfclInputError(`--answers ${file}: no such file`);
    return { policy: new AnswersPolicy(parseAnswers(readFileSync(file, 'utf8'), file), file, opts.underscoreNames ?? false), dispose: none };
  }
  const spec = opts.policy;
  if (spec === 'reference') return { policy: new ReferencePolicy(), dispose: none, tau2: () => new ReferenceAgent() };
  if (opts.endpoint !== undefined || spec?.startsWith('openai:')) {
    const { model, baseUrl } = opts.endpoint !== undefined ? { model: opts.model ?? '', baseUrl: opts.endpoint } : parseEndpointSpec(spec!);
    if (!model) throw new BfclInputError('--endpoint needs --model NAME');
    const parsed = EndpointConfig.safeParse({
      baseUrl,
      model,
      ...(opts.apiKeyEnv ? { apiKeyEnv: opts.apiKeyEnv } : {}),
      ...(opts.concurrency ? { concurrency: int(opts.concurrency, 'concurrency') } : {}),
      ...(opts.temperature ? { temperature: Number(opts.temperature) } : {}),
      // Without it the server decides: a model that never stops runs to the end of its context.
      ...(opts.maxNewTokens ? { maxTokens: int(opts.maxNewTokens, 'max-new-tokens') } : {}),
      ...(opts.timeoutMs ? { timeoutMs: int(opts.timeoutMs, 'timeout-ms') } : {}),
    });
    if (!parsed.success) throw new BfclInputError(`endpoint: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
    const endpoint = new EndpointPolicy(parsed.data);
    const mode = parseMode(opts.mode);
    // BFCL's prompting mode: its system prompt and decoder (bfcl-eval, through the bridge) for the single-turn categories too
    const policy = mode === 'prompt' ? new EndpointPromptPolicy(endpoint, bridgeFormatter(bridge())) : endpoint;
    return { policy, dispose: none, multiTurn: (formatter) => new EndpointMultiTurnPolicy(endpoint, formatter, mode), tau2: () => new EndpointResponder(endpoint) };
  }
  await selectBackend((opts.backend ?? 'auto') as BackendPref, log);
  if (spec!.startsWith('s3://')) {
    const cfg = config();
    const { bucket, prefix } = parseS3Ref(spec!);
    const store = ObjectStore.fromConfig({ ...cfg.s3, bucket });
    let ref: Exclude<EvalPolicy, { kind: 'endpoint' }>;
    // A checkpoint folder (manifest.json, files verified against it) or a policy folder (config.json + weights).
    const manifestKey = prefix.endsWith('manifest.json') ? prefix : `${prefix}/manifest.json`;
    if (await store.exists(manifestKey)) ref = { kind: 'ckpt', manifestKey, step: Number(/step-(\d+)/.exec(manifestKey)?.[1] ?? 0) };
    else if (await store.exists(`${prefix}/config.json`)) ref = { kind: 'hf', prefix };
    else throw new BfclInputError(`${spec}: neither ${prefix}/config.json (a policy folder) nor ${manifestKey} (a checkpoint) exists in bucket ${bucket}`);
    const tokenizerDir = opts.tokenizer ?? (ref.kind === 'ckpt' ? cfg.sft.tokenizerDir : undefined);
    const { model, tok } = await loadStoredModel(store, ref, tokenizerDir);
    return modelPolicy(model, tok, { ...ref, bucket }, opts);
  }
  const dir = path.resolve(spec!);
  if (!existsSync(path.join(dir, 'config.json'))) throw new BfclInputError(`--policy ${spec}: not a checkpoint folder (no config.json); for S3 use s3://BUCKET/PREFIX`);
  const tokDir = opts.tokenizer ?? dir;
  if (!existsSync(path.join(tokDir, 'tokenizer.json'))) throw new BfclInputError(`no tokenizer.json in ${tokDir}: give --tokenizer DIR (the demo tokenizer is ${path.join(projectRoot, 'assets', 'demo-tokenizer')})`);
  const tok = loadChatTokenizer(tokDir);
  return modelPolicy(loadHfCheckpoint(dir), tok, { kind: 'checkpoint', dir }, opts);
}

/** `--category` split into single-turn names (for parseCategoryList) and multi-turn ones (`multi_turn`: all four). */
export function splitCategories(spec: string): { single: string | undefined; multi: string[] } {
  const names = spec.split(',').map((s) => s.trim()).filter(Boolean);
  const multi: string[] = [];
  for (const n of names) for (const c of n === 'multi_turn' ? MULTI_TURN_CATEGORIES : isMultiTurn(n) ? [n] : []) if (!multi.includes(c)) multi.push(c);
  const single = names.filter((n) => n !== 'multi_turn' && !isMultiTurn(n));
  return { single: single.length ? single.join(',') : undefined, multi };
}

/** The multi-turn categories' results (the bridge is started here and ended before returning). */
async function evaluateMultiTurnCategories(opts: EvalBfclCommandOptions, loaded: Loaded, categories: readonly string[], limit: number | undefined, ids: readonly string[] | undefined, log: (l: string) => void, bridge: BfclBridge): Promise<{ results: ExampleResult[]; info: { bfclEval: string; data: string }; answerIds: Set<string> }> {
  const info = await bridgeInfo(bridge);
  log(`multi-turn: bfcl-eval ${info.bfclEval} (Python ${info.python}), data ${info.data}`);
  const backend = bridgeBackend(bridge);
  const results: ExampleResult[] = [];
  const answerIds = new Set<string>();
  let answers: Map<string, MultiTurnResult> | undefined;
  for (const category of categories) {
    const t0 = Date.now();
    const entries = await loadMultiTurnCategory(bridge, category, limit, ids);
    let rs;
    if (opts.answers !== undefined) {
      if (!answers) {
        answers = new Map();
        for (const a of parseAnswers(readFileSync(opts.answers, 'utf8'), opts.answers).values()) {
          if (!a.id.startsWith('multi_turn_')) continue;
          const problem = multiTurnResultProblem(a.result);
          if (problem) throw new BfclDataError(opts.answers, a.line, problem.field, problem.problem);
          answers.set(a.id, a.result as unknown as MultiTurnResult);
        }
      }
      for (const e of entries) if (answers.has(e.id)) answerIds.add(e.id);
      rs = await scoreMultiTurnAnswers(entries, answers, backend);
    } else {
      const policy = opts.policy === 'reference' ? new ReferenceMultiTurnPolicy() : loaded.multiTurn?.(bridgeFormatter(bridge));
      if (!policy) throw new BfclInputError('this policy cannot play multi-turn episodes');
      const concurrency = opts.policy === 'reference' ? 1 : int(opts.concurrency, 'concurrency') ?? int(opts.batchSize, 'batch-size') ?? 8;
      let last = 0;
      rs = await evaluateMultiTurnEpisodes(entries, policy, backend, {
        sessionPrefix: `cli${process.pid}`,
        concurrency,
        onProgress: (done, total) => {
          if (Date.now() - last > 5000 || done === total) {
            last = Date.now();
            log(`${category}: ${done}/${total}`);
          }
        },
      });
    }
    log(`${category}: ${rs.filter((r) => r.valid).length}/${rs.length} correct in ${((Date.now() - t0) / 1000).toFixed(1)}s`);
    results.push(...(rs as ExampleResult[]));
  }
  return { results, info: { bfclEval: info.bfclEval, data: info.data }, answerIds };
}

/** Runs the evaluation, writes `--out`, prints the summary. Returns the results. */
export async function evalBfclCommand(opts: EvalBfclCommandOptions, config: () => Cm2Config): Promise<BfclResults> {
  const log = (l: string) => {
    if (!opts.quiet) console.error(l);
  };
  const dataDir = opts.data ? path.resolve(opts.data) : bfclDataDir();
  const idList = opts.ids === undefined ? undefined : parseIdList(opts.ids);
  const split = splitCategories(opts.category ?? (idList ? idList.categories.join(',') : DEFAULT_CATEGORIES.join(',')));
  let categories = split.single === undefined ? [] : parseCategoryList(split.single, split.single.split(',').includes('all') ? availableCategories(dataDir) : []);
  const ids = idList?.ids;
  if (idList) {
    const evaluated = [...categories, ...split.multi];
    const outside = idList.ids.filter((id) => !evaluated.includes(categoryOfId(id)));
    if (outside.length > 0) throw new BfclInputError(`--ids ${outside.join(', ')}: not of the categories evaluated (${evaluated.join(', ')}); leave out --category to take the ids' own`);
    // `--category all --ids …` or `multi_turn`: the categories none of the ids is in are left out, not reported empty
    categories = categories.filter((c) => idList.categories.includes(c));
    split.multi = split.multi.filter((c) => idList.categories.includes(c));
  }
  const limit = int(opts.limit, 'limit');
  if (parseMode(opts.mode) === 'prompt' && opts.endpoint === undefined && !opts.policy?.startsWith('openai:')) throw new BfclInputError('--mode prompt is for endpoints (--endpoint or --policy openai:MODEL@URL)');
  // The stage's chunks: the same batches are formed, so the stage and this command agree on the same policy.
  const chunkSize = int(opts.chunkSize, 'chunk-size') ?? EvalConfig.parse({}).bfcl.chunkSize;
  const t0 = Date.now();
  let results: BfclResults | undefined;
  let multiAnswerIds = new Set<string>();
  let multi: Awaited<ReturnType<typeof evaluateMultiTurnCategories>> | undefined;
  let policyForUnused: AnswersPolicy | undefined;
  let bridge: BfclBridge | undefined;
  const getBridge = () => (bridge ??= new BfclBridge({ log }));
  const loaded = await resolvePolicy(opts, config, log, getBridge);
  const description = loaded.policy.description;
  if (loaded.policy instanceof AnswersPolicy) policyForUnused = loaded.policy;
  try {
    if (categories.length > 0) {
      let last = 0;
      results = await evaluateBfcl(loaded.policy, {
        categories,
        dataDir,
        ...(limit !== undefined ? { limit } : {}),
        ...(ids !== undefined ? { ids } : {}),
        chunkSize,
        log,
        onProgress: (category, done, total) => {
          if (Date.now() - last > 5000 || done === total) {
            last = Date.now();
            log(`${category}: ${done}/${total}`);
          }
        },
      });
    }
    if (split.multi.length > 0) multi = await evaluateMultiTurnCategories(opts, loaded, split.multi, limit, ids, log, getBridge());
  } finally {
    loaded.dispose();
    await bridge?.close();
  }
  if (multi) {
    multiAnswerIds = multi.answerIds;
    const all = [...categories, ...split.multi];
    const examples = [...(results?.examples ?? []), ...multi.results];
    results = {
      benchmark: 'BFCL_v4',
      policy: description,
      dataDir: categories.length > 0 ? dataDir : multi.info.data,
      ...(limit !== undefined ? { limit } : {}),
      ...(ids !== undefined ? { ids } : {}),
      createdAt: new Date().toISOString(),
      seconds: (Date.now() - t0) / 1000,
      ...aggregate(all, examples),
      examples,
      multiTurn: multi.info,
    };
  }
  if (!results) throw new BfclInputError('no category to evaluate');
  if (policyForUnused) {
    const unused = policyForUnused.unused().filter((id) => !multiAnswerIds.has(id));
    if (unused.length > 0) log(`${unused.length} answer(s) not scored (ids not among the evaluated examples), e.g. ${unused.slice(0, 3).join(', ')}`);
  }
  if (opts.out) {
    writeFileSync(opts.out, `${stringifyPyJson(results, 1)}\n`);
    log(`results: ${opts.out}`);
  }
  if (opts.json) console.log(JSON.stringify({ categories: results.categories, overall: results.overall, seconds: results.seconds }));
  else console.log(`${formatSummary(results)}\n(${results.seconds.toFixed(1)}s)`);
  return results;
}

/** The command's entry point: input and data errors are reported in one line (exit code 2), others thrown. */
export async function evalBfclMain(opts: EvalBfclCommandOptions, config: () => Cm2Config): Promise<void> {
  try {
    await evalBfclCommand(opts, config);
  } catch (e) {
    if (!(e instanceof BfclInputError || e instanceof BfclDataError)) throw e;
    console.error(`cm2 eval bfcl: ${e.message}`);
    process.exitCode = 2;
  }
}
