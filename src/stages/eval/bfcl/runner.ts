/**
 * Running a policy over BFCL examples and scoring it: the adapter around the pure modules of this folder.
 *
 * Policies:
 * - `ModelPolicy`: the project's tfjs Qwen policy. The first turn's messages and the example's functions (as OpenAI
 *   tools, ./tools.ts) go through the chat template (`renderChat` with tools, generation prompt); greedy batched
 *   generation until `<|im_end|>`; the text is decoded like BFCL's Qwen handler (./decode.ts). The tokens can come
 *   from a serving engine that serves the policy instead (src/llm/engine.ts, issue 33): the same prompt ids, greedy.
 * - `EndpointPolicy`: an OpenAI-compatible chat-completions endpoint with native tool calling (`tools` in the
 *   request, `tool_calls` in the answer), tool names with `.` sent as `_` (BFCL does so for OpenAI-style APIs).
 *   The API key is read from the environment variable the endpoint config names, at call time; it is never part
 *   of an input, a result or a cache key.
 * - `AnswersPolicy`: precomputed outputs (`--answers`).
 * - `ReferencePolicy`: each example's own reference answer (./reference.ts), a sanity check of the harness.
 *
 * `evaluateBfcl` runs a policy over the examples of the chosen categories and returns the results document
 * (./score.ts `BfclResults`). Reading the data folder happens here too (`loadCategory`).
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import type { ChatCompletionCreateParamsNonStreaming } from 'openai/resources/chat/completions';
import { z } from 'zod';
import { promptIds, type ChatTokenizer } from '../../../chat/tokenize';
import type { Message } from '../../../kernel/schema';
import { PLACEHOLDER_API_KEY, Semaphore, type ResponseCache } from '../../../llm/client';
import { canonicalJson } from '../../../kernel/canonicalJson';
import { mapConcurrent } from '../../../kernel/mapConcurrent';
import { LlmRoleConfig } from '../../../llm/llmConfig';
import { generateAsync } from '../../../model/net/generate';
import type { TokenEngine } from '../../../llm/engine';
import type { QwenModel } from '../../../model/net/qwen';
import { answerFileName, categoryKind, discoverCategories, questionFileName, selectExamples, unsupportedReason } from './categories';
import { BfclInputError, buildExamples, parsePossibleAnswers, parseQuestions, type AnswerEntry, type BfclExample } from './data';
import { decodeAnswerResult, decodeOpenAiMessage, decodeQwenText, type Decoded, type ToolCallMessage } from './decode';
import { referenceCalls } from './reference';
import { exampleResult, scoreExample, type BfclResults, type ExampleResult } from './score';
import { mergeChunkFiles, planChunks, type BfclChunk, type BfclChunkFile, type ChunkSegment } from './chunks';
import { exampleMessages, exampleTools } from './tools';
import { classifyLlmError, isContextLengthError, LlmFatalError } from '../../../llm/errors';

// ---------------------------------------------------------------------------------------------------------------
// Data

/** The categories a data folder can evaluate. */
export function availableCategories(dir: string): string[] {
  if (!existsSync(dir)) throw new BfclInputError(`BFCL data folder ${dir} does not exist (--data DIR, or CM2_BFCL_DIR)`);
  const answers = path.join(dir, 'possible_answer');
  return discoverCategories(readdirSync(dir), existsSync(answers) ? readdirSync(answers) : []);
}

/** The examples of one category (the first `limit` of them), validated. */
export function loadCategory(dir: string, category: string, limit?: number): BfclExample[] {
  const why = unsupportedReason(category);
  if (why) throw new BfclInputError(why);
  const qFile = path.join(dir, questionFileName(category));
  if (!existsSync(qFile)) {
    let known: string[] = [];
    try {
      known = availableCategories(dir);
    } catch {
      /* the folder itself is missing: say so below */
    }
    throw new BfclInputError(`no BFCL category '${category}' in ${dir}: ${qFile} does not exist${known.length ? ` (available: ${known.join(', ')})` : ''}`);
  }
  const aFile = path.join(dir, answerFileName(category));
  const ast = categoryKind(category) === 'ast';
  if (ast && !existsSync(aFile)) throw new BfclInputError(`category '${category}' is scored against possible answers, but ${aFile} does not exist`);
  const questions = parseQuestions(readFileSync(qFile, 'utf8'), qFile, category);
  const answers = ast ? parsePossibleAnswers(readFileSync(aFile, 'utf8'), aFile) : undefined;
  const examples = buildExamples(category, questions, answers, { questions: qFile, ...(ast ? { answers: aFile } : {}) });
  return limit === undefined ? examples : examples.slice(0, limit);
}

// ---------------------------------------------------------------------------------------------------------------
// Policies

/** What a policy produced for one example. */
export interface PolicyOutput {
  decoded: Decoded;
  /** Raw text (generated text, or the endpoint message's content). */
  text?: string;
  tokens?: number;
  /** A failure of the run itself for this example (e.g. the prompt does not fit), scored as incorrect. */
  failure?: { reason: string; detail: string };
}

export interface PolicyRunOptions {
  /** Called after each finished example or batch (done so far, total). */
  onProgress?: (done: number, total: number) => void;
  /** Called often while work is under way (every few decoding steps): a liveness signal for heartbeats. */
  onBusy?: () => void;
  signal?: AbortSignal;
}

export interface Policy {
  /** What was evaluated, for the results file (never a secret). */
  readonly description: Record<string, unknown>;
  /** The policy saw `a_b` for a tool named `a.b`. */
  readonly underscoreToDot: boolean;
  run(examples: readonly BfclExample[], opts?: PolicyRunOptions): Promise<PolicyOutput[]>;
}

const throwIfAborted = (signal?: AbortSignal) => {
  if (signal?.aborted) throw signal.reason instanceof Error ? signal.reason : new Error('cancelled');
};

export interface ModelPolicyOptions {
  maxNewTokens: number;
  batchSize: number;
  /** `false` appends an empty think block to the generation prompt. Default: the template's default (no block). */
  enableThinking?: boolean;
  /** Prompts longer than this are not generated (scored `prompt_too_long`). Default: max_position_embeddings − maxNewTokens. */
  maxPromptTokens?: number;
  /** A serving engine's context cap (its --max-model-len): the prompt limit's base when the policy is an engine. */
  maxModelLen?: number;
}

/** Greedy continuations of `prompts` (new token ids, the stop token included) on the model or the serving engine that serves it. */
export async function greedyTokens(model: QwenModel | TokenEngine, tok: ChatTokenizer, prompts: number[][], maxNewTokens: number, onStep?: () => void): Promise<number[][]> {
  const stopTokens = [...tok.stopIds];
  const out = 'decode' in model
    ? await model.decode(prompts.map((tokens, i) => ({ key: String(i), tokens, maxNewTokens })), { temperature: 0, stopTokens, ...(onStep ? { onStep } : {}) })
    : await generateAsync(model, prompts, { maxNewTokens, temperature: 0, stopTokens, padId: tok.special.pad, ...(onStep ? { onStep } : {}) });
  return out.tokens;
}

/** The project's Qwen policy (greedy decoding), or a serving engine that serves it. The caller owns the model (and disposes of it). */
export class ModelPolicy implements Policy {
  readonly underscoreToDot = false;

  constructor(
    private readonly model: QwenModel | TokenEngine,
    private readonly tok: ChatTokenizer,
    readonly description: Record<string, unknown>,
    private readonly opts: ModelPolicyOptions,
  ) {}

  /** Prompt ids of an example. */
  promptOf(example: BfclExample): number[] {
    const messages: Message[] = exampleMessages(example).map((m) => ({ role: m.role, content: m.content }));
    const renderOpts = this.opts.enableThinking === undefined ? {} : { enableThinking: this.opts.enableThinking };
    return promptIds(messages, exampleTools(example), this.tok, renderOpts);
  }

  async run(examples: readonly BfclExample[], opts: PolicyRunOptions = {}): Promise<PolicyOutput[]> {
    const positions = 'decode' in this.model ? this.opts.maxModelLen : this.model.config.max_position_embeddings;
    if (positions === undefined && this.opts.maxPromptTokens === undefined) throw new Error('ModelPolicy on a serving engine needs maxModelLen (its context cap) or maxPromptTokens');
    const maxPrompt = this.opts.maxPromptTokens ?? Math.max(1, positions! - this.opts.maxNewTokens);
    const outputs = new Array<PolicyOutput>(examples.length);
    const prompts = examples.map((e) => this.promptOf(e));
    let done = 0;
    const todo: number[] = [];
    prompts.forEach((p, i) => {
      if (p.length <= maxPrompt) todo.push(i);
      else {
        outputs[i] = { decoded: { calls: [] }, failure: { reason: 'prompt_too_long', detail: `prompt of ${p.length} tokens, limit ${maxPrompt}` } };
        done++;
      }
    });
    if (done > 0) opts.onProgress?.(done, examples.length);
    // Similar lengths batch together: less left padding.
    todo.sort((a, b) => prompts[a]!.length - prompts[b]!.length || a - b);
    for (let s = 0; s < todo.length; s += this.opts.batchSize) {
      throwIfAborted(opts.signal);
      const batch = todo.slice(s, s + this.opts.batchSize);
      const onStep = () => {
        throwIfAborted(opts.signal);
        opts.onBusy?.();
      };
      const out = await greedyTokens(this.model, this.tok, batch.map((i) => prompts[i]!), this.opts.maxNewTokens, onStep);
      batch.forEach((i, k) => {
        const ids = out[k] ?? [];
        const text = this.tok.decode(this.tok.withoutStop(ids));
        outputs[i] = { decoded: decodeQwenText(text), text, tokens: ids.length };
      });
      done += batch.length;
      opts.onProgress?.(done, examples.length);
    }
    return outputs;
  }
}

/** An OpenAI-compatible endpoint with native tool calling (the secret-free part of an LLM role's config). */
export const EndpointConfig = LlmRoleConfig.pick({
  model: true, apiKeyEnv: true, temperature: true, topP: true, maxTokens: true, timeoutMs: true, maxTransportRetries: true, concurrency: true,
}).extend({ baseUrl: z.url().describe('OpenAI-compatible base URL, e.g. `http://localhost:8000/v1`.') });
export type EndpointConfig = z.infer<typeof EndpointConfig>;

export interface EndpointPolicyOptions {
  /** Answers by request hash (an S3 prefix in the activity): a retried evaluation never pays twice. */
  cache?: ResponseCache;
  /** Where API keys are read from, at call time. Default: process.env. */
  env?: NodeJS.ProcessEnv;
  /** First in-process retry wait (ms), doubled after each failure. Default 1000. */
  backoffMs?: number;
}

const CachedMessage = z.object({
  content: z.string().nullable().optional(),
  tool_calls: z.array(z.object({ function: z.object({ name: z.string(), arguments: z.string() }).partial() })).nullable().optional(),
  completionTokens: z.number().int().optional(),
  promptTokens: z.number().int().optional(),
  cachedPromptTokens: z.number().int().optional(),
});

/** An OpenAI-compatible endpoint, temperature 0 unless configured otherwise. */
export class EndpointPolicy implements Policy {
  readonly underscoreToDot = true;
  readonly description: Record<string, unknown>;
  private readonly semaphore: Semaphore;
  private sdk?: { key: string; client: OpenAI };

  /** Requests in flight at once (the endpoint config's `concurrency`). */
  get concurrency(): number {
    return this.cfg.concurrency;
  }

  constructor(private readonly cfg: EndpointConfig, private readonly opts: EndpointPolicyOptions = {}) {
    this.description = { kind: 'endpoint', baseUrl: cfg.baseUrl, model: cfg.model, temperature: cfg.temperature ?? 0 };
    this.semaphore = new Semaphore(cfg.concurrency);
  }

  private client(): OpenAI {
    const env = this.opts.env ?? process.env;
    const fromEnv = this.cfg.apiKeyEnv ? env[this.cfg.apiKeyEnv] : undefined;
    const key = fromEnv ? fromEnv : PLACEHOLDER_API_KEY;
    if (this.sdk?.key !== key) {
      this.sdk = { key, client: new OpenAI({ baseURL: this.cfg.baseUrl, apiKey: key, maxRetries: 0, timeout: this.cfg.timeoutMs, organization: null, project: null }) };
    }
    return this.sdk.client;
  }

  /** The request body of an example (no secrets; also the cache key's material). */
  requestOf(example: BfclExample): ChatCompletionCreateParamsNonStreaming {
    const tools = exampleTools(example, { dotToUnderscore: true });
    const body: ChatCompletionCreateParamsNonStreaming = { ...this.requestBase(), messages: exampleMessages(example) as ChatCompletionCreateParamsNonStreaming['messages'] };
    if (tools.length > 0) body.tools = tools as ChatCompletionCreateParamsNonStreaming['tools'];
    return body;
  }

  /** The request's settings without messages and tools: model, temperature, top_p, max_tokens. */
  requestBase(): Omit<ChatCompletionCreateParamsNonStreaming, 'messages'> {
    const body: Omit<ChatCompletionCreateParamsNonStreaming, 'messages'> = { model: this.cfg.model, temperature: this.cfg.temperature ?? 0 };
    if (this.cfg.topP !== undefined) body.top_p = this.cfg.topP;
    if (this.cfg.maxTokens !== undefined) body.max_tokens = this.cfg.maxTokens;
    return body;
  }

  /**
   * One chat completion, from the cache when it holds this request (retried on transport errors). `cacheHit`: it came
   * from the cache (not paid again); the token counts are the endpoint's `usage` of the call that answered it.
   */
  async complete(body: ChatCompletionCreateParamsNonStreaming, signal?: AbortSignal): Promise<z.infer<typeof CachedMessage> & { cacheHit?: true }> {
    const key = createHash('sha256').update(canonicalJson({ kind: 'bfcl-tools', baseUrl: this.cfg.baseUrl, body })).digest('hex');
    const hit = await this.opts.cache?.get(key);
    if (hit !== undefined) {
      const parsed = CachedMessage.safeParse(JSON.parse(hit));
      if (parsed.success) return { ...parsed.data, cacheHit: true };
    }
    for (let failures = 0; ; ) {
      throwIfAborted(signal);
      try {
        const release = await this.semaphore.acquire();
        // The SDK never removes the abort listener it adds: give it a per-request signal, linked to the caller's.
        const request = new AbortController();
        const onAbort = () => request.abort(signal?.reason);
        signal?.addEventListener('abort', onAbort, { once: true });
        let completion: OpenAI.Chat.Completions.ChatCompletion;
        try {
          completion = await this.client().chat.completions.create(body, { signal: request.signal });
        } finally {
          signal?.removeEventListener('abort', onAbort);
          release();
        }
        const m = completion.choices[0]?.message;
        const message = {
          content: m?.content ?? null,
          tool_calls: (m?.tool_calls ?? null)?.flatMap((t) => ('function' in t ? [{ function: { name: t.function.name, arguments: t.function.arguments } }] : [])) ?? null,
          completionTokens: completion.usage?.completion_tokens ?? 0,
          promptTokens: completion.usage?.prompt_tokens ?? 0,
          cachedPromptTokens: completion.usage?.prompt_tokens_details?.cached_tokens ?? 0,
        };
        await this.opts.cache?.put(key, JSON.stringify(message));
        return message;
      } catch (err) {
        if (signal?.aborted) throw err;
        const e = classifyLlmError(err);
        if (e instanceof LlmFatalError) throw e;
        failures++;
        e.attempts = failures;
        if (failures > this.cfg.maxTransportRetries || (e.retryAfterMs ?? 0) > 60_000) throw e;
        const wait = e.retryAfterMs ?? (this.opts.backoffMs ?? 1000) * 2 ** (failures - 1) * (0.5 + Math.random() * 0.5);
        await new Promise((r) => setTimeout(r, wait));
      }
    }
  }

  async run(examples: readonly BfclExample[], opts: PolicyRunOptions = {}): Promise<PolicyOutput[]> {
    return mapConcurrent(examples, this.cfg.concurrency, async (example): Promise<PolicyOutput> => {
      let message: Awaited<ReturnType<EndpointPolicy['complete']>>;
      try {
        message = await this.complete(this.requestOf(example), opts.signal);
      } catch (e) {
        // a prompt the endpoint's context cannot hold is this example's failure, as for the project's model
        if (isContextLengthError(e)) return { decoded: { calls: [] }, failure: { reason: 'prompt_too_long', detail: (e as Error).message.slice(0, 300) } };
        throw e;
      }
      return {
        decoded: decodeOpenAiMessage(message as ToolCallMessage),
        text: message.content ?? '',
        ...(message.completionTokens !== undefined ? { tokens: message.completionTokens } : {}),
      };
    }, opts.onProgress);
  }
}

/** Precomputed outputs (`--answers`): an example without an answer is scored `no_answer`. */
export class AnswersPolicy implements Policy {
  readonly description: Record<string, unknown>;

  constructor(private readonly answers: ReadonlyMap<string, AnswerEntry>, file: string, readonly underscoreToDot = false) {
    this.description = { kind: 'answers', file };
  }

  private readonly used = new Set<string>();

  /** Ids of the answers file that no evaluated example asked for (another category, a typo, beyond --limit). */
  unused(): string[] {
    return [...this.answers.keys()].filter((id) => !this.used.has(id));
  }

  async run(examples: readonly BfclExample[], opts: PolicyRunOptions = {}): Promise<PolicyOutput[]> {
    const out = examples.map((e): PolicyOutput => {
      this.used.add(e.id);
      const a = this.answers.get(e.id);
      if (!a) return { decoded: { calls: [] }, failure: { reason: 'no_answer', detail: `no line with id ${e.id} in the answers file` } };
      return { decoded: decodeAnswerResult(a.result) };
    });
    opts.onProgress?.(examples.length, examples.length);
    return out;
  }
}

/** Every example's own reference answer (first listed possible values): checks the harness, not a model. */
export class ReferencePolicy implements Policy {
  readonly description = { kind: 'reference' };
  readonly underscoreToDot = false;

  async run(examples: readonly BfclExample[], opts: PolicyRunOptions = {}): Promise<PolicyOutput[]> {
    opts.onProgress?.(examples.length, examples.length);
    return examples.map((e) => ({ decoded: { calls: referenceCalls(e) } }));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Evaluation

export interface EvaluateOptions {
  categories: readonly string[];
  limit?: number;
  /** Only these examples (BFCL ids; those of other categories are ignored here), before `limit`. */
  ids?: readonly string[];
  /** The BFCL data folder (the default: bfclDataDir() in src/infra/binaries.ts). */
  dataDir: string;
  /**
   * Examples per chunk (./chunks.ts): the examples are generated chunk by chunk, as the evaluation stage's chunk
   * activities do, so the results equal the stage's for the same `chunkSize`. Default: one chunk (each category in
   * one piece).
   */
  chunkSize?: number;
  /** Progress: category, examples done in it, its total. Also called while a batch is being generated. */
  onProgress?: (category: string, done: number, total: number) => void;
  log?: (line: string) => void;
  signal?: AbortSignal;
}

/** The examples of a chunk's segments (validated); a data folder that lost examples since the plan is an input error. */
export function loadChunk(dataDir: string, chunk: BfclChunk): Array<{ segment: ChunkSegment; examples: BfclExample[] }> {
  return chunk.segments.map((segment) => {
    const examples = loadCategory(dataDir, segment.category, segment.start + segment.count).slice(segment.start);
    if (examples.length !== segment.count) {
      throw new BfclInputError(`chunk ${chunk.index}: ${segment.category} has ${segment.start + examples.length} examples in ${dataDir}, the plan expected at least ${segment.start + segment.count}`);
    }
    return { segment, examples };
  });
}

/** Runs `policy` on the examples of one chunk and scores them (segment by segment, examples in order). */
export async function evaluateChunk(
  policy: Policy,
  segments: ReadonlyArray<{ segment: ChunkSegment; examples: readonly BfclExample[] }>,
  opts: Pick<EvaluateOptions, 'onProgress' | 'log' | 'signal'> = {},
): Promise<ExampleResult[]> {
  const results: ExampleResult[] = [];
  for (const { segment, examples } of segments) {
    const { category } = segment;
    const tc = Date.now();
    let done = 0;
    const outputs = await policy.run(examples, {
      onProgress: (d, total) => opts.onProgress?.(category, (done = d), total),
      onBusy: () => opts.onProgress?.(category, done, examples.length),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    let correct = 0;
    examples.forEach((example, i) => {
      const out = outputs[i]!;
      const verdict = out.failure
        ? { valid: false, reason: out.failure.reason, detail: out.failure.detail }
        : scoreExample(example, out.decoded, { underscoreToDot: policy.underscoreToDot });
      if (verdict.valid) correct++;
      results.push(exampleResult(example, out.decoded, verdict, { ...(out.text !== undefined ? { text: out.text } : {}), ...(out.tokens !== undefined ? { tokens: out.tokens } : {}) }));
    });
    const range = segment.start === 0 && segment.count === examples.length ? '' : ` [${segment.start}, ${segment.start + segment.count})`;
    opts.log?.(`${category}${range}: ${correct}/${examples.length} correct in ${((Date.now() - tc) / 1000).toFixed(1)}s`);
  }
  return results;
}

/** Runs `policy` on every chosen category (chunk by chunk) and scores it. Data errors are thrown before anything runs. */
export async function evaluateBfcl(policy: Policy, opts: EvaluateOptions): Promise<BfclResults> {
  const t0 = Date.now();
  const dataDir = opts.dataDir;
  // Load (and validate) everything first: a bad file fails fast, before any generation.
  const sets = opts.categories.map((c) => ({ category: c, examples: selectExamples(c, loadCategory(dataDir, c), opts.ids, opts.limit, path.join(dataDir, questionFileName(c))) }));
  const total = sets.reduce((n, s) => n + s.examples.length, 0);
  const chunks = planChunks(sets.map((s) => ({ category: s.category, count: s.examples.length })), opts.chunkSize ?? Math.max(1, total));
  const byCategory = new Map(sets.map((s) => [s.category, s.examples]));
  const files: BfclChunkFile[] = [];
  for (const chunk of chunks) {
    const startedAt = Date.now();
    const segments = chunk.segments.map((segment) => ({ segment, examples: byCategory.get(segment.category)!.slice(segment.start, segment.start + segment.count) }));
    const results = await evaluateChunk(policy, segments, opts);
    const finishedAt = Date.now();
    files.push({ chunk, results, index: chunk.index, items: results.length, seconds: (finishedAt - startedAt) / 1000, startedAt, finishedAt, worker: 'local' });
  }
  const merged = mergeChunkFiles(files, {
    categories: opts.categories,
    policy: policy.description,
    dataDir,
    ...(opts.limit !== undefined ? { limit: opts.limit } : {}),
    createdAt: new Date().toISOString(),
  });
  return { ...merged, ...(opts.ids !== undefined ? { ids: [...opts.ids] } : {}), seconds: (Date.now() - t0) / 1000 };
}
