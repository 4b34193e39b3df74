/**
 * Tool-call arguments as they arrive from a policy (lossless JSON text or a parsed value) and the reference's schema
 * check of them (`_validate_parameters_against_schema`, spec §6.3 step 3).
 */
import { fromJs, hasOwn, isPyObject, isRecord, parsePyJson, pyDumps, pyEquals, PyFloat, PyInt, type PyJson, type PyObject, pyStr, truthy } from '../../../kernel/pyjson';

/**
 * Arguments as JSON text, parsed losslessly (Python semantics: `1.0` stays a float). A class rather than a
 * `{raw}` object so that it can never be confused with real arguments that happen to have a `raw` key.
 */
export class RawArguments {
  constructor(readonly text: string) {}
}

/** What `execute` and `checkArguments` accept: `RawArguments`, or an already parsed JSON value (JS semantics). */
export type ToolArguments = RawArguments | unknown;

export function readArguments(args: ToolArguments): { ok: true; value: PyJson } | { ok: false; error: string } {
  try {
    return { ok: true, value: args instanceof RawArguments ? parsePyJson(args.text) : fromJs(args ?? null) };
  } catch (e) {
    return { ok: false, error: (e as Error).message };
  }
}

const TOOL_CALL_BLOCK = /\n<tool_call>\n([\s\S]*?)\n<\/tool_call>/g;

/**
 * The raw arguments of every well-formed call in a generated text, in the order of `parseToolCalls(text).calls`
 * (the same block regex, `parameters` before `arguments`, a JSON-string argument decoded). Aligned with those calls
 * whenever that parse reported no errors, which is the only case in which calls are executed (§6.2).
 */
export function rawCallArguments(text: string): RawArguments[] {
  const out: RawArguments[] = [];
  for (const m of text.matchAll(TOOL_CALL_BLOCK)) {
    let block: PyJson;
    try {
      block = parsePyJson(m[1] ?? '');
    } catch {
      continue;
    }
    for (const item of Array.isArray(block) ? block : [block]) {
      if (!isPyObject(item)) continue;
      const name = item.get('name');
      if (typeof name !== 'string' || name === '') continue;
      const raw = item.get('parameters') ?? item.get('arguments');
      if (typeof raw === 'string') {
        try {
          if (isPyObject(parsePyJson(raw))) out.push(new RawArguments(raw));
        } catch {
          // not an object: parseToolCalls reports it
        }
      } else if (raw !== undefined && isPyObject(raw)) {
        out.push(new RawArguments(pyDumps(raw)));
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Schema check (reference `_validate_parameters_against_schema`)

export type Checker = (args: PyObject) => string[];

/** The function part of a tool entry (`{type, function:{…}}`, or a bare `{name, …}`). */
const functionOf = (tool: unknown): Record<string, unknown> => {
  if (!isRecord(tool)) return {};
  if (hasOwn(tool, 'function')) return isRecord(tool['function']) ? tool['function'] : {};
  return tool;
};

export function compileChecker(tool: unknown): Checker {
  const fn = functionOf(tool);
  const rawParams = fn['parameters'];
  const params = isRecord(rawParams) ? rawParams : {};
  const rawProperties = params['properties'];
  const properties = isRecord(rawProperties) ? rawProperties : {};
  const required = Array.isArray(params['required']) ? params['required'].filter((k): k is string => typeof k === 'string') : [];
  const strict = truthy(hasOwn(fn, 'strict') && fn['strict'] !== undefined ? fn['strict'] : true);
  // Per property: its declared type (undefined/null = unchecked) and enum, both as PyJson for Python comparisons.
  const props = new Map<string, { type: unknown; enum?: PyJson }>();
  for (const [k, p] of Object.entries(properties)) {
    const prop = isRecord(p) ? p : {};
    props.set(k, { type: prop['type'], ...(hasOwn(prop, 'enum') ? { enum: safeFromJs(prop['enum']) } : {}) });
  }
  return (args) => {
    const errors: string[] = [];
    for (const key of required) if (!args.has(key)) errors.push(`missing required field: ${key}`);
    for (const [key, value] of args) {
      const prop = props.get(key);
      if (prop === undefined) {
        if (strict) errors.push(`unexpected field not allowed: ${key}`);
        continue;
      }
      if (prop.type !== undefined && prop.type !== null && !matchesType(value, prop.type)) {
        errors.push(`field '${key}' type mismatch: expected ${pyStr(safeFromJs(prop.type))}`);
      }
      if ('enum' in prop && !inEnum(value, prop.enum!)) errors.push(`field '${key}' not in enum: ${pyStr(prop.enum!)}`);
    }
    return errors;
  };
}

function safeFromJs(v: unknown): PyJson {
  try {
    return fromJs(v);
  } catch {
    return null;
  }
}

function matchesType(value: PyJson, expected: unknown): boolean {
  if (Array.isArray(expected)) return expected.some((t) => matchesType(value, t));
  switch (expected) {
    case 'string':
      return typeof value === 'string';
    case 'number':
      return value instanceof PyInt || value instanceof PyFloat;
    case 'integer':
      return value instanceof PyInt;
    case 'boolean':
      return typeof value === 'boolean';
    case 'null':
      return value === null;
    case 'object':
      return value instanceof Map;
    case 'array':
      return Array.isArray(value);
    default:
      return true; // unknown type words pass
  }
}

/** Python's `value in enum_values`; a TypeError there (enum not a container, unhashable key) counts as "not in". */
function inEnum(value: PyJson, values: PyJson): boolean {
  if (Array.isArray(values)) return values.some((e) => pyEquals(value, e));
  if (typeof values === 'string') return typeof value === 'string' && values.includes(value);
  if (isPyObject(values)) return typeof value === 'string' && values.has(value);
  return false;
}

/**
 * The reference's schema check of arguments against a tool (OpenAI function tool, or a bare `{name, …}`). Returns
 * the error messages, empty when the arguments conform.
 */
export function checkArguments(tool: unknown, args: ToolArguments): string[] {
  const read = readArguments(args);
  if (!read.ok || !isPyObject(read.value)) return ['parameters must be a JSON object'];
  return compileChecker(tool)(read.value);
}

