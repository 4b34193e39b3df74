/**
 * The stage 1–2 roles (src/kernel/roleContracts.ts) on an LLM endpoint, and the per-role choice between them and the offline
 * implementations (src/demo/offline.ts, injected).
 */
import { buildCompressionMessages, COMPRESSION_JSON_SCHEMA, countAssistantMessages, parseCompression } from './compression';
import { type CompressorRole as CompressorContract, type DataRoles, type Effort, type FilterVerdict, type LlmFilterRole as FilterContract, type RoleOutcome, zeroUsage } from '../../kernel/roleContracts';
import { Example } from '../../kernel/schema';
import { buildFilterMessages, FILTER_JSON_SCHEMA, filterCacheSalt, parseFilterVerdict } from './llmFilter';
import { LlmClient, type LlmAsk, type LlmClientOptions, type ResponseCache } from '../../llm/client';
import { isOnline, LlmConfig } from '../../llm/llmConfig';
import { withParseRetries } from '../../llm/parseRetries';

/** Stage 1b judge on an LLM endpoint (spec §2.2). */
export class LlmFilterRole implements FilterContract {
  constructor(private readonly client: LlmAsk) {}

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
  constructor(private readonly client: LlmAsk) {}

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
  /** Usage of every answer, for metrics (`LlmClientOptions.onUsage`). */
  onUsage?: LlmClientOptions['onUsage'];
}

/** Per role: LLM-backed when the role has a `baseUrl`, else the caller's offline implementation. */
export function makeDataRoles(llmConfig: LlmConfig, deps: MakeDataRolesDeps): DataRoles {
  const filterCfg = llmConfig.roles.filter;
  const compressorCfg = llmConfig.roles.compressor;
  const anyOnline = isOnline(filterCfg) || isOnline(compressorCfg);
  const client = anyOnline
    ? (deps.client ?? new LlmClient(llmConfig, { ...(deps.cache ? { cache: deps.cache } : {}), ...(deps.log ? { log: deps.log } : {}), ...(deps.onUsage ? { onUsage: deps.onUsage } : {}) }))
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
