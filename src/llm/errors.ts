/**
 * The LLM client's error contract: transient failures (429, 5xx, timeouts, connection errors) are
 * `LlmRetryableError` (Temporal retries the activity), everything else `LlmFatalError` (the activity fails at once).
 */
import { APIConnectionError, APIConnectionTimeoutError, APIError, APIUserAbortError } from 'openai';

export type RetryableKind = 'rate_limit' | 'server' | 'timeout' | 'connection';

/** A transient failure: retry later (Temporal retries the activity, after `retryAfterMs` if known). */
export class LlmRetryableError extends Error {
  override readonly name = 'LlmRetryableError';
  readonly kind: RetryableKind;
  readonly status: number | undefined;
  /** Server-requested delay before the next attempt (Retry-After / retry-after-ms), if any. */
  readonly retryAfterMs: number | undefined;
  /** HTTP attempts made by the client before giving up (set by the client). */
  attempts: number;

  constructor(message: string, info: { kind: RetryableKind; status?: number; retryAfterMs?: number; attempts?: number; cause?: unknown }) {
    super(message, { cause: info.cause });
    this.kind = info.kind;
    this.status = info.status;
    this.retryAfterMs = info.retryAfterMs;
    this.attempts = info.attempts ?? 1;
  }
}

/** A failure that retrying cannot fix (bad key, unknown model, malformed request, exhausted quota). */
export class LlmFatalError extends Error {
  override readonly name = 'LlmFatalError';
  readonly status: number | undefined;

  constructor(message: string, info: { status?: number; cause?: unknown } = {}) {
    super(message, { cause: info.cause });
    this.status = info.status;
  }
}

/**
 * A request refused because its prompt does not fit the model's context (OpenAI and vLLM: "maximum context length";
 * llama.cpp: `exceed_context_size_error`; SGLang: "longer than the model's context length"). An evaluation records it
 * for the example (`prompt_too_long`) instead of failing the run.
 */
export function isContextLengthError(e: unknown): boolean {
  if (!(e instanceof LlmFatalError) || (e.status !== 400 && e.status !== 413)) return false;
  return /context length|context size|exceed_context|context window|too many tokens|prompt is too long/i.test(e.message);
}

/** Node/undici error codes of failed connections (when an error escapes the SDK's own wrapping). */
export const CONNECTION_CODES = new Set(['ECONNRESET', 'ECONNREFUSED', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT']);

/**
 * Classify any error from an LLM call as retryable or fatal.
 * - 429 (except `insufficient_quota`, which is a billing problem), 408, 5xx, timeouts, connection
 *   errors → `LlmRetryableError` (with `retryAfterMs` from the response headers when present);
 * - any other HTTP status (400, 401, 403, 404, 422, …), aborts and unknown errors → `LlmFatalError`.
 *   Unknown errors are most likely bugs on our side, which retrying does not fix.
 */
export function classifyLlmError(err: unknown): LlmRetryableError | LlmFatalError {
  if (err instanceof LlmRetryableError || err instanceof LlmFatalError) return err;
  if (err instanceof APIConnectionTimeoutError) return new LlmRetryableError(`LLM request timed out: ${err.message}`, { kind: 'timeout', cause: err });
  if (err instanceof APIUserAbortError) return new LlmFatalError(`LLM request aborted: ${err.message}`, { cause: err });
  if (err instanceof APIConnectionError) return new LlmRetryableError(`LLM connection error: ${err.message}`, { kind: 'connection', cause: err });
  if (err instanceof APIError && typeof err.status === 'number') {
    const status = err.status;
    const retryAfterMs = parseRetryAfter(err.headers);
    const message = `LLM endpoint answered HTTP ${status}: ${err.message}`;
    if (status === 429 && err.code !== 'insufficient_quota') return new LlmRetryableError(message, { kind: 'rate_limit', status, retryAfterMs, cause: err });
    if (status === 408) return new LlmRetryableError(message, { kind: 'timeout', status, retryAfterMs, cause: err });
    if (status >= 500) return new LlmRetryableError(message, { kind: 'server', status, retryAfterMs, cause: err });
    return new LlmFatalError(message, { status, cause: err });
  }
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && CONNECTION_CODES.has(code)) {
    return new LlmRetryableError(`LLM connection error: ${code}`, { kind: 'connection', cause: err });
  }
  const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  return new LlmFatalError(`unexpected error in LLM call: ${message}`, { cause: err });
}

/**
 * Delay requested by the server, in ms: `retry-after-ms` (OpenAI), else `Retry-After` as seconds or
 * as an HTTP date. Undefined when absent or unparseable.
 */
export function parseRetryAfter(headers: { get(name: string): string | null } | undefined, now: number = Date.now()): number | undefined {
  if (headers === undefined || typeof headers.get !== 'function') return undefined;
  const ms = headers.get('retry-after-ms');
  if (ms !== null && /^\s*\d+(\.\d+)?\s*$/.test(ms)) return Math.ceil(Number(ms));
  const value = headers.get('retry-after');
  if (value === null) return undefined;
  if (/^\s*\d+(\.\d+)?\s*$/.test(value)) return Math.ceil(Number(value) * 1000);
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

