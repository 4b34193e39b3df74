/**
 * The demo tool world's tool registry: 5 domains, 15 executable tools with OpenAI function schemas.
 *
 * This is what makes the whole project run offline: the generator builds dialogues whose tool messages are real
 * `executeTool` results, and later stages (the RL environment) can execute a policy's calls against the same
 * world instead of an LLM tool simulator. Results are computed from a small deterministic world (src/demo/catalog.ts)
 * that depends only on the world seed.
 *
 * | domain   | tools                                                              |
 * |----------|--------------------------------------------------------------------|
 * | weather  | get_weather, get_forecast                                          |
 * | shopping | search_products, get_product, place_order, get_order_status       |
 * | banking  | get_balance, list_transactions, transfer_money, convert_currency   |
 * | travel   | search_flights, book_flight, get_flight_status                     |
 * | calendar | list_events, find_free_slot, create_event                          |
 */
import { bankingTools } from './domains/banking';
import { calendarTools } from './domains/calendar';
import { shoppingTools } from './domains/shopping';
import { travelTools } from './domains/travel';
import { weatherTools } from './domains/weather';
import { validateArguments, type Domain, type JsonValue, type ToolOutcome, type ToolSchema, type WorldTool } from './worldTypes';

export { DOMAINS, type Domain, type JsonValue, type ToolError, type ToolOutcome, type ToolSchema, type WorldTool } from './worldTypes';

/** The world seed used when a caller gives none. */
export const DEFAULT_WORLD_SEED = 1;

/** Every tool of the world by name. */
export const WORLD_TOOLS: Readonly<Record<string, WorldTool>> = Object.freeze({
  ...weatherTools,
  ...shoppingTools,
  ...bankingTools,
  ...travelTools,
  ...calendarTools,
});

export const WORLD_TOOL_NAMES: readonly string[] = Object.keys(WORLD_TOOLS);

/** Tool names of a domain, in registry order. */
export const toolNamesOf = (domain: Domain): string[] => WORLD_TOOL_NAMES.filter((n) => WORLD_TOOLS[n]?.domain === domain);

/** A fresh copy of a tool's schema (callers put it into examples, which later stages may mutate). */
export function toolSchema(name: string): ToolSchema {
  const tool = WORLD_TOOLS[name];
  if (!tool) throw new Error(`unknown world tool "${name}"`);
  return structuredClone(tool.schema);
}

/** Schemas of all tools of the given domains. */
export const toolSchemasOf = (domains: readonly Domain[]): ToolSchema[] => domains.flatMap((d) => toolNamesOf(d).map(toolSchema));

/**
 * Execute a tool of the world. `args` is the decoded arguments object (a JSON string is accepted too). Never
 * throws: an unknown tool or invalid arguments give `{ok:false, error:{code, message}}`, the same shape as the
 * tools' own errors (not found, out of stock, ...).
 */
export function executeTool(name: string, args: unknown, worldSeed: number = DEFAULT_WORLD_SEED): ToolOutcome {
  const tool = WORLD_TOOLS[name];
  if (!tool) return { ok: false, error: { code: 'unknown_tool', message: `unknown tool "${name}"` } };
  const valid = validateArguments(tool.schema, args);
  if (!valid.ok) return valid;
  return tool.execute(valid.args, worldSeed);
}

/**
 * The text of a tool message for an outcome: the result as compact JSON, or `{"error":{"code","message"}}`.
 * Generated dialogues use exactly this, so a tool message can be checked by re-executing its call.
 */
export function toolResultText(outcome: ToolOutcome): string {
  const value: JsonValue = outcome.ok ? outcome.result : { error: { code: outcome.error.code, message: outcome.error.message } };
  return JSON.stringify(value);
}

// Fail fast at import if a domain registers a tool under a name that differs from its schema name.
for (const [name, tool] of Object.entries(WORLD_TOOLS)) {
  if (tool.schema.function.name !== name) throw new Error(`world tool "${name}" has schema name "${tool.schema.function.name}"`);
}
