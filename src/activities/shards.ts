/**
 * Shard plumbing shared by the stage activities: key layout, idempotent "result written last" markers,
 * bounded-concurrency processing with heartbeats, and the conversion of LLM transport errors into Temporal
 * failures.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { Example } from '../data/schema';
import { LlmFatalError, LlmRetryableError } from '../infra/llm/client';
import { toTemporalFailure } from '../infra/llm/temporal';
import { ObjectRef, type ObjectStore } from '../infra/store';

/** A shard of examples in S3: the claim check passed between activities. */
export const ShardRef = ObjectRef.extend({
  index: z.number().int().nonnegative(),
  count: z.number().int().nonnegative(),
});
export type ShardRef = z.infer<typeof ShardRef>;

export const shardName = (index: number) => `shard-${String(index).padStart(5, '0')}`;

/** Writes examples as a JSONL shard. */
export async function writeShard(store: ObjectStore, key: string, index: number, examples: readonly unknown[]): Promise<ShardRef> {
  const ref = await store.putJsonl(key, examples);
  return { ...ref, index, count: examples.length };
}

/** Reads and validates a shard (hash-checked: a shard replaced behind our back is an error, not data). */
export async function readShard(store: ObjectStore, ref: ShardRef): Promise<Example[]> {
  const text = (await store.getVerified(ref)).toString('utf8');
  return text.split('\n').filter((l) => l.trim()).map((line, i) => {
    const parsed = Example.safeParse(JSON.parse(line));
    if (!parsed.success) throw ApplicationFailure.nonRetryable(`${ref.key} line ${i + 1}: ${parsed.error.issues[0]?.path.join('.')}: ${parsed.error.issues[0]?.message}`, 'BadShard');
    return parsed.data;
  });
}

/**
 * Idempotency for a unit of work whose outputs are written before its small result object: when the
 * result object exists the work is done and its result is returned as it was, without redoing anything.
 */
export async function once<T>(store: ObjectStore, resultKey: string, schema: z.ZodType<T>, work: () => Promise<T>): Promise<T> {
  if (await store.exists(resultKey)) return store.getJson(resultKey, schema);
  const result = await work();
  await store.putJson(resultKey, result);
  return result;
}

/** Heartbeats if running inside an activity (no-op in plain function calls, e.g. from the CLI). */
export function heartbeat(details?: unknown): void {
  try {
    Context.current().heartbeat(details);
  } catch {
    /* not in an activity context */
  }
}

function cancellationSignal(): AbortSignal | undefined {
  try {
    return Context.current().cancellationSignal;
  } catch {
    return undefined;
  }
}

/**
 * Maps `fn` over `items` with at most `concurrency` in flight, heartbeating progress after each item.
 * The first thrown error stops new work and is rethrown (after in-flight items settle), so a retryable
 * endpoint outage fails the attempt and Temporal retries it; per-item failures that are data problems
 * must be returned by `fn` as values, not thrown.
 */
export async function mapWithHeartbeat<T, R>(items: readonly T[], concurrency: number, fn: (item: T, index: number) => Promise<R>, label: string): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  let done = 0;
  let failure: unknown;
  const signal = cancellationSignal();
  const worker = async () => {
    while (failure === undefined && next < items.length) {
      if (signal?.aborted) {
        failure = signal.reason ?? new Error('cancelled');
        return;
      }
      const i = next++;
      try {
        results[i] = await fn(items[i] as T, i);
      } catch (e) {
        failure ??= e;
        return;
      }
      done++;
      heartbeat({ label, done, total: items.length });
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, items.length)) }, worker));
  if (failure !== undefined) throw asTemporalFailure(failure);
  return results;
}

/** LLM transport errors become Temporal failures (retryable with Retry-After, or not); others pass through. */
export function asTemporalFailure(err: unknown): unknown {
  if (err instanceof LlmRetryableError || err instanceof LlmFatalError) return toTemporalFailure(err);
  return err;
}

/** Validates an activity input; a malformed input is a bug or a foreign caller, never worth a retry. */
export function parseInput<T>(schema: z.ZodType<T>, input: unknown, activity: string): T {
  const parsed = schema.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw ApplicationFailure.nonRetryable(`${activity}: invalid input at ${issue?.path.join('.')}: ${issue?.message}`, 'BadInput');
  }
  return parsed.data;
}
