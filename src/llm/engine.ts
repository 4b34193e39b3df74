/**
 * Token-level generation on a serving engine (issue 33): the rollouts' and evaluations' decoding behind one interface,
 * `TokenEngine`, which the embedded decoder (src/model/net/decodePool.ts) satisfies too. Prompt token ids in; sampled
 * token ids and their log-probabilities at the sampling temperature out. The method (chat template, tool calls, turn
 * control, seeds) stays with the caller: an engine only continues token sequences.
 *
 * - vLLM (`VllmEngine`): `POST /v1/completions` with the prompt as token ids, `return_token_ids`, `logprobs: 0`. The
 *   server must be started with `--logprobs-mode processed_logprobs` (its default, `raw_logprobs`, gives the
 *   distribution before temperature) and `--generation-config vllm` (else the model's generation_config.json fills
 *   the sampling fields a request leaves out); every sampling field is sent anyway. `ignore_eos` is set so that only
 *   the caller's stop ids end a generation, as in the embedded decoder.
 * - SGLang (`SglangEngine`): `POST /generate` with `input_ids`, `return_logprob`; its log-probabilities are after
 *   temperature (before top-p renormalisation: equal to vLLM's with top-p 1). Its `sampling_seed` is honoured only
 *   by a server started with `--enable-deterministic-inference`.
 *
 * Failures follow the LLM client's contract (./errors.ts): a refused connection, a timeout or a 5xx answer is
 * `LlmRetryableError` (Temporal retries the activity: an engine outage is waited out, never answered with an empty
 * rollout), any other answer `LlmFatalError`. Short connection failures are retried here first (`retries`).
 */
import { z } from 'zod';
import { CONNECTION_CODES, LlmFatalError, LlmRetryableError } from './errors';

export interface EngineRequest {
  /** The row's identity (an episode id): unique within a call. */
  key: string;
  /** The whole context; the continuation follows its last token. */
  tokens: readonly number[];
  maxNewTokens: number;
  /** This request's sampling seed. */
  seed?: number;
}

export interface EngineDecodeOptions {
  /** 0 = greedy */
  temperature?: number;
  topP?: number;
  stopTokens?: readonly number[];
  /** Seed of requests without their own (combined with the request's index). */
  seed?: number;
  /** Called as requests complete (a heartbeat). */
  onStep?: (done: number) => void;
  /** The embedded decoder's batching (its pad id, its prefill pieces); serving engines ignore them. */
  padId?: number;
  prefillChunkTokens?: number;
}

export interface EngineResult {
  /** New tokens per request, the stop token included. */
  tokens: number[][];
  /** True where a stop token ended the sequence. */
  finished: boolean[];
  /** Log-probability of each new token at the sampling temperature. */
  logprobs: number[][];
}

/** Tokens of the calls so far: `prefilled` computed, `reused` from a cache, `shared` saved by a shared prompt, `decoded` generated. */
export interface EngineCounts {
  prefilled: number;
  reused: number;
  shared: number;
  decoded: number;
}

export interface TokenEngine {
  decode(requests: readonly EngineRequest[], opts?: EngineDecodeOptions): Promise<EngineResult>;
  readonly counts: EngineCounts;
  dispose(): void;
}

/**
 * A serving engine whose policy can be replaced while it runs: full weights from an HF folder on the engine's disk,
 * or a LoRA adapter (a PEFT folder) served under a name. Each load also drops the engine's prefix cache (its blocks
 * were computed with the old weights and their keys do not say so). Give each version a folder of its own: an engine
 * that caches what it read from a path could otherwise serve the old weights.
 */
export interface SyncableEngine extends TokenEngine {
  loadWeights(dir: string): Promise<void>;
  loadAdapter(name: string, dir: string): Promise<void>;
  /** The served model's name (vLLM's `--served-model-name`). */
  model: string | undefined;
  /** The LoRA adapter requests select (set by loadAdapter), or undefined for the served weights. */
  adapter: string | undefined;
}

export interface HttpEngineOptions {
  /** Server root, e.g. http://127.0.0.1:8000 (no `/v1`). */
  baseUrl: string;
  /** The served model name (vLLM's `--served-model-name`; SGLang ignores it). */
  model?: string;
  /** A LoRA adapter, loaded earlier under this name, that requests select. */
  adapter?: string;
  /** Bearer token, from the environment (never from the config). */
  apiKey?: string;
  /** Requests in flight at once (default 64). */
  concurrency?: number;
  /** Per request, ms (default 600,000). */
  timeoutMs?: number;
  /** Connection failures retried within a call before it fails as retryable (default 3, 2 s apart). */
  retries?: number;
  retryDelayMs?: number;
  fetch?: typeof fetch;
}

/** One generation as an engine answered it. */
interface Generated {
  tokens: number[];
  logprobs: number[];
  stoppedByStop: boolean;
  promptTokens: number;
  cachedTokens: number;
}

/** Seed of request `i` without its own: a 31-bit mix of the call's seed and the index (engines take a non-negative int). */
export const requestSeed = (seed: number, i: number): number => ((Math.imul((seed >>> 0) ^ 0x9e3779b1, 0x85ebca6b) + Math.imul(i + 1, 0xc2b2ae35)) >>> 1) & 0x7fffffff;

abstract class HttpEngine implements SyncableEngine {
  readonly counts: EngineCounts = { prefilled: 0, reused: 0, shared: 0, decoded: 0 };
  protected readonly fetch: typeof fetch;
  protected readonly base: string;

  constructor(protected readonly o: HttpEngineOptions) {
    this.fetch = o.fetch ?? globalThis.fetch;
    this.base = o.baseUrl.replace(/\/+$/, '');
    this.model = o.model;
    this.adapter = o.adapter;
  }

  model: string | undefined;
  adapter: string | undefined;

  protected abstract generateOne(q: EngineRequest, seed: number, opts: EngineDecodeOptions): Promise<Generated>;
  abstract loadWeights(dir: string): Promise<void>;
  abstract loadAdapter(name: string, dir: string): Promise<void>;

  async decode(requests: readonly EngineRequest[], opts: EngineDecodeOptions = {}): Promise<EngineResult> {
    const out: EngineResult = { tokens: requests.map(() => []), finished: requests.map(() => false), logprobs: requests.map(() => []) };
    let next = 0;
    let done = 0;
    const worker = async () => {
      for (;;) {
        const i = next++;
        if (i >= requests.length) return;
        const q = requests[i]!;
        if (q.maxNewTokens <= 0) continue;
        const g = await this.generateOne(q, q.seed ?? requestSeed(opts.seed ?? 0, i), opts);
        out.tokens[i] = g.tokens;
        out.logprobs[i] = g.logprobs;
        const last = g.tokens[g.tokens.length - 1];
        out.finished[i] = g.stoppedByStop && last !== undefined && (opts.stopTokens ?? []).includes(last);
        this.counts.prefilled += g.promptTokens - g.cachedTokens;
        this.counts.reused += g.cachedTokens;
        this.counts.decoded += g.tokens.length;
        opts.onStep?.(++done);
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, Math.min(this.o.concurrency ?? 64, requests.length)) }, worker));
    return out;
  }

  dispose(): void {}

  /** POSTs JSON and returns the parsed answer; classifies failures (see the file's comment). */
  protected async post(path: string, body: unknown): Promise<unknown> {
    const text = await this.postText(path, body);
    try {
      return JSON.parse(text) as unknown;
    } catch {
      throw new LlmFatalError(`engine ${this.base}${path}: not JSON: ${text.slice(0, 200)}`);
    }
  }

  /** POSTs JSON and returns the answer's text (some control routes answer in plain text). */
  protected async postText(path: string, body: unknown, okStatuses: readonly number[] = []): Promise<string> {
    const retries = this.o.retries ?? 3;
    for (let attempt = 0; ; attempt++) {
      let res: Response;
      try {
        res = await this.fetch(`${this.base}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(this.o.apiKey ? { authorization: `Bearer ${this.o.apiKey}` } : {}) },
          body: JSON.stringify(body),
          signal: AbortSignal.timeout(this.o.timeoutMs ?? 600_000),
        });
      } catch (e) {
        const err = engineConnectionError(this.base, path, e);
        if (err.kind === 'connection' && attempt < retries) {
          await new Promise((r) => setTimeout(r, this.o.retryDelayMs ?? 2000));
          continue;
        }
        throw err;
      }
      const text = await res.text();
      if (!res.ok && !okStatuses.includes(res.status)) {
        const message = `engine ${this.base}${path} answered HTTP ${res.status}: ${text.slice(0, 300)}`;
        if (res.status >= 500 || res.status === 429 || res.status === 408) throw new LlmRetryableError(message, { kind: res.status === 429 ? 'rate_limit' : res.status === 408 ? 'timeout' : 'server', status: res.status, attempts: attempt + 1 });
        throw new LlmFatalError(message, { status: res.status });
      }
      return text;
    }
  }

  /** Retries `attempt` (true = done) every `everyMs` until `timeoutMs`; false at the end is a retryable failure. */
  protected async until(what: string, attempt: () => Promise<boolean>, timeoutMs = 60_000, everyMs = 500): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!(await attempt())) {
      if (Date.now() > deadline) throw new LlmRetryableError(`engine ${this.base}: ${what} did not succeed within ${timeoutMs / 1000} s`, { kind: 'server' });
      await new Promise((r) => setTimeout(r, everyMs));
    }
  }
}

/** A failed fetch as a retryable error: a timeout, or a connection the engine refused or dropped (a restart). */
function engineConnectionError(base: string, path: string, e: unknown): LlmRetryableError {
  const err = e as { name?: string; code?: string; cause?: { code?: string } };
  if (err?.name === 'TimeoutError') return new LlmRetryableError(`engine ${base}${path}: timed out`, { kind: 'timeout', cause: e });
  const code = err?.cause?.code ?? err?.code;
  const known = typeof code === 'string' && CONNECTION_CODES.has(code);
  return new LlmRetryableError(`engine ${base}${path}: ${known ? code : (e as Error)?.message ?? String(e)} (is the engine running?)`, { kind: 'connection', cause: e });
}

const parseAnswer = <T>(schema: z.ZodType<T>, raw: unknown, where: string): T => {
  const r = schema.safeParse(raw);
  if (!r.success) throw new LlmFatalError(`${where}: unexpected answer (${r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')})`);
  return r.data;
};

const VllmCompletion = z.object({
  choices: z
    .array(
      z.object({
        token_ids: z.array(z.number().int()).nullable().optional(),
        finish_reason: z.string().nullable(),
        logprobs: z.object({ token_logprobs: z.array(z.number().nullable()) }).nullable().optional(),
      }),
    )
    .min(1),
  usage: z.object({ prompt_tokens: z.number().int(), prompt_tokens_details: z.object({ cached_tokens: z.number().int().nullable().optional() }).nullable().optional() }).optional(),
});

/** vLLM's OpenAI-compatible server (see the file's comment for how it must be started). */
export class VllmEngine extends HttpEngine {
  /**
   * Full weights from `dir` (the served architecture's HF folder): requests drained (`/pause?mode=wait`), the
   * weights reloaded in place by every worker (`reload_weights`, which redoes what loading does after reading, such
   * as the CPU build's repacking), the prefix cache reset (retried while running requests hold blocks), requests
   * resumed. Needs VLLM_SERVER_DEV_MODE=1.
   */
  async loadWeights(dir: string): Promise<void> {
    await this.postText('/pause?mode=wait', {});
    try {
      await this.post('/collective_rpc', { method: 'reload_weights', kwargs: { weights_path: dir, is_checkpoint_format: true } });
      await this.resetPrefixCache();
    } finally {
      await this.postText('/resume', {});
    }
  }

  /**
   * A LoRA adapter (PEFT folder) served as `name`: the old one under that name unloaded (absent the first time), the
   * new one loaded, the prefix cache reset; later requests name it. Needs VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 and
   * --enable-lora.
   */
  async loadAdapter(name: string, dir: string): Promise<void> {
    await this.postText('/v1/unload_lora_adapter', { lora_name: name }, [400, 404]);
    await this.postText('/v1/load_lora_adapter', { lora_name: name, lora_path: dir });
    await this.resetPrefixCache();
    this.adapter = name;
  }

  private async resetPrefixCache(): Promise<void> {
    await this.until('/reset_prefix_cache', async () => {
      const text = await this.postText('/reset_prefix_cache', {});
      try {
        return (JSON.parse(text) as { success?: boolean }).success !== false;
      } catch {
        return true; // older servers answer with an empty body
      }
    });
  }

  protected async generateOne(q: EngineRequest, seed: number, opts: EngineDecodeOptions): Promise<Generated> {
    const temperature = opts.temperature ?? 1;
    const raw = await this.post('/v1/completions', {
      model: this.adapter ?? this.model,
      prompt: [...q.tokens],
      max_tokens: q.maxNewTokens,
      temperature,
      top_p: temperature === 0 ? 1 : (opts.topP ?? 1),
      top_k: 0,
      min_p: 0,
      seed,
      stop_token_ids: [...(opts.stopTokens ?? [])],
      ignore_eos: true,
      logprobs: 0,
      return_token_ids: true,
      // log-probabilities keyed by token id: a server without a tokenizer (--skip-tokenizer-init) cannot name tokens
      return_tokens_as_token_ids: true,
      skip_special_tokens: false,
      n: 1,
    });
    const a = parseAnswer(VllmCompletion, raw, `vLLM ${this.base}/v1/completions`);
    const c = a.choices[0]!;
    const tokens = c.token_ids ?? [];
    const lps = c.logprobs?.token_logprobs ?? [];
    if (lps.length !== tokens.length) throw new LlmFatalError(`vLLM ${this.base}: ${tokens.length} token ids but ${lps.length} log-probabilities (is return_token_ids supported?)`);
    return { tokens, logprobs: lps.map((x) => x ?? Number.NEGATIVE_INFINITY), stoppedByStop: c.finish_reason === 'stop', promptTokens: a.usage?.prompt_tokens ?? q.tokens.length, cachedTokens: a.usage?.prompt_tokens_details?.cached_tokens ?? 0 };
  }
}

// Recorded real answers: test/fixtures/sglang (SGLang's executed documentation notebooks). A non-streaming answer's
// `output_ids` can begin with the prompt's last tokens (seen in 0.5.2rc1: five of them; sgl-project/sglang#17240),
// so the generated ids are read from `output_token_logprobs` ([logprob, id, text] per new token), or else the last
// `completion_tokens` of `output_ids`.
const SglangGenerate = z.object({
  output_ids: z.array(z.number().int()).optional(),
  meta_info: z.object({
    finish_reason: z.object({ type: z.string() }).nullable().optional(),
    output_token_logprobs: z.array(z.tuple([z.number().nullable(), z.number().int()]).rest(z.unknown())).optional(),
    prompt_tokens: z.number().int().optional(),
    completion_tokens: z.number().int().optional(),
    cached_tokens: z.number().int().optional(),
  }),
});

/** The new tokens and their log-probabilities of an SGLang `/generate` answer (see SglangGenerate). */
export function sglangOutput(raw: unknown, where: string): { tokens: number[]; logprobs: number[]; stop: boolean; promptTokens?: number; cachedTokens: number } {
  const a = parseAnswer(SglangGenerate, raw, where);
  const m = a.meta_info;
  const lps = m.output_token_logprobs;
  if (!lps) throw new LlmFatalError(`${where}: no meta_info.output_token_logprobs (was return_logprob sent?)`);
  const tokens = lps.map((x) => x[1]);
  const n = m.completion_tokens ?? tokens.length;
  if (tokens.length !== n) throw new LlmFatalError(`${where}: ${n} completion tokens but ${tokens.length} log-probabilities`);
  const ids = a.output_ids;
  if (ids && (ids.length < n || ids.slice(ids.length - n).some((t, i) => t !== tokens[i]))) throw new LlmFatalError(`${where}: output_ids does not end with the ${n} tokens of output_token_logprobs`);
  return { tokens, logprobs: lps.map((x) => x[0] ?? Number.NEGATIVE_INFINITY), stop: m.finish_reason?.type === 'stop', ...(m.prompt_tokens !== undefined ? { promptTokens: m.prompt_tokens } : {}), cachedTokens: m.cached_tokens ?? 0 };
}

/** SGLang's native server (`/generate`). */
export class SglangEngine extends HttpEngine {
  /** Full weights from `dir`: SGLang waits for running requests and flushes its cache itself. */
  async loadWeights(dir: string): Promise<void> {
    const a = (await this.post('/update_weights_from_disk', { model_path: dir, flush_cache: true })) as { success?: boolean; message?: string };
    if (a.success === false) throw new LlmFatalError(`SGLang ${this.base}: update_weights_from_disk ${dir} failed: ${a.message ?? ''}`);
  }

  /** A LoRA adapter served as `name` (unloaded first: SGLang refuses a name it has; each load gets a fresh cache key). */
  async loadAdapter(name: string, dir: string): Promise<void> {
    await this.postText('/unload_lora_adapter', { lora_name: name }, [400, 404]);
    const a = (await this.post('/load_lora_adapter', { lora_name: name, lora_path: dir })) as { success?: boolean; error_message?: string };
    if (a.success === false) throw new LlmFatalError(`SGLang ${this.base}: load_lora_adapter ${dir} failed: ${a.error_message ?? ''}`);
    this.adapter = name;
  }

  protected async generateOne(q: EngineRequest, seed: number, opts: EngineDecodeOptions): Promise<Generated> {
    const temperature = opts.temperature ?? 1;
    const raw = await this.post('/generate', {
      input_ids: [...q.tokens],
      sampling_params: {
        max_new_tokens: q.maxNewTokens,
        temperature,
        top_p: temperature === 0 ? 1 : (opts.topP ?? 1),
        top_k: -1,
        min_p: 0,
        stop_token_ids: [...(opts.stopTokens ?? [])],
        ignore_eos: true,
        skip_special_tokens: false,
        no_stop_trim: true,
        sampling_seed: seed,
      },
      return_logprob: true,
      top_logprobs_num: 0,
      ...(this.adapter ? { lora_path: this.adapter } : {}),
    });
    const o = sglangOutput(raw, `SGLang ${this.base}/generate`);
    return { tokens: o.tokens, logprobs: o.logprobs, stoppedByStop: o.stop, promptTokens: o.promptTokens ?? q.tokens.length, cachedTokens: o.cachedTokens };
  }
}

/** How far an engine's log-probabilities are from the trainer's on the same tokens. */
export interface ProbeResult {
  mean: number;
  max: number;
  tokens: number;
  /** What the engine sampled (its fingerprint: see `sameFingerprint`). */
  sample: EngineFingerprint;
}

/** An engine's answer to the probe: the prompt, its sampled tokens and their log-probabilities (seed and temperature fixed). */
export interface EngineFingerprint {
  prompt: number[];
  tokens: number[];
  logprobs: number[];
}

const PROBE = { maxNewTokens: 16, seed: 12345 };

/**
 * Whether the engine still answers the probe as it did when `fp` was taken: the same tokens, log-probabilities within
 * `tolerance`. Needs no model here, so a rollout activity can ask it before generating: an engine that restarted with
 * other weights, or was loaded by someone else, answers differently and is synced again.
 */
export async function sameFingerprint(engine: TokenEngine, fp: EngineFingerprint, tolerance: number): Promise<{ same: boolean; gap: number }> {
  const r = await engine.decode([{ key: 'probe', tokens: fp.prompt, maxNewTokens: fp.tokens.length, seed: PROBE.seed }], { temperature: 1, topP: 1, stopTokens: [] });
  const tokens = r.tokens[0] ?? [];
  const lps = r.logprobs[0] ?? [];
  if (tokens.length !== fp.tokens.length || tokens.some((t, i) => t !== fp.tokens[i])) return { same: false, gap: Number.POSITIVE_INFINITY };
  const gap = Math.max(0, ...lps.map((x, i) => Math.abs(x - fp.logprobs[i]!)));
  return { same: gap <= tolerance, gap };
}

/**
 * The stale-weight probe: the engine samples a continuation of `prompt` (temperature 1, a fixed seed) and
 * `expected` gives the policy's own log-probabilities of those tokens (the trainer's model); their largest gap
 * says whether the engine serves that policy. A full reload that did not take, or an adapter that was not
 * swapped, shows as a gap of the size of one update, far above float rounding.
 */
export async function probeEngine(engine: TokenEngine, prompt: readonly number[], expected: (prompt: readonly number[], tokens: readonly number[]) => Promise<number[]> | number[], opts: { maxNewTokens?: number; seed?: number } = {}): Promise<ProbeResult> {
  const r = await engine.decode([{ key: 'probe', tokens: prompt, maxNewTokens: opts.maxNewTokens ?? PROBE.maxNewTokens, seed: opts.seed ?? PROBE.seed }], { temperature: 1, topP: 1, stopTokens: [] });
  const tokens = r.tokens[0] ?? [];
  const theirs = r.logprobs[0] ?? [];
  const mine = await expected(prompt, tokens);
  let sum = 0;
  let max = 0;
  tokens.forEach((_, i) => {
    const d = Math.abs((mine[i] ?? Number.NaN) - (theirs[i] ?? Number.NaN));
    const gap = Number.isFinite(d) ? d : Number.POSITIVE_INFINITY;
    sum += gap;
    max = Math.max(max, gap);
  });
  return { mean: tokens.length ? sum / tokens.length : 0, max, tokens: tokens.length, sample: { prompt: [...prompt], tokens: [...tokens], logprobs: [...theirs] } };
}

/** Where a generation (a BFCL evaluation) runs on a serving engine that already serves its policy: plain JSON, no secret. */
export const EngineTarget = z.object({
  kind: z.enum(['vllm', 'sglang']),
  url: z.string().min(1).describe('The engine server\'s root, e.g. http://10.0.0.5:8000.'),
  model: z.string().default('policy').describe('The served model name (vLLM\'s --served-model-name).'),
  adapter: z.string().optional().describe('A LoRA adapter the engine serves the policy as (rl.engine.sync adapter).'),
  apiKeyEnv: z.string().default('').describe('Environment variable of the workers holding the engine\'s bearer token.'),
  concurrency: z.number().int().positive().default(64).describe('Requests in flight.'),
  maxModelLen: z.number().int().positive().default(2048).describe('The engine\'s context cap (--max-model-len): longer prompts are not sent.'),
});
export type EngineTarget = z.infer<typeof EngineTarget>;

/** The client of an engine; its token from the environment variable named (never from a config or an input). */
export function engineFor(t: Pick<EngineTarget, 'kind' | 'url' | 'model' | 'apiKeyEnv' | 'concurrency' | 'adapter'>, env: NodeJS.ProcessEnv = process.env): SyncableEngine {
  const key = t.apiKeyEnv ? env[t.apiKeyEnv] : undefined;
  const o: HttpEngineOptions = { baseUrl: t.url, model: t.model, concurrency: t.concurrency, ...(t.adapter ? { adapter: t.adapter } : {}), ...(key ? { apiKey: key } : {}) };
  return t.kind === 'sglang' ? new SglangEngine(o) : new VllmEngine(o);
}
