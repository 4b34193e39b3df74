/**
 * The LLM roles of stages 1–2, as interfaces. Two kinds of implementation exist for each role:
 * an LLM-backed one (src/llm/parseRetries.ts: pure prompt builders + the OpenAI-compatible client) and a
 * deterministic offline one for the demo tool world (src/demo/offline.ts). Activities only see these
 * interfaces.
 *
 * Error contract: transient endpoint failures (429, 5xx, timeouts, connection errors) are *thrown*
 * (`LlmRetryableError`), so Temporal retries the activity; an answer that cannot be parsed after the
 * configured attempts is *returned* as `{ ok: false }`, so the example is recorded as failed and the
 * stage goes on.
 */
import { z } from 'zod';
import type { Example } from './schema';
import { addCounts } from './counts';

export type Effort = 'low' | 'medium' | 'high';

/** Token and cost accounting of one or more LLM calls. */
export interface Usage {
  calls: number;
  promptTokens: number;
  cachedPromptTokens: number;
  completionTokens: number;
  costUsd: number;
  /** Calls answered from the response cache (not paid again). */
  cacheHits: number;
}

/** The zod form of `Usage`, for activity results, reports and stored records. */
export const UsageSchema = z.object({
  calls: z.number(),
  promptTokens: z.number(),
  cachedPromptTokens: z.number(),
  completionTokens: z.number(),
  costUsd: z.number(),
  cacheHits: z.number(),
});

export const zeroUsage = (): Usage => ({ calls: 0, promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0, costUsd: 0, cacheHits: 0 });

export const addUsage = (a: Usage, b: Usage): Usage => addCounts(a, b);

export type RoleOutcome<T> =
  | { ok: true; value: T; usage: Usage; attempts: number }
  | { ok: false; reason: string; usage: Usage; attempts: number; raw?: string };

/** Output of one LLM-filter pass on one example (spec §2.2: `{"Reasoning": str, "NoError": bool}`). */
export interface FilterVerdict {
  noError: boolean;
  reasoning: string;
}

export interface LlmFilterRole {
  /** `pass` (0-based) and `effort` identify the cascade pass; identical passes must not share a cache entry. */
  judge(example: Example, opts: { pass: number; effort: Effort }): Promise<RoleOutcome<FilterVerdict>>;
}

export interface CompressorRole {
  /** One compressed thinking per assistant message of the example, in order (spec §3.2). */
  compress(example: Example): Promise<RoleOutcome<string[]>>;
}

export interface DataRoles {
  filter: LlmFilterRole;
  compressor: CompressorRole;
  /** 'offline' or the endpoint's model name, for reports. */
  describe(): { filter: string; compressor: string };
}
