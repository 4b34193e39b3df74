/**
 * One client for every LLM role, on any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM,
 * SGLang, Ollama).
 *
 * What it adds on top of the `openai` SDK:
 * - per-role configuration (model, sampling, structured-output mode, pricing), see ./llmConfig.ts;
 * - bounded concurrency per role (one semaphore per role and client, i.e. per worker process);
 * - automatic downgrade of request parameters a server rejects (response_format json_schema →
 *   json_object → none, reasoning_effort dropped, max_tokens → max_completion_tokens), remembered per role;
 * - failure classification: transient failures (5xx, 408, timeouts, connection errors) are retried
 *   a few times in process, honouring Retry-After, then thrown as `LlmRetryableError` so the activity
 *   retries with Temporal's backoff; everything else is `LlmFatalError`;
 * - rate limits (429) are not failures: the request waits its Retry-After (jittered) and is sent again without
 *   using up those retries, and the role's requests are paced by an adaptive limiter (./rateLimit.ts) so that
 *   throughput stays at the endpoint's limit instead of collapsing into waves of refused retries;
 * - token and cost accounting per call (totals per role, and an `onUsage` hook for metrics);
 * - an optional response cache, written as soon as an answer arrives (before anyone parses it), so that
 *   a crashed or retried activity never pays twice for the same answer; an answer whose cache write fails (store
 *   down) is kept in this process, answers the retry that outage causes, and is written once the store is back.
 *
 * Deliberately free of Temporal imports: ./temporal.ts converts the errors into ApplicationFailures.
 */
import { createHash } from 'node:crypto';
import OpenAI, { APIError } from 'openai';
import type { ChatCompletion, ChatCompletionCreateParamsNonStreaming } from 'openai/resources/chat/completions';
import type { Usage } from '../kernel/roleContracts';
import { zeroUsage, addUsage } from '../kernel/roleContracts';
import { isOnline, type LlmConfig, type LlmRoleConfig, type ReasoningEffort, type RoleName, type StructuredOutputMode } from './llmConfig';
import { classifyLlmError, LlmFatalError } from './errors';
import { AdaptiveRateLimiter } from './rateLimit';

// ---------------------------------------------------------------------------------------------------
// Public types

import type { ChatMessage } from './prompting';
import { canonicalJson } from '../kernel/canonicalJson';

export type { ChatMessage };

/**
 * A JSON schema for structured output. With `strict` (the default) `schema` must be strict-mode compatible for
 * OpenAI (every property required, no additional properties); schemas with maps (`additionalProperties: {…}`),
 * such as the checklist's `dependence` and `weight`, are sent with `strict: false` (best-effort guidance; the
 * caller validates anyway).
 */
export interface JsonSchemaSpec {
  name: string;
  schema: Readonly<Record<string, unknown>>;
  strict?: boolean;
}

export interface ChatRequest {
  role: RoleName;
  messages: ChatMessage[];
  jsonSchema?: JsonSchemaSpec;
  /** Distinguishes otherwise identical requests in the cache (e.g. two cascade passes at the same effort). */
  cacheSalt?: string;
  /** Overrides the role's configured reasoning effort for this call (the filter cascade sets it per pass). */
  reasoningEffort?: ReasoningEffort;
  /** Aborts the call (e.g. on activity cancellation); an abort is rethrown as is, not classified. */
  signal?: AbortSignal;
}

export interface ChatResponse {
  /** The assistant message content ("" if the server sent none). */
  text: string;
  usage: Usage;
  /** True when answered from the response cache. */
  cached: boolean;
}

/** Key-value store for raw answers (an S3 prefix in production, a Map in tests). */
export interface ResponseCache {
  get(key: string): Promise<string | undefined>;
  put(key: string, value: string): Promise<void>;
}

export interface BackoffPolicy {
  /** First in-process retry waits about this long (with jitter), doubling after each failure. */
  baseMs: number;
  /** Cap on one computed backoff wait. */
  maxMs: number;
  /**
   * Longest Retry-After we wait for in process. A longer one is handed to Temporal at once (the error's
   * `retryAfterMs` becomes the activity's `nextRetryDelay`), so no activity slot idles for minutes.
   */
  maxRetryAfterMs: number;
  /**
   * Rate limiting (429) is not a failure: a 429'd request waits (its Retry-After, jittered) and is sent again without
   * using up `maxTransportRetries`, for at most this long in total per call; after that the 429 goes to Temporal.
   */
  maxRateLimitWaitMs: number;
  /** Pace a role's requests after 429s (./rateLimit.ts); off: only each 429'd request waits (measurements). */
  pace: boolean;
}

export interface LlmClientOptions {
  cache?: ResponseCache;
  /** Where warnings go (parameter downgrades, cache write failures). Default: console.warn. */
  log?: (message: string) => void;
  backoff?: Partial<BackoffPolicy>;
  /** Environment to read API keys from, at call time. Default: process.env. */
  env?: NodeJS.ProcessEnv;
  /**
   * Called with every answer's usage as it arrives (metrics): `cached` answers come from the response cache and cost
   * nothing. Its errors are swallowed: accounting never fails a call.
   */
  onUsage?: (role: RoleName, usage: Usage, cached: boolean) => void;
}

const DEFAULT_BACKOFF: BackoffPolicy = { baseMs: 1_000, maxMs: 30_000, maxRetryAfterMs: 60_000, maxRateLimitWaitMs: 15 * 60_000, pace: true };

/** Sent when `apiKeyEnv` is unset or names an empty variable: local vLLM/Ollama servers need no key. */
export const PLACEHOLDER_API_KEY = 'not-needed';

// ---------------------------------------------------------------------------------------------------
// Small helpers

/** FIFO counting semaphore. */
export class Semaphore {
  private active = 0;
  private readonly waiters: Array<() => void> = [];

  constructor(readonly limit: number) {}

  async acquire(): Promise<() => void> {
    if (this.active < this.limit) {
      this.active++;
    } else {
      // The releasing holder hands its slot over directly, so `active` does not change.
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiters.shift();
      if (next) next();
      else this.active--;
    };
  }
}


function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Cost in USD of one call under a role's pricing. Cached prompt tokens are billed at the cached rate. */
export function costUsd(pricing: LlmRoleConfig['pricing'], promptTokens: number, cachedPromptTokens: number, completionTokens: number): number {
  const uncached = Math.max(0, promptTokens - cachedPromptTokens);
  return (uncached * pricing.inputPer1M + cachedPromptTokens * pricing.cachedInputPer1M + completionTokens * pricing.outputPer1M) / 1_000_000;
}

// ---------------------------------------------------------------------------------------------------
// The client

type OnlineRoleConfig = LlmRoleConfig & { baseUrl: string };

/**
 * What a role's method needs of an LLM: the role's settings and one call. Every LLM-backed role (the prepare stage's
 * filter and compressor, the checklist annotator, the RL judge and tool simulator) is written against it; `LlmClient`
 * is the implementation, tests and other transports can pass their own.
 */
export type LlmAsk = Pick<LlmClient, 'chat' | 'roleConfig'>;

/** What the client has learned about one role's endpoint, plus its concurrency bound. */
interface RoleState {
  readonly cfg: OnlineRoleConfig;
  readonly semaphore: Semaphore;
  /** Paces the role's requests once its endpoint has answered 429 (./rateLimit.ts). */
  readonly limiter: AdaptiveRateLimiter;
  structured: StructuredOutputMode;
  sendReasoningEffort: boolean;
  maxTokensParam: 'max_tokens' | 'max_completion_tokens';
  sdk?: { apiKey: string; client: OpenAI };
}

/** At most this many answers kept in memory while the response cache cannot be written (a long outage fails activities anyway). */
const MAX_UNSAVED = 10_000;

export class LlmClient {
  private readonly states = new Map<RoleName, RoleState>();
  private readonly totals = new Map<RoleName, Usage>();
  private readonly backoff: BackoffPolicy;
  private readonly log: (message: string) => void;
  private readonly env: NodeJS.ProcessEnv;
  private readonly cache: ResponseCache | undefined;
  /** Paid answers whose cache write failed, by cache key: served like cache hits, written when the store is back. */
  private readonly unsaved = new Map<string, string>();
  private readonly onUsage: LlmClientOptions['onUsage'];

  constructor(
    private readonly config: LlmConfig,
    opts: LlmClientOptions = {},
  ) {
    this.cache = opts.cache;
    this.backoff = { ...DEFAULT_BACKOFF, ...opts.backoff };
    this.log = opts.log ?? ((m) => console.warn(m));
    this.env = opts.env ?? process.env;
    this.onUsage = opts.onUsage;
  }

  /** Writes the answers kept while the cache could not be written; stops at the first failure (still down). */
  private async saveUnsaved(): Promise<void> {
    for (const [key, text] of this.unsaved) {
      try {
        await this.cache!.put(key, text);
        this.unsaved.delete(key);
      } catch {
        return;
      }
    }
  }

  /** The configuration of a role (parsed, with defaults). */
  roleConfig(role: RoleName): LlmRoleConfig {
    return this.config.roles[role];
  }

  /** Usage accumulated by this client per role since construction (cache hits included). */
  usageTotals(): Record<RoleName, Usage> {
    const out = {} as Record<RoleName, Usage>;
    for (const role of Object.keys(this.config.roles) as RoleName[]) out[role] = this.totals.get(role) ?? zeroUsage();
    return out;
  }

  async chat(req: ChatRequest): Promise<ChatResponse> {
    const state = this.stateOf(req.role);
    const effort = req.reasoningEffort ?? state.cfg.reasoningEffort;
    const key = this.cache ? this.cacheKey(state.cfg, req, effort) : undefined;

    if (this.cache && key !== undefined) {
      const hit = this.unsaved.get(key) ?? (await this.cache.get(key));
      // The store answers (or this answer was kept): write what an outage left unsaved.
      await this.saveUnsaved();
      if (hit !== undefined) {
        // A logical call that costs nothing: `calls` counts it, `cacheHits` says it was free.
        return this.account(req.role, { text: hit, usage: { ...zeroUsage(), calls: 1, cacheHits: 1 }, cached: true });
      }
    }

    const { text, usage } = await this.callWithRetries(state, req, effort);

    if (this.cache && key !== undefined) {
      // Stored before anyone parses it: a crash or a retried activity never pays for it twice.
      try {
        await this.cache.put(key, text);
      } catch (e) {
        // Kept here instead: the retry of an activity that the same outage fails is answered without paying again.
        if (this.unsaved.size < MAX_UNSAVED) this.unsaved.set(key, text);
        this.log(`[llm] ${req.role}: could not write the response cache (${(e as Error).message}); kept in memory until the store answers`);
      }
    }
    return this.account(req.role, { text, usage, cached: false });
  }

  // -------------------------------------------------------------------------------------------------

  private account(role: RoleName, res: ChatResponse): ChatResponse {
    this.totals.set(role, addUsage(this.totals.get(role) ?? zeroUsage(), res.usage));
    try {
      this.onUsage?.(role, res.usage, res.cached);
    } catch {
      /* accounting never fails a call */
    }
    return res;
  }

  private stateOf(role: RoleName): RoleState {
    let state = this.states.get(role);
    if (state) return state;
    const cfg = this.config.roles[role];
    if (!isOnline(cfg)) throw new LlmFatalError(`LLM role "${role}" has no baseUrl: it is offline and cannot be called`);
    state = {
      cfg,
      semaphore: new Semaphore(cfg.concurrency),
      limiter: new AdaptiveRateLimiter(),
      structured: cfg.structuredOutput,
      sendReasoningEffort: true,
      maxTokensParam: 'max_tokens',
    };
    this.states.set(role, state);
    return state;
  }

  /** The SDK client, rebuilt if the key in the environment changed (the key is read at call time). */
  private sdkOf(state: RoleState): OpenAI {
    const envName = state.cfg.apiKeyEnv;
    const fromEnv = envName === undefined ? undefined : this.env[envName];
    const apiKey = fromEnv === undefined || fromEnv === '' ? PLACEHOLDER_API_KEY : fromEnv;
    if (state.sdk?.apiKey !== apiKey) {
      state.sdk = {
        apiKey,
        client: new OpenAI({
          baseURL: state.cfg.baseUrl,
          apiKey,
          // Retries are ours (classified, Retry-After aware, bounded); the SDK must not add its own.
          maxRetries: 0,
          timeout: state.cfg.timeoutMs,
          // Never forward OPENAI_ORG_ID / OPENAI_PROJECT_ID from the environment to third-party servers.
          organization: null,
          project: null,
        }),
      };
    }
    return state.sdk.client;
  }

  private cacheKey(cfg: OnlineRoleConfig, req: ChatRequest, effort: ReasoningEffort | undefined): string {
    const material = {
      model: cfg.model,
      baseUrl: cfg.baseUrl,
      messages: req.messages,
      schema: req.jsonSchema ?? null,
      temperature: cfg.temperature ?? null,
      topP: cfg.topP ?? null,
      maxTokens: cfg.maxTokens ?? null,
      reasoningEffort: effort ?? null,
      cacheSalt: req.cacheSalt ?? null,
    };
    return createHash('sha256').update(canonicalJson(material)).digest('hex');
  }

  private buildBody(state: RoleState, req: ChatRequest, effort: ReasoningEffort | undefined): ChatCompletionCreateParamsNonStreaming {
    const { cfg } = state;
    const body: ChatCompletionCreateParamsNonStreaming = { model: cfg.model, messages: req.messages };
    if (cfg.temperature !== undefined) body.temperature = cfg.temperature;
    if (cfg.topP !== undefined) body.top_p = cfg.topP;
    if (cfg.maxTokens !== undefined) body[state.maxTokensParam] = cfg.maxTokens;
    if (effort !== undefined && state.sendReasoningEffort) body.reasoning_effort = effort;
    if (req.jsonSchema !== undefined) {
      if (state.structured === 'json_schema') {
        body.response_format = {
          type: 'json_schema',
          json_schema: { name: req.jsonSchema.name, schema: { ...req.jsonSchema.schema }, strict: req.jsonSchema.strict ?? true },
        };
      } else if (state.structured === 'json_object') {
        body.response_format = { type: 'json_object' };
      }
    }
    return body;
  }

  private async callWithRetries(state: RoleState, req: ChatRequest, effort: ReasoningEffort | undefined): Promise<{ text: string; usage: Usage }> {
    let failures = 0;
    let rateLimited = 0;
    let rateLimitWaitedMs = 0;
    for (;;) {
      const body = this.buildBody(state, req, effort);
      let completion: ChatCompletion;
      let sentAt = Date.now();
      try {
        const release = await state.semaphore.acquire();
        try {
          // Paced inside the slot: a start time reserved by a request that then waits for a slot would be wasted.
          const pace = this.backoff.pace ? state.limiter.reserve() : 0;
          if (pace > 0) await sleep(pace, req.signal);
          sentAt = Date.now();
          completion = await this.sdkOf(state).chat.completions.create(body, { signal: req.signal });
        } finally {
          release();
        }
      } catch (err) {
        if (req.signal?.aborted) throw err;
        // A rejected parameter is not a transport failure: adapt and resend at once.
        if (this.adaptToRejection(state, req.role, body, err)) continue;
        const classified = classifyLlmError(err);
        if (classified instanceof LlmFatalError) throw classified;
        if (classified.kind === 'rate_limit') {
          // Not a failure: the endpoint asks us to slow down. Pace the role, wait, send again; only an endless
          // rate limit (or a Retry-After beyond the in-process budget) goes to Temporal.
          state.limiter.onRateLimited(sentAt);
          rateLimited++;
          classified.attempts = failures + rateLimited;
          const wait = this.rateLimitWaitMs(rateLimited, classified.retryAfterMs);
          if (wait === undefined || rateLimitWaitedMs + wait > this.backoff.maxRateLimitWaitMs) throw classified;
          rateLimitWaitedMs += wait;
          await sleep(wait, req.signal);
          continue;
        }
        failures++;
        classified.attempts = failures + rateLimited;
        if (failures > state.cfg.maxTransportRetries) throw classified;
        const wait = this.backoffMs(failures, classified.retryAfterMs);
        if (wait === undefined) throw classified;
        await sleep(wait, req.signal);
        continue;
      }
      state.limiter.onSuccess();
      return { text: completion.choices[0]?.message?.content ?? '', usage: this.usageOf(state.cfg, completion) };
    }
  }

  /** Wait before retry number `failures` (1-based), or undefined if the server asks for too long a wait. */
  private backoffMs(failures: number, retryAfterMs: number | undefined): number | undefined {
    if (retryAfterMs !== undefined) return retryAfterMs > this.backoff.maxRetryAfterMs ? undefined : retryAfterMs;
    const exp = Math.min(this.backoff.maxMs, this.backoff.baseMs * 2 ** (failures - 1));
    return exp * (0.5 + Math.random() * 0.5);
  }

  /**
   * Wait after the `n`-th 429 of a call: the Retry-After plus up to half of it again (at most 1 s more), so that the
   * requests refused together do not come back together; without one, the jittered exponential backoff.
   */
  private rateLimitWaitMs(n: number, retryAfterMs: number | undefined): number | undefined {
    if (retryAfterMs === undefined) return this.backoffMs(n, undefined);
    if (retryAfterMs > this.backoff.maxRetryAfterMs) return undefined;
    return retryAfterMs + Math.random() * Math.min(retryAfterMs / 2, 1_000);
  }

  private usageOf(cfg: LlmRoleConfig, completion: ChatCompletion): Usage {
    const u = completion.usage;
    const promptTokens = u?.prompt_tokens ?? 0;
    const cachedPromptTokens = u?.prompt_tokens_details?.cached_tokens ?? 0;
    const completionTokens = u?.completion_tokens ?? 0;
    return {
      calls: 1,
      promptTokens,
      cachedPromptTokens,
      completionTokens,
      costUsd: costUsd(cfg.pricing, promptTokens, cachedPromptTokens, completionTokens),
      cacheHits: 0,
    };
  }

  /**
   * If `err` is a 400/422 rejecting a parameter we can do without, change the role's settings and
   * return true (the caller resends). Each adaptation moves one way only, so this cannot loop. When
   * several requests fail concurrently, only the first one adapts (and logs); the others see that the
   * state already moved on and simply resend.
   */
  private adaptToRejection(state: RoleState, role: RoleName, body: ChatCompletionCreateParamsNonStreaming, err: unknown): boolean {
    if (!(err instanceof APIError) || (err.status !== 400 && err.status !== 422)) return false;
    const text = `${err.message} ${err.param ?? ''} ${safeStringify(err.error)}`.toLowerCase();
    const brief = err.message.slice(0, 200);

    const sentMode: StructuredOutputMode = body.response_format?.type === 'json_schema' ? 'json_schema' : body.response_format?.type === 'json_object' ? 'json_object' : 'none';
    if (sentMode !== 'none' && /response_format|json_schema|json schema|json_object|structured output|guided/.test(text)) {
      if (state.structured === sentMode) {
        state.structured = sentMode === 'json_schema' ? 'json_object' : 'none';
        this.log(`[llm] ${role}: endpoint rejected response_format=${sentMode} (${brief}); using ${state.structured} for this role from now on`);
      }
      return true;
    }
    if (body.reasoning_effort !== undefined && text.includes('reasoning_effort')) {
      if (state.sendReasoningEffort) {
        state.sendReasoningEffort = false;
        this.log(`[llm] ${role}: endpoint rejected reasoning_effort (${brief}); no longer sending it for this role`);
      }
      return true;
    }
    // OpenAI reasoning models: "Unsupported parameter: 'max_tokens' … Use 'max_completion_tokens' instead."
    // (vLLM's "max_tokens or max_completion_tokens is too large" is a context-length error, not this.)
    if (body.max_tokens !== undefined && /unsupported|not supported/.test(text) && text.includes('max_tokens') && text.includes('max_completion_tokens')) {
      if (state.maxTokensParam === 'max_tokens') {
        state.maxTokensParam = 'max_completion_tokens';
        this.log(`[llm] ${role}: endpoint wants max_completion_tokens instead of max_tokens; switching for this role`);
      }
      return true;
    }
    return false;
  }
}

function safeStringify(v: unknown): string {
  try {
    return JSON.stringify(v) ?? '';
  } catch {
    return '';
  }
}
