/**
 * What the rule filters (filters.ts) read examples with: defensive accessors (rows may come from anywhere), Python's
 * notions of blank, falsy and JSON (the reference's filters are Python), and the tool list and tool-call decoding with
 * the JSON-schema check shared by tool_schema and tool_argument_types.
 */
import { Example } from '../../kernel/schema';

// ---------------------------------------------------------------------------------------------------------------
// Defensive accessors: filters receive typed Examples, but rows may come from anywhere; never trust the shape.

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export function messagesOf(ex: unknown): unknown[] {
  return isPlainObject(ex) && Array.isArray(ex.messages) ? ex.messages : [];
}

export function roleOf(message: unknown): unknown {
  return isPlainObject(message) ? message.role : undefined;
}

/** Content as text; a missing or non-string content counts as empty (the reference would crash on it). */
export function contentOf(message: unknown): string {
  return isPlainObject(message) && typeof message.content === 'string' ? message.content : '';
}

/** Tool calls of a message; anything that is not an array counts as none (the reference tests truthiness). */
export function toolCallsOf(message: unknown): unknown[] {
  return isPlainObject(message) && Array.isArray(message.tool_calls) ? message.tool_calls : [];
}

export const hasToolCalls = (message: unknown): boolean => toolCallsOf(message).length > 0;

export function describe(v: unknown): string {
  if (v === undefined) return 'undefined';
  try {
    const s = JSON.stringify(v);
    return s.length > 80 ? `${s.slice(0, 77)}...` : s;
  } catch {
    return String(v);
  }
}

/** Python truthiness, for the places where the reference tests `if not x`. */
export function pyFalsy(v: unknown): boolean {
  if (v === undefined || v === null || v === false || v === 0 || v === '') return true;
  if (Array.isArray(v)) return v.length === 0;
  if (isPlainObject(v)) return Object.keys(v).length === 0;
  return false;
}

/** Characters Python's `str.strip()` removes (`str.isspace`); differs from JS `trim()` on U+001C–1F, U+0085, U+FEFF. */
// eslint-disable-next-line no-control-regex -- Python treats U+001C–1F as whitespace
export const PY_BLANK = /^[\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$/;

/** True when `text.strip()` would be empty in Python. */
export function isBlankLikePython(text: string): boolean {
  return PY_BLANK.test(text);
}

/**
 * `json.loads` with Python's defaults: like `JSON.parse`, but the bare constants `NaN`, `Infinity` and `-Infinity`
 * are accepted (decoded here as `null`, which is enough for validity checks). Without this, a tool response such as
 * `{"score": NaN}` would pass the reference and fail here.
 */
export function parseJsonLikePython(text: string): { ok: true; value: unknown } | { ok: false; error: string } {
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch (e) {
    const firstError = (e as Error).message;
    const patched = replacePythonJsonConstants(text);
    if (patched === text) return { ok: false, error: firstError };
    try {
      return { ok: true, value: JSON.parse(patched) as unknown };
    } catch {
      return { ok: false, error: firstError };
    }
  }
}

export function replacePythonJsonConstants(text: string): string {
  let out = '';
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i] as string;
    if (inString) {
      out += ch;
      if (ch === '\\') {
        out += text[i + 1] ?? '';
        i++;
      } else if (ch === '"') inString = false;
      continue;
    }
    if (ch === '"') {
      inString = true;
      out += ch;
      continue;
    }
    const constant = ['-Infinity', 'Infinity', 'NaN'].find((c) => text.startsWith(c, i));
    if (constant) {
      out += 'null';
      i += constant.length - 1;
      continue;
    }
    out += ch;
  }
  return out;
}

export const countOf = (text: string, needle: string): number => text.split(needle).length - 1;

// ---------------------------------------------------------------------------------------------------------------
// Tool list and tool-call decoding shared by tool_schema and tool_argument_types.

export const EMPTY_OBJECT_SCHEMA = { type: 'object', properties: {}, required: [] };

export type ToolIndex = { ok: true; schemasByName: Map<string, unknown[]> } | { ok: false; problems: string[] };

/**
 * Index the candidate tools by name (a name may carry several schemas; a call passes if any accepts it). Every
 * entry must be `type: "function"` with a `function` that has a non-empty name; missing or empty `parameters`
 * becomes the empty object schema, as in the reference.
 */
export function indexTools(tools: unknown): ToolIndex {
  if (!Array.isArray(tools)) return { ok: false, problems: [`tool list is not an array: ${describe(tools)}`] };
  const schemasByName = new Map<string, unknown[]>();
  const problems: string[] = [];
  for (const [i, tool] of tools.entries()) {
    if (!isPlainObject(tool) || tool.type !== 'function' || !Object.hasOwn(tool, 'function')) {
      problems.push(`tools[${i}] is not a function tool: ${describe(tool)}`);
      continue;
    }
    const fn = tool.function;
    if (!isPlainObject(fn)) {
      problems.push(`tools[${i}].function is not an object`);
      continue;
    }
    if (typeof fn.name !== 'string' || fn.name === '') {
      problems.push(`tools[${i}].function.name is not a valid name: ${describe(fn.name)}`);
      continue;
    }
    const parameters = pyFalsy(fn.parameters) ? EMPTY_OBJECT_SCHEMA : fn.parameters;
    const list = schemasByName.get(fn.name) ?? [];
    list.push(parameters);
    schemasByName.set(fn.name, list);
  }
  return problems.length > 0 ? { ok: false, problems } : { ok: true, schemasByName };
}

export type DecodedCall = { ok: true; name: string; args: Record<string, unknown> } | { ok: false; problem: string };

/** A tool call must be `type: "function"` with a name and arguments that decode to a JSON object. */
export function decodeCall(call: unknown): DecodedCall {
  if (!isPlainObject(call)) return { ok: false, problem: `tool call is not an object: ${describe(call)}` };
  if (call.type !== 'function') return { ok: false, problem: `type is ${describe(call.type)}, not "function"` };
  const fn = call.function;
  if (!isPlainObject(fn)) return { ok: false, problem: 'function is missing' };
  if (typeof fn.name !== 'string') return { ok: false, problem: `function name is not a string: ${describe(fn.name)}` };
  let args: unknown = fn.arguments;
  if (typeof args === 'string') {
    const decoded = parseJsonLikePython(args);
    if (!decoded.ok) return { ok: false, problem: `arguments are not valid JSON (${decoded.error})` };
    args = decoded.value;
  }
  if (!isPlainObject(args)) return { ok: false, problem: `arguments are not a JSON object: ${describe(args)}` };
  return { ok: true, name: fn.name, args };
}

/** Outcome of checking one call against one parameter schema: structural problems and (separately) type problems. */
export interface SchemaCheck {
  structural: string[];
  types: string[];
}

/**
 * The reference's `validate_parameters`: schema `type` must be "object", every `required` key present, every
 * supplied key declared in `properties`. Type mismatches are collected apart, because only the opt-in filter uses
 * them.
 */
export function checkAgainstSchema(args: Record<string, unknown>, schema: unknown): SchemaCheck {
  const result: SchemaCheck = { structural: [], types: [] };
  if (!isPlainObject(schema) || schema.type !== 'object') {
    result.structural.push(`parameter schema type is ${describe(isPlainObject(schema) ? schema.type : schema)}, not "object"`);
    return result;
  }
  const properties = schema.properties ?? {};
  const required = schema.required ?? [];
  if (!isPlainObject(properties)) result.structural.push('parameter schema "properties" is not an object');
  if (!Array.isArray(required)) result.structural.push('parameter schema "required" is not an array');
  if (result.structural.length > 0) return result;
  for (const key of required as unknown[]) {
    if (typeof key !== 'string' || !Object.hasOwn(args, key)) result.structural.push(`required parameter ${describe(key)} is missing`);
  }
  for (const [key, value] of Object.entries(args)) {
    const declared = (properties as Record<string, unknown>)[key];
    if (!Object.hasOwn(properties as object, key)) {
      result.structural.push(`parameter "${key}" is not declared in the schema`);
      continue;
    }
    const typeProblem = checkArgumentType(value, isPlainObject(declared) ? declared.type : undefined);
    if (typeProblem) result.types.push(`parameter "${key}": ${typeProblem}`);
  }
  return result;
}

export const JSON_TYPE_CHECKS: Record<string, (v: unknown) => boolean> = {
  string: (v) => typeof v === 'string',
  // JSON `1.0` decodes to the JS number 1, so integer-valued floats pass here (the reference would reject them).
  integer: (v) => typeof v === 'number' && Number.isInteger(v),
  number: (v) => typeof v === 'number',
  boolean: (v) => typeof v === 'boolean',
  array: (v) => Array.isArray(v),
  object: (v) => isPlainObject(v),
  null: (v) => v === null,
};

/**
 * The intended type check of §2.1. Returns a problem description, or undefined when the value fits.
 * A property without `type` (or with a non-object property schema) is unconstrained, as in JSON Schema.
 * A single unknown type name is a problem (the reference would crash); unknown names inside a list are ignored
 * (as in the reference).
 */
export function checkArgumentType(value: unknown, expected: unknown): string | undefined {
  if (expected === undefined || expected === null) return undefined;
  if (typeof expected === 'string') {
    const check = JSON_TYPE_CHECKS[expected];
    if (!check) return `unknown schema type ${describe(expected)}`;
    return check(value) ? undefined : `expected ${expected}, got ${describe(value)}`;
  }
  if (Array.isArray(expected)) {
    const fits = expected.some((t) => typeof t === 'string' && JSON_TYPE_CHECKS[t]?.(value) === true);
    return fits ? undefined : `expected one of ${describe(expected)}, got ${describe(value)}`;
  }
  return `unknown schema type ${describe(expected)}`;
}

export interface CallSite {
  messageIndex: number;
  callIndex: number;
  call: unknown;
}

export function* assistantCalls(ex: Example): Generator<CallSite> {
  for (const [messageIndex, message] of messagesOf(ex).entries()) {
    if (roleOf(message) !== 'assistant') continue;
    for (const [callIndex, call] of toolCallsOf(message).entries()) yield { messageIndex, callIndex, call };
  }
}

export const callLabel = (site: CallSite, name?: string): string =>
  `messages[${site.messageIndex}].tool_calls[${site.callIndex}]${name ? ` (${name})` : ''}`;
