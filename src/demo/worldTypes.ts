/**
 * Shared types of the demo tool world: JSON values, OpenAI function-tool schemas, tool outcomes, the way domain
 * modules define their tools (`defineTools`), the generic argument validation every tool runs before its own logic,
 * and a defensive reader of an example's candidate tool schemas (`parametersOfTools`).
 */

export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

export type Domain = 'weather' | 'shopping' | 'banking' | 'travel' | 'calendar';
export const DOMAINS: readonly Domain[] = ['weather', 'shopping', 'banking', 'travel', 'calendar'];

/** The JSON Schema subset the world's tools use for their parameters. */
export interface ParamSchema {
  type: 'string' | 'integer' | 'number' | 'boolean';
  description: string;
  enum?: readonly string[];
  default?: string | number | boolean;
  minimum?: number;
  maximum?: number;
}

/** An OpenAI function tool (`{type:'function', function:{name, description, parameters}}`). */
export interface ToolSchema {
  type: 'function';
  function: {
    name: string;
    description: string;
    parameters: {
      type: 'object';
      properties: Record<string, ParamSchema>;
      required: string[];
    };
  };
}

/**
 * A tool error. Every failure of every tool has this shape (`code` from a small fixed set), so errors are
 * "format-consistent" in the sense of the spec's tool simulator: a policy can learn to read them.
 */
export interface ToolError {
  code: 'unknown_tool' | 'invalid_arguments' | 'not_found' | 'out_of_stock' | 'insufficient_funds' | 'sold_out' | 'conflict';
  message: string;
}

export type ToolOutcome = { ok: true; result: JsonValue } | { ok: false; error: ToolError };

/** Arguments after validation: defaults filled in, every value of its declared type. */
export type ValidArgs = Record<string, string | number | boolean>;

export interface WorldTool {
  domain: Domain;
  schema: ToolSchema;
  /** Runs on validated arguments; the world is a pure function of `worldSeed`. */
  execute(args: ValidArgs, worldSeed: number): ToolOutcome;
}

/** Build a tool schema; `required` lists the parameters without a default. */
export function functionSchema(
  name: string,
  description: string,
  properties: Record<string, ParamSchema>,
  required: string[],
): ToolSchema {
  return { type: 'function', function: { name, description, parameters: { type: 'object', properties, required } } };
}

/** One tool as a domain module writes it: what its schema says, and what it does. */
export interface ToolSpec {
  description: string;
  /** Every parameter without a `default` is required, except those in `optional`. */
  parameters: Record<string, ParamSchema>;
  /** Parameters without a default that a call may leave out. */
  optional?: readonly string[];
  execute: WorldTool['execute'];
}

/** A domain's tools by name; each schema is named after its key, so a tool's name and its schema's never differ. */
export function defineTools(domain: Domain, specs: Record<string, ToolSpec>): Record<string, WorldTool> {
  return Object.fromEntries(
    Object.entries(specs).map(([name, spec]) => {
      const required = Object.keys(spec.parameters).filter((key) => spec.parameters[key]?.default === undefined && !spec.optional?.includes(key));
      return [name, { domain, schema: functionSchema(name, spec.description, spec.parameters, required), execute: spec.execute }];
    }),
  );
}

/** A string parameter. */
export const stringParam = (description: string): ParamSchema => ({ type: 'string', description });

export const fail = (code: ToolError['code'], message: string): ToolOutcome => ({ ok: false, error: { code, message } });
export const ok = (result: JsonValue): ToolOutcome => ({ ok: true, result });

/** The error for a `day` argument that names no day of the week. */
export const notADay = (day: unknown): ToolOutcome => fail('invalid_arguments', `"${String(day)}" is not a day of the week`);
/** The error for an id or name the world does not know (`what`: "account", "city", …). */
export const notFound = (what: string, id: unknown): ToolOutcome => fail('not_found', `unknown ${what} "${String(id)}"`);

export const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * What `read` makes of each parameter schema of each candidate tool, as `[tool name, values by parameter]` in list
 * order (a name may repeat), read defensively (an example's tools may come from anywhere): entries that are not
 * function tools with a name are skipped, missing or malformed `parameters`/`properties` read as no parameters, and
 * parameter schemas that are not objects, or that `read` returns undefined for, are left out.
 */
export function parametersOfTools<T>(tools: readonly unknown[], read: (schema: Record<string, unknown>) => T | undefined): [string, Record<string, T>][] {
  const out: [string, Record<string, T>][] = [];
  for (const tool of tools) {
    if (!isPlainObject(tool) || !isPlainObject(tool.function) || typeof tool.function.name !== 'string') continue;
    const params = isPlainObject(tool.function.parameters) ? tool.function.parameters : {};
    const props = isPlainObject(params.properties) ? params.properties : {};
    const values: Record<string, T> = {};
    for (const [key, schema] of Object.entries(props)) {
      const value = isPlainObject(schema) ? read(schema) : undefined;
      if (value !== undefined) values[key] = value;
    }
    out.push([tool.function.name, values]);
  }
  return out;
}

/**
 * Validate arguments against a tool's parameter schema, the way a strict tool server would: the arguments must be
 * an object (or a JSON string of one); every required parameter present; no undeclared parameter; every value of
 * its declared type, inside `enum`/`minimum`/`maximum`. Missing optional parameters get their `default`.
 */
export function validateArguments(schema: ToolSchema, raw: unknown): { ok: true; args: ValidArgs } | { ok: false; error: ToolError } {
  const invalid = (message: string) => ({ ok: false as const, error: { code: 'invalid_arguments' as const, message } });
  let value = raw;
  if (typeof raw === 'string') {
    try {
      value = JSON.parse(raw);
    } catch {
      return invalid('arguments are not valid JSON');
    }
  }
  if (!isPlainObject(value)) return invalid('arguments must be a JSON object');
  const { properties, required } = schema.function.parameters;
  for (const key of Object.keys(value)) {
    if (!(key in properties)) return invalid(`unknown argument "${key}"`);
  }
  for (const key of required) {
    if (value[key] === undefined || value[key] === null) return invalid(`missing required argument "${key}"`);
  }
  const args: ValidArgs = {};
  for (const [key, prop] of Object.entries(properties)) {
    const v = value[key];
    if (v === undefined || v === null) {
      if (prop.default !== undefined) args[key] = prop.default;
      continue;
    }
    switch (prop.type) {
      case 'string':
        if (typeof v !== 'string' || v.trim() === '') return invalid(`argument "${key}" must be a non-empty string`);
        if (prop.enum && !prop.enum.includes(v)) return invalid(`argument "${key}" must be one of ${prop.enum.join(', ')}`);
        args[key] = v.trim();
        break;
      case 'integer':
      case 'number':
        if (typeof v !== 'number' || !Number.isFinite(v)) return invalid(`argument "${key}" must be a number`);
        if (prop.type === 'integer' && !Number.isInteger(v)) return invalid(`argument "${key}" must be an integer`);
        if (prop.minimum !== undefined && v < prop.minimum) return invalid(`argument "${key}" must be at least ${prop.minimum}`);
        if (prop.maximum !== undefined && v > prop.maximum) return invalid(`argument "${key}" must be at most ${prop.maximum}`);
        args[key] = v;
        break;
      case 'boolean':
        if (typeof v !== 'boolean') return invalid(`argument "${key}" must be true or false`);
        args[key] = v;
        break;
    }
  }
  return { ok: true, args };
}

/** Round to cents without binary-float noise in the printed value (0.1 + 0.2 style artefacts). */
export const round2 = (x: number): number => Math.round(x * 100) / 100;
