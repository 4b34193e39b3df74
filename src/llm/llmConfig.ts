/**
 * Configuration of the LLM roles (filter, compressor, annotator, simulator, judge, and the τ²-Bench user simulator).
 *
 * Every role is independent: it may point at OpenAI, a local vLLM/SGLang/Ollama server, or nothing at
 * all (no `baseUrl`), in which case the pipeline uses the deterministic offline implementation of that
 * role. The default configuration is entirely offline, so the demo runs without any endpoint.
 *
 * Secrets never appear here: `apiKeyEnv` names the environment variable that holds the key, and the
 * client reads it at call time. Config objects travel through workflow inputs and reports, so they must
 * stay secret-free.
 */
import { z } from 'zod';

export const RoleName = z.enum(['filter', 'compressor', 'annotator', 'simulator', 'judge', 'user']);
export type RoleName = z.infer<typeof RoleName>;

export const ReasoningEffort = z.enum(['low', 'medium', 'high']);
export type ReasoningEffort = z.infer<typeof ReasoningEffort>;

/**
 * How to ask the endpoint for JSON:
 * - `json_schema`: strict structured output (OpenAI, vLLM, SGLang, recent Ollama);
 * - `json_object`: "some JSON object" mode, for servers without schema-guided decoding;
 * - `none`: plain text; the prompt alone asks for JSON and the parser extracts it.
 * The client downgrades automatically when a server rejects the configured mode.
 */
export const StructuredOutputMode = z.enum(['json_schema', 'json_object', 'none']);
export type StructuredOutputMode = z.infer<typeof StructuredOutputMode>;

/** USD per one million tokens. Reference prices for gpt-5: 1.25 / 0.125 / 10 (spec §3.2). */
export const LlmPricing = z.object({
  inputPer1M: z.number().nonnegative().default(0).describe('USD per one million uncached input tokens.'),
  cachedInputPer1M: z.number().nonnegative().default(0).describe('USD per one million cached input tokens.'),
  outputPer1M: z.number().nonnegative().default(0).describe('USD per one million output tokens.'),
});
export type LlmPricing = z.infer<typeof LlmPricing>;

export const LlmRoleConfig = z.object({
  /** OpenAI-compatible base URL, e.g. `https://api.openai.com/v1` or `http://localhost:8000/v1`. Absent → offline. */
  baseUrl: z.url().optional()
    .describe('OpenAI-compatible base URL, e.g. `https://api.openai.com/v1` or `http://localhost:8000/v1`; unset: the built-in offline implementation.'),
  model: z.string().min(1).describe('Model name sent to the endpoint (`offline` for the built-in implementation).'),
  /** Name of the environment variable holding the API key (never the key itself). */
  apiKeyEnv: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'apiKeyEnv must be the NAME of an environment variable, not a key')
    .optional()
    .describe('Name of the environment variable holding the API key (never the key itself); unset or empty: a placeholder key (local servers need none).'),
  structuredOutput: StructuredOutputMode.default('json_schema')
    .describe('How to ask for JSON: `json_schema` (strict structured output), `json_object` (any JSON object), `none` (the prompt alone); downgraded automatically when the server rejects the mode.'),
  temperature: z.number().min(0).max(2).optional()
    .describe('Sampling temperature; unset: the reference value for the simulator and the judge, else the server default.'),
  topP: z.number().gt(0).max(1).optional()
    .describe('Nucleus sampling threshold; unset: the reference value for the simulator and the judge, else the server default.'),
  maxTokens: z.number().int().positive().optional()
    .describe('Completion token limit per request; unset: the reference value for the simulator and the judge, else the server default.'),
  /** Default reasoning effort; callers such as the filter cascade may override it per call. */
  reasoningEffort: ReasoningEffort.optional()
    .describe('Default reasoning effort; callers such as the filter cascade may override it per call. Unset: not sent.'),
  /** Per HTTP attempt. */
  timeoutMs: z.number().int().positive().default(120_000).describe('Timeout of one HTTP attempt, in milliseconds.'),
  /** Attempts at getting a parseable answer (the reference's `--retry 3`). */
  maxParseAttempts: z.number().int().min(1).default(3).describe('Attempts at getting a parseable answer (the reference `--retry 3`).'),
  /**
   * In-process retries on 5xx/408/timeouts/connection errors (not 429s: src/llm/client.ts) before the error is thrown to Temporal,
   * which then retries the whole activity with its own (longer) backoff.
   */
  maxTransportRetries: z.number().int().min(0).default(2)
    .describe('In-process retries on 5xx/408/timeouts/connection errors before the error goes to Temporal, which then retries the whole activity with its own (longer) backoff. A 429 does not use them up: the call waits its Retry-After (jittered, paced per role) for up to 15 minutes in all.'),
  /** Concurrent in-flight requests of this role, per client (i.e. per worker process). */
  concurrency: z.number().int().min(1).default(8).describe('Concurrent in-flight requests of this role, per client (i.e. per worker process).'),
  pricing: LlmPricing.prefault({}).describe('USD per one million tokens, for the cost ledger and the reports (gpt-5: 1.25 / 0.125 / 10).'),
});
export type LlmRoleConfig = z.infer<typeof LlmRoleConfig>;
export type LlmRoleConfigInput = z.input<typeof LlmRoleConfig>;

/** An offline role: no endpoint, the built-in deterministic implementation answers. */
const OFFLINE_ROLE: LlmRoleConfigInput = { model: 'offline' };

export const LlmConfig = z.object({
  roles: z
    .object({
      filter: LlmRoleConfig.prefault(OFFLINE_ROLE).describe('The LLM filter: judges whether a dialogue has an error (data preparation).'),
      compressor: LlmRoleConfig.prefault(OFFLINE_ROLE).describe('Compresses the chain of thought of the cold-start dialogues.'),
      annotator: LlmRoleConfig.prefault(OFFLINE_ROLE).describe('Writes the checklists (stage 4).'),
      simulator: LlmRoleConfig.prefault(OFFLINE_ROLE)
        .describe('Simulates the result of a tool call during RL rollouts when it is neither replayed from the reference nor executed.'),
      judge: LlmRoleConfig.prefault(OFFLINE_ROLE).describe('Decides the checklist items of every assistant step during RL.'),
      user: LlmRoleConfig.prefault(OFFLINE_ROLE)
        .describe("τ²-Bench's user simulator (`cm2 eval tau2`): answers the agent as the task's customer, with tau2's own prompt; temperature 0 unless set (tau2's default). Offline: a scripted user that states the task's request, does its device actions and stops (a smoke test, not comparable with an LLM user)."),
    })
    .prefault({})
    .describe('One entry per role; a role left out is offline.'),
});
export type LlmConfig = z.infer<typeof LlmConfig>;
export type LlmConfigInput = z.input<typeof LlmConfig>;

/** The all-offline default configuration. */
export const defaultLlmConfig = (): LlmConfig => LlmConfig.parse({});

/** True when the role talks to an endpoint rather than using its offline implementation. */
export const isOnline = (role: LlmRoleConfig): role is LlmRoleConfig & { baseUrl: string } => role.baseUrl !== undefined;

/** `config` with `role`'s unset temperature / top_p / max tokens set to `defaults` (a role's reference sampling). */
export function withSamplingDefaults(config: LlmConfig, role: RoleName, defaults: { temperature: number; topP: number; maxTokens: number }): LlmConfig {
  const r = config.roles[role];
  return {
    ...config,
    roles: { ...config.roles, [role]: { ...r, temperature: r.temperature ?? defaults.temperature, topP: r.topP ?? defaults.topP, maxTokens: r.maxTokens ?? defaults.maxTokens } },
  };
}
