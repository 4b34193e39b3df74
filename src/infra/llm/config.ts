/**
 * Configuration of the LLM roles (filter, compressor, annotator, simulator, judge).
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

export const RoleName = z.enum(['filter', 'compressor', 'annotator', 'simulator', 'judge']);
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
  inputPer1M: z.number().nonnegative().default(0),
  cachedInputPer1M: z.number().nonnegative().default(0),
  outputPer1M: z.number().nonnegative().default(0),
});
export type LlmPricing = z.infer<typeof LlmPricing>;

export const LlmRoleConfig = z.object({
  /** OpenAI-compatible base URL, e.g. `https://api.openai.com/v1` or `http://localhost:8000/v1`. Absent → offline. */
  baseUrl: z.url().optional(),
  model: z.string().min(1),
  /** Name of the environment variable holding the API key (never the key itself). */
  apiKeyEnv: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'apiKeyEnv must be the NAME of an environment variable, not a key')
    .optional(),
  structuredOutput: StructuredOutputMode.default('json_schema'),
  temperature: z.number().min(0).max(2).optional(),
  topP: z.number().gt(0).max(1).optional(),
  maxTokens: z.number().int().positive().optional(),
  /** Default reasoning effort; callers such as the filter cascade may override it per call. */
  reasoningEffort: ReasoningEffort.optional(),
  /** Per HTTP attempt. */
  timeoutMs: z.number().int().positive().default(120_000),
  /** Attempts at getting a parseable answer (the reference's `--retry 3`). */
  maxParseAttempts: z.number().int().min(1).default(3),
  /**
   * In-process retries on 429/5xx/408/timeouts/connection errors before the error is thrown to Temporal,
   * which then retries the whole activity with its own (longer) backoff.
   */
  maxTransportRetries: z.number().int().min(0).default(2),
  /** Concurrent in-flight requests of this role, per client (i.e. per worker process). */
  concurrency: z.number().int().min(1).default(8),
  pricing: LlmPricing.prefault({}),
});
export type LlmRoleConfig = z.infer<typeof LlmRoleConfig>;
export type LlmRoleConfigInput = z.input<typeof LlmRoleConfig>;

/** An offline role: no endpoint, the built-in deterministic implementation answers. */
const OFFLINE_ROLE: LlmRoleConfigInput = { model: 'offline' };

export const LlmConfig = z.object({
  roles: z
    .object({
      filter: LlmRoleConfig.prefault(OFFLINE_ROLE),
      compressor: LlmRoleConfig.prefault(OFFLINE_ROLE),
      annotator: LlmRoleConfig.prefault(OFFLINE_ROLE),
      simulator: LlmRoleConfig.prefault(OFFLINE_ROLE),
      judge: LlmRoleConfig.prefault(OFFLINE_ROLE),
    })
    .prefault({}),
});
export type LlmConfig = z.infer<typeof LlmConfig>;
export type LlmConfigInput = z.input<typeof LlmConfig>;

/** The all-offline default configuration. */
export const defaultLlmConfig = (): LlmConfig => LlmConfig.parse({});

/** True when the role talks to an endpoint rather than using its offline implementation. */
export const isOnline = (role: LlmRoleConfig): role is LlmRoleConfig & { baseUrl: string } => role.baseUrl !== undefined;
