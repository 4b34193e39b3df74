/**
 * The one place where LLM errors meet Temporal: activities wrap their LLM work in
 * `try { … } catch (e) { throw toTemporalFailure(e); }`.
 *
 * - `LlmRetryableError` → retryable ApplicationFailure; a server-requested delay (Retry-After) becomes
 *   `nextRetryDelay`, which overrides the retry policy's backoff for that one retry. Rate limiting is
 *   expected under load, so 429s are marked BENIGN (logged at DEBUG, no failure metrics).
 * - `LlmFatalError` → non-retryable ApplicationFailure: retrying a bad key or a malformed request only
 *   burns attempts.
 * - An existing ApplicationFailure is passed through; any other error becomes a retryable failure, which
 *   is what Temporal does with a plain Error anyway.
 */
import { ApplicationFailure, ApplicationFailureCategory } from '@temporalio/common';
import { LlmFatalError, LlmRetryableError } from './errors';

/** ApplicationFailure `type`s, for `nonRetryableErrorTypes` lists and for tests. */
export const LLM_RETRYABLE_TYPE = 'LlmRetryableError';
export const LLM_FATAL_TYPE = 'LlmFatalError';

export function toTemporalFailure(err: unknown): ApplicationFailure {
  if (err instanceof ApplicationFailure) return err;
  if (err instanceof LlmRetryableError) {
    return ApplicationFailure.create({
      message: err.message,
      type: LLM_RETRYABLE_TYPE,
      nonRetryable: false,
      details: [{ kind: err.kind, status: err.status ?? null, retryAfterMs: err.retryAfterMs ?? null, attempts: err.attempts }],
      ...(err.retryAfterMs !== undefined ? { nextRetryDelay: err.retryAfterMs } : {}),
      ...(err.kind === 'rate_limit' ? { category: ApplicationFailureCategory.BENIGN } : {}),
    });
  }
  if (err instanceof LlmFatalError) {
    return ApplicationFailure.create({
      message: err.message,
      type: LLM_FATAL_TYPE,
      nonRetryable: true,
      details: [{ status: err.status ?? null }],
    });
  }
  const e = err instanceof Error ? err : new Error(String(err));
  return ApplicationFailure.create({ message: e.message, type: e.name, nonRetryable: false, cause: e });
}
