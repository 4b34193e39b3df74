/**
 * LLM-backed implementations of the stage 1–2 roles (src/kernel/roles.ts), and the per-role choice between
 * them and the offline implementations.
 *
 * Error contract (see src/kernel/roles.ts): an answer that cannot be parsed after `maxParseAttempts`
 * attempts is *returned* as `{ ok: false }`; transport failures *propagate* as LlmRetryableError /
 * LlmFatalError, for the activity to convert with toTemporalFailure.
 *
 * Caching: parse attempt k of a request uses its own cache salt (`<salt>` for the first attempt,
 * `<salt>/parse-retry-<k-1>` after), so a parse retry asks the model again instead of replaying the bad
 * answer from the cache, while a retried activity replays every attempt it already paid for.
 */
import type { Example } from '../kernel/schema';
import {
  addUsage,
  zeroUsage,
  type CompressorRole as CompressorContract,
  type DataRoles,
  type Effort,
  type FilterVerdict,
  type LlmFilterRole as FilterContract,
  type RoleOutcome,
} from '../kernel/roles';
import { buildFilterMessages, filterCacheSalt, FILTER_JSON_SCHEMA, parseFilterVerdict } from '../stages/prepare/llmFilter';
import { buildCompressionMessages, COMPRESSION_JSON_SCHEMA, countAssistantMessages, parseCompression } from '../stages/prepare/compression';
import { isOnline, type LlmConfig } from './config';
import { LlmClient, type ChatRequest, type ResponseCache } from './client';

type Parsed<T> = { ok: true; value: T } | { ok: false; error: string };

/** Cache salt of parse attempt `attempt` (1-based). */
export const attemptSalt = (salt: string, attempt: number): string => (attempt <= 1 ? salt : `${salt}/parse-retry-${attempt - 1}`);

/**
 * Ask, parse, and ask again on unparseable answers, up to `maxAttempts` times. Usage of every attempt is
 * summed. Transport errors from the client propagate.
 */
export async function withParseRetries<T>(
  client: LlmClient,
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

/** Stage 1b judge on an LLM endpoint (spec §2.2). */
export class LlmFilterRole implements FilterContract {
  constructor(private readonly client: LlmClient) {}

  judge(example: Example, opts: { pass: number; effort: Effort }): Promise<RoleOutcome<FilterVerdict>> {
    return withParseRetries(
      this.client,
      this.client.roleConfig('filter').maxParseAttempts,
      {
        role: 'filter',
        messages: buildFilterMessages(example),
        jsonSchema: FILTER_JSON_SCHEMA,
        reasoningEffort: opts.effort,
        cacheSalt: filterCacheSalt(opts.pass, opts.effort),
      },
      parseFilterVerdict,
    );
  }
}

/** Stage 2b CoT compressor on an LLM endpoint (spec §3.2); effort comes from the role config. */
export class CompressorRole implements CompressorContract {
  constructor(private readonly client: LlmClient) {}

  async compress(example: Example): Promise<RoleOutcome<string[]>> {
    const expected = countAssistantMessages(example);
    // Nothing to compress (cannot pass the rule filters, but cheap to handle): no call.
    if (expected === 0) return { ok: true, value: [], usage: zeroUsage(), attempts: 0 };
    return withParseRetries(
      this.client,
      this.client.roleConfig('compressor').maxParseAttempts,
      { role: 'compressor', messages: buildCompressionMessages(example), jsonSchema: COMPRESSION_JSON_SCHEMA, cacheSalt: 'compress' },
      (text) => parseCompression(text, expected),
    );
  }
}

export interface MakeDataRolesDeps {
  /** The offline implementations (src/demo/offline.ts); called at most once, and only if a role needs it. */
  offline: () => DataRoles;
  cache?: ResponseCache;
  /** Share one client across role families so per-role concurrency bounds hold per process (built from the same config). */
  client?: LlmClient;
  log?: (message: string) => void;
}

/** Per role: LLM-backed when the role has a `baseUrl`, else the caller's offline implementation. */
export function makeDataRoles(llmConfig: LlmConfig, deps: MakeDataRolesDeps): DataRoles {
  const filterCfg = llmConfig.roles.filter;
  const compressorCfg = llmConfig.roles.compressor;
  const anyOnline = isOnline(filterCfg) || isOnline(compressorCfg);
  const client = anyOnline
    ? (deps.client ?? new LlmClient(llmConfig, { ...(deps.cache ? { cache: deps.cache } : {}), ...(deps.log ? { log: deps.log } : {}) }))
    : undefined;

  let offline: DataRoles | undefined;
  const getOffline = (): DataRoles => (offline ??= deps.offline());

  const filter = client && isOnline(filterCfg) ? new LlmFilterRole(client) : getOffline().filter;
  const compressor = client && isOnline(compressorCfg) ? new CompressorRole(client) : getOffline().compressor;

  return {
    filter,
    compressor,
    describe: () => ({
      filter: isOnline(filterCfg) ? filterCfg.model : getOffline().describe().filter,
      compressor: isOnline(compressorCfg) ? compressorCfg.model : getOffline().describe().compressor,
    }),
  };
}
