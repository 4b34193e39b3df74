/**
 * Shard plumbing shared by the stage activities: key layout, idempotent "result written last" markers,
 * bounded-concurrency processing with heartbeats, and the conversion of LLM transport errors into Temporal
 * failures.
 */
import { hostname } from 'node:os';
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { Example } from '../kernel/schema';
import { LlmClient } from '../llm/client';
import { canonicalJson } from '../kernel/canonicalJson';
import { toTemporalFailure } from '../llm/temporal';
import { ObjectRef, type ObjectStore, storeCache } from '../storage/store';
import { LlmConfig } from '../llm/llmConfig';
import { LlmFatalError, LlmRetryableError } from '../llm/errors';
import { recordLlmUsage } from './activityMetrics';

/** A shard of examples in S3: the claim check passed between activities. */
export const ShardRef = ObjectRef.extend({
  index: z.number().int().nonnegative(),
  count: z.number().int().nonnegative(),
});
export type ShardRef = z.infer<typeof ShardRef>;

export const shardName = (index: number) => `shard-${String(index).padStart(5, '0')}`;

/**
 * `key` for this activity attempt: attempt 1 writes `key` itself, attempt n ≥ 2 writes `<stem>.a<n><ext>`. An attempt
 * that Temporal has given up on (a heartbeat timeout on a busy machine) may still be running and finish later; with
 * a real LLM its output differs from the retry's (sampling, batching), and under one shared key it would overwrite
 * the shard the workflow already holds the hash of. Seen with llama-server: `hash mismatch … llm_filter_pass0`.
 */
export function attemptKey(key: string): string {
  let attempt = 1;
  try {
    attempt = Context.current().info.attempt;
  } catch {
    /* not in an activity */
  }
  if (attempt <= 1) return key;
  const dot = key.lastIndexOf('.');
  return dot > key.lastIndexOf('/') ? `${key.slice(0, dot)}.a${attempt}${key.slice(dot)}` : `${key}.a${attempt}`;
}

/** Writes examples as a JSONL shard (under the attempt's own key: `attemptKey`). */
export async function writeShard(store: ObjectStore, key: string, index: number, examples: readonly unknown[]): Promise<ShardRef> {
  const ref = await store.putJsonl(attemptKey(key), examples);
  return { ...ref, index, count: examples.length };
}

/** Reads and validates a shard (hash-checked: a shard replaced behind our back is an error, not data). */
export async function readShard(store: ObjectStore, ref: ShardRef): Promise<Example[]> {
  let data: Buffer;
  try {
    data = await store.getVerified(ref);
  } catch (e) {
    // No retry can bring the recorded content back: fail the stage with the reason instead of retrying forever.
    if (e instanceof Error && /^hash mismatch/.test(e.message)) throw ApplicationFailure.nonRetryable(`${e.message} (the shard was replaced after it was recorded)`, 'ShardReplaced');
    throw e;
  }
  const text = data.toString('utf8');
  return text.split('\n').filter((l) => l.trim()).map((line, i) => {
    const parsed = Example.safeParse(JSON.parse(line));
    if (!parsed.success) throw ApplicationFailure.nonRetryable(`${ref.key} line ${i + 1}: ${parsed.error.issues[0]?.path.join('.')}: ${parsed.error.issues[0]?.message}`, 'BadShard');
    return parsed.data;
  });
}

/**
 * Idempotency for a unit of work whose outputs are written before its small result object: when the
 * result object exists the work is done and its result is returned as it was, without redoing anything.
 *
 * `onStored` runs once the result object is first written, so what it counts (metrics) is counted once per unit of
 * work: not by an attempt that failed before, not again by a retry or a later run that finds the result. Its errors
 * are swallowed: the work is done and stored.
 */
export async function once<T>(store: ObjectStore, resultKey: string, schema: z.ZodType<T>, work: () => Promise<T>, onStored?: (result: T) => void): Promise<T> {
  if (await store.exists(resultKey)) return store.getJson(resultKey, schema);
  const result = await work();
  await store.putJson(resultKey, result);
  try {
    onStored?.(result);
  } catch {
    /* metrics and logging only */
  }
  return result;
}

/** Writes a stage's report (one whole-object write, so readers see all of it or none) and returns it. */
export async function saveReport<T>(store: ObjectStore, key: string, report: T): Promise<T> {
  await store.putJson(key, report);
  return report;
}

/** `host:pid` of this worker process: chunk results say where they ran. */
export const workerName = (): string => `${hostname()}:${process.pid}`;

/** The current activity's attempt (1 outside an activity). */
export function activityAttempt(): number {
  try {
    return Context.current().info.attempt;
  } catch {
    return 1;
  }
}

/** Heartbeats if running inside an activity (no-op in plain function calls, e.g. from the CLI). */
export function heartbeat(details?: unknown): void {
  try {
    Context.current().heartbeat(details);
  } catch {
    /* not in an activity context */
  }
}

/** The current activity's cancellation signal; undefined outside an activity (plain calls, tests, the CLI). */
export function cancellationSignal(): AbortSignal | undefined {
  try {
    return Context.current().cancellationSignal;
  } catch {
    return undefined;
  }
}

/**
 * Maps `fn` over `items` with at most `concurrency` in flight, heartbeating progress after each item and every 5 s.
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
  // A slow item (a real LLM call with its in-process retries can take minutes) must not look like a dead worker:
  // heartbeat the progress while items are in flight too, or Temporal times the attempt out and starts another
  // beside it. The SDK throttles heartbeats to a fraction of the heartbeat timeout.
  const ticker = setInterval(() => heartbeat({ label, done, total: items.length }), 5_000);
  try {
    await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, items.length)) }, worker));
  } finally {
    clearInterval(ticker);
  }
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

/**
 * The wasm backend's heap is capped at 4 GiB, and a wasm instance that ran out of it is unusable afterwards. Such
 * an attempt fails non-retryably with what to change, and the worker process exits (its supervisor — the demo, a
 * container's restart policy — starts a fresh one), instead of failing every later attempt on a broken heap.
 */
export async function heapGuard<T>(activity: string, log: (l: string) => void, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    const message = e instanceof Error ? e.message : String(e);
    if (!/memory access out of bounds|out of memory|Cannot enlarge memory/i.test(message)) throw e;
    log(`${activity}: the tensor backend ran out of memory (${message}); this worker exits so a fresh process can take over`);
    setTimeout(() => process.exit(70), 2000).unref();
    throw ApplicationFailure.nonRetryable(
      `${activity}: the tensor backend ran out of memory (${message}). Lower rl.rollout.kvCacheMiB or rl.rollout.maxBatchTokens (generation), or rl.microBatch and rl.rollout.maxModelLen (training), then resume the run.`,
      'ResourceExhausted',
    );
  }
}

/** What every stage's activities are built with: the run's object store and, optionally, where log lines go. */
export interface ActivityDeps {
  store: ObjectStore;
  log?: (line: string) => void;
}

/** `deps.log`, else console lines tagged with the stage (`[rl] …`). */
export const stageLog = (deps: ActivityDeps, stage: string): ((line: string) => void) => deps.log ?? ((l: string) => console.log(`[${stage}] ${l}`));

/**
 * A worker's LLM clients, one per distinct LLM config (so that a role's concurrency bound holds per process), each
 * answering from and filling the response cache in the run's bucket, and counting tokens and cost per role
 * (src/stages/activityMetrics.ts).
 */
export function llmClients(store: ObjectStore): (llm: LlmConfig) => LlmClient {
  const clients = new Map<string, LlmClient>();
  return (llm) => {
    const key = canonicalJson(llm);
    let c = clients.get(key);
    if (!c) clients.set(key, (c = new LlmClient(llm, { cache: storeCache(store), onUsage: recordLlmUsage })));
    return c;
  };
}
