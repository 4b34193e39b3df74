/**
 * Asking a role until its answer parses, as every LLM-backed role does (the prepare stage's filter and compressor,
 * the checklist annotator, the RL judge and tool simulator).
 *
 * Error contract (see src/kernel/roleContracts.ts): an answer that cannot be parsed after `maxParseAttempts`
 * attempts is *returned* as `{ ok: false }`; transport failures *propagate* as LlmRetryableError /
 * LlmFatalError, for the activity to convert with toTemporalFailure.
 *
 * Caching: parse attempt k of a request uses its own cache salt (`<salt>` for the first attempt,
 * `<salt>/parse-retry-<k-1>` after), so a parse retry asks the model again instead of replaying the bad
 * answer from the cache, while a retried activity replays every attempt it already paid for.
 */
import { addUsage, zeroUsage, type RoleOutcome } from '../kernel/roleContracts';
import type { ChatRequest, LlmAsk } from './client';

type Parsed<T> = { ok: true; value: T } | { ok: false; error: string };

/** Cache salt of parse attempt `attempt` (1-based). */
export const attemptSalt = (salt: string, attempt: number): string => (attempt <= 1 ? salt : `${salt}/parse-retry-${attempt - 1}`);

/**
 * Ask, parse, and ask again on unparseable answers, up to `maxAttempts` times. Usage of every attempt is
 * summed. Transport errors from the client propagate.
 */
export async function withParseRetries<T>(
  client: LlmAsk,
  maxAttempts: number,
  request: Omit<ChatRequest, 'cacheSalt'> & { cacheSalt: string },
  parse: (text: string) => Parsed<T>,
): Promise<RoleOutcome<T>> {
  let usage = zeroUsage();
  let lastError = 'no attempt made';
  let lastRaw: string | undefined;
  for (let attempt = 1; attempt <= maxAttempts; attempt++) {
    const res = await client.chat({ ...request, cacheSalt: attemptSalt(request.cacheSalt, attempt) });
    usage = addUsage(usage, res.usage);
    const parsed = parse(res.text);
    if (parsed.ok) return { ok: true, value: parsed.value, usage, attempts: attempt };
    lastError = parsed.error;
    lastRaw = res.text;
  }
  const outcome: RoleOutcome<T> = { ok: false, reason: `unparseable answer after ${maxAttempts} attempt(s): ${lastError}`, usage, attempts: maxAttempts };
  if (lastRaw !== undefined) outcome.raw = lastRaw;
  return outcome;
}
