/**
 * The RL tool environment (spec §6.3, §8.1, §8.2): what a policy's tool call gets back during a rollout.
 *
 * Per call, in this order (reference `verl/tools/mcp_checklist_tool.py::execute`):
 * 1. **Call errors** — unknown uuid, a tool that is not one of this sample's tools, or arguments that are not a JSON
 *    object → `{"error_tool_call": {"code", "message", "details"}}`, success false (source `unknown_tool` /
 *    `bad_arguments`). The rollout ends on any `error_tool_call` text (§6.2); it checks that text before `success`,
 *    so these end the episode without marking the sample failed, as the reference's rollout-level "tool name not
 *    found" answer does.
 * 2. **Replay** — a recorded reference call of the same tool in the same sample (any position) whose canonical
 *    arguments equal the new ones → the recorded tool message, verbatim (lone surrogates stripped).
 * 3. **Schema check** — required keys, primitive types, extra keys (unless the function has a falsy `strict`;
 *    absent = strict), `enum` membership (Python `in`, so `1 == 1.0 == true`) →
 *    `{"error_tool_call": {"code": "SCHEMA_VALIDATION_FAILED", …, "details": {"errors": […], …}}}`, success true.
 * 4. **Executable tool** (our addition) — when an executable is registered under the name (the demo world's tools,
 *    `demoWorldExecutables`), its result text, success true. A real environment instead of a simulated one.
 * 5. **LLM simulation** — the sample's recorded tool I/O as few-shot, the tool's full schema and the arguments; the
 *    `execution_result` of the answer, re-serialised as Python's `json.dumps(…, ensure_ascii=True)`. An answer that
 *    is still unusable after the simulator role's `maxParseAttempts` → `{"error": <message>}` (not valid JSON, as in
 *    the reference), success false: the rollout ends and the sample is failed (§6.6). Transport errors from the
 *    client are thrown, so Temporal retries the activity; the cache salt is derived from `ctx.salt`, so a retried
 *    activity replays the answers it already paid for. Simulated results are never remembered (no state, §8.2).
 *
 * **Decision: Python JSON semantics (int vs float), §8.1.** The reference compares and validates arguments after
 * `json.loads`, where `1` and `1.0` differ (`{"x":1.0}` does not replay `{"x":1}` and fails an `integer` check).
 * `JSON.parse` erases that difference, so this module carries its own small lossless JSON model (`PyJson`: ints as
 * bigint, floats kept apart, key order kept in Maps) with a parser that follows `json.loads` (also `NaN`,
 * `Infinity`, duplicate keys → last value at the first position) and a serialiser that follows `json.dumps`
 * (`ensure_ascii`, `sort_keys` by code point, separators, `indent`, floats printed like Python's `repr`: `1.0`,
 * `1e-07`, `1e+16`). Lossless input is available when the caller passes `new RawArguments(text)` (the arguments'
 * JSON text; `rawCallArguments(generatedText)` extracts it from `<tool_call>` blocks in the order of
 * `parseToolCalls(...).calls`). A plain parsed object is accepted too and then follows JS semantics (an
 * integral number counts as an int). Recorded reference arguments are JSON strings and are always read losslessly,
 * as are the simulator's answers (so `1.0` in an `execution_result` stays `1.0`). Tool schemas come parsed (JS
 * semantics): only their rendering in the simulator prompt is affected (a schema constant `1.0` prints as `1`).
 *
 * Cost: the index is built once, O(total messages + total tools), without reading any tool's parameters; a call
 * costs O(1) in the number of tools (Map lookups by uuid and name). Per (uuid, tool) the replay table, the schema
 * checker and the rendered schema are built on first use; the few-shot block once per uuid on its first simulation.
 *
 * Sampling (§6.3: temperature 0.6, top_p 0.8, 8000 max tokens): the LLM client only sends what the role config
 * sets, so those defaults live in the config — `withSimulatorDefaults(llmConfig)` fills whichever are unset.
 */
import { zeroUsage, type Usage } from '../../../kernel/roles';
import type { Example } from '../../../kernel/schema';
import { stripLoneSurrogates } from '../../../chat/toolCalls';
import type { LlmClient } from '../../../llm/client';
import { isOnline, type LlmConfig } from '../../../llm/config';
import { withParseRetries } from '../../../llm/roles';
import { DEFAULT_WORLD_SEED, WORLD_TOOL_NAMES, executeTool, toolResultText } from '../../../demo/tools';

// ---------------------------------------------------------------------------------------------------------------
// Python-faithful JSON values

/** A Python `int` (arbitrary precision). */
export class PyInt {
  constructor(readonly value: bigint) {}
}

/** A Python `float`. */
export class PyFloat {
  constructor(readonly value: number) {}
}

/** A JSON value as Python's `json.loads` gives it: int and float apart, objects as insertion-ordered Maps. */
export type PyJson = null | boolean | string | PyInt | PyFloat | PyJson[] | PyObject;
export type PyObject = Map<string, PyJson>;

export class PyJsonError extends Error {
  override readonly name = 'PyJsonError';
}

const NUMBER = /(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?/y;
const ESCAPES: Record<string, string> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };

/** `json.loads(text)` (strict mode, the defaults). Throws `PyJsonError` with Python's position format. */
export function parsePyJson(text: string): PyJson {
  let i = 0;
  const fail = (msg: string, at: number = i): never => {
    const line = text.slice(0, at).split('\n').length;
    const col = at - text.lastIndexOf('\n', at - 1);
    throw new PyJsonError(`${msg}: line ${line} column ${col} (char ${at})`);
  };
  const ws = (): void => {
    while (i < text.length && (text[i] === ' ' || text[i] === '\t' || text[i] === '\n' || text[i] === '\r')) i++;
  };
  const str = (): string => {
    const start = i - 1; // the opening quote
    let out = '';
    let run = i; // start of the current run of plain characters
    for (;;) {
      if (i >= text.length) fail('Unterminated string starting at', start);
      const c = text.charCodeAt(i);
      if (c === 0x22) {
        out += text.slice(run, i);
        i++;
        return out;
      }
      if (c === 0x5c) {
        out += text.slice(run, i);
        const e = text[i + 1];
        if (e === 'u') {
          const hex = text.slice(i + 2, i + 6);
          if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail('Invalid \\uXXXX escape', i + 1);
          out += String.fromCharCode(parseInt(hex, 16));
          i += 6;
        } else if (e !== undefined && ESCAPES[e] !== undefined) {
          out += ESCAPES[e];
          i += 2;
        } else {
          fail(e === undefined ? 'Unterminated string starting at' : 'Invalid \\escape', e === undefined ? start : i);
        }
        run = i;
        continue;
      }
      if (c < 0x20) fail('Invalid control character at', i);
      i++;
    }
  };
  const value = (): PyJson => {
    const c = text[i];
    if (c === '"') {
      i++;
      return str();
    }
    if (c === '{') {
      i++;
      const obj: PyObject = new Map();
      ws();
      if (text[i] === '}') {
        i++;
        return obj;
      }
      for (;;) {
        if (text[i] !== '"') fail('Expecting property name enclosed in double quotes');
        i++;
        const key = str();
        ws();
        if (text[i] !== ':') fail("Expecting ':' delimiter");
        i++;
        ws();
        obj.set(key, value()); // a duplicate key keeps its first position and takes the last value, like a dict
        ws();
        if (text[i] === '}') {
          i++;
          return obj;
        }
        if (text[i] !== ',') fail("Expecting ',' delimiter");
        i++;
        ws();
      }
    }
    if (c === '[') {
      i++;
      const arr: PyJson[] = [];
      ws();
      if (text[i] === ']') {
        i++;
        return arr;
      }
      for (;;) {
        ws();
        arr.push(value());
        ws();
        if (text[i] === ']') {
          i++;
          return arr;
        }
        if (text[i] !== ',') fail("Expecting ',' delimiter");
        i++;
      }
    }
    for (const [word, v] of [['null', null], ['true', true], ['false', false]] as const) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return v;
      }
    }
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (m) {
      i += m[0].length;
      return m[2] !== undefined || m[3] !== undefined ? new PyFloat(Number(m[0])) : new PyInt(BigInt(m[1]!));
    }
    for (const [word, v] of [['NaN', NaN], ['Infinity', Infinity], ['-Infinity', -Infinity]] as const) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return new PyFloat(v);
      }
    }
    return fail('Expecting value');
  };
  ws();
  const v = value();
  ws();
  if (i !== text.length) fail('Extra data');
  return v;
}

/** A JS value (e.g. from `JSON.parse`) as PyJson, with JS semantics: an integral number is an int. */
export function fromJs(v: unknown): PyJson {
  if (v === null || typeof v === 'boolean' || typeof v === 'string') return v;
  if (typeof v === 'number') return Number.isInteger(v) ? new PyInt(BigInt(v)) : new PyFloat(v);
  if (typeof v === 'bigint') return new PyInt(v);
  if (v instanceof PyInt || v instanceof PyFloat) return v;
  if (Array.isArray(v)) return v.map(fromJs);
  if (v instanceof Map) return new Map([...v].map(([k, x]) => [String(k), fromJs(x)]));
  if (typeof v === 'object') {
    const out: PyObject = new Map();
    for (const [k, x] of Object.entries(v)) if (x !== undefined) out.set(k, fromJs(x));
    return out;
  }
  throw new TypeError(`not a JSON value: ${typeof v}`);
}

/** PyJson as a plain JS value (ints become numbers), for executables. */
export function toJs(v: PyJson): unknown {
  if (v instanceof PyInt) return Number(v.value);
  if (v instanceof PyFloat) return v.value;
  if (Array.isArray(v)) return v.map(toJs);
  if (v instanceof Map) return Object.fromEntries([...v].map(([k, x]) => [k, toJs(x)]));
  return v;
}

const isPyObject = (v: PyJson): v is PyObject => v instanceof Map;

/** Shortest round-trip digits and decimal-point position of a finite positive double: x = 0.DIGITS × 10^decpt. */
function shortestDigits(x: number): { digits: string; decpt: number } {
  const [mant = '0', exp] = String(x).split('e');
  const [ip = '0', fp = ''] = mant.split('.');
  let digits = ip + fp;
  let decpt = ip.length + (exp === undefined ? 0 : Number(exp));
  while (digits.length > 1 && digits[0] === '0') {
    digits = digits.slice(1);
    decpt--;
  }
  digits = digits.replace(/0+$/, '');
  if (digits === '') return { digits: '0', decpt: 1 };
  return { digits, decpt };
}

/** Python's `repr(float)` for a finite value (`1.0`, `0.0001`, `1e-05`, `1.5e+16`). */
function floatRepr(x: number): string {
  const sign = x < 0 || Object.is(x, -0) ? '-' : '';
  const { digits, decpt } = shortestDigits(Math.abs(x));
  let body: string;
  if (decpt <= -4 || decpt > 16) {
    const e = decpt - 1;
    body = `${digits[0]}${digits.length > 1 ? `.${digits.slice(1)}` : ''}e${e < 0 ? '-' : '+'}${String(Math.abs(e)).padStart(2, '0')}`;
  } else if (decpt <= 0) {
    body = `0.${'0'.repeat(-decpt)}${digits}`;
  } else if (decpt >= digits.length) {
    body = `${digits}${'0'.repeat(decpt - digits.length)}.0`;
  } else {
    body = `${digits.slice(0, decpt)}.${digits.slice(decpt)}`;
  }
  return sign + body;
}

const JSON_ESCAPES: Record<string, string> = { '\\': '\\\\', '"': '\\"', '\b': '\\b', '\f': '\\f', '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/** A JSON string literal with `ensure_ascii=True`: everything outside space..~ as `\uxxxx` (UTF-16 units). */
function asciiString(s: string): string {
  return `"${s.replace(/[\\"]|[^ -~]/g, (ch) => JSON_ESCAPES[ch] ?? `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`)}"`;
}

/** Python's str ordering (by code point), which differs from JS's UTF-16 order for astral characters. */
function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let k = 0; k < n; k++) {
    if (a.charCodeAt(k) !== b.charCodeAt(k)) return a.codePointAt(k)! - b.codePointAt(k)!;
  }
  return a.length - b.length;
}

export interface PyDumpOptions {
  sortKeys?: boolean;
  /** Python's `indent` (spaces); `0` puts every item on its own line without indentation. */
  indent?: number;
  /** Default: `(", ", ": ")` without indent, `(",", ": ")` with one. */
  separators?: readonly [string, string];
}

/** `json.dumps(value, ensure_ascii=True, …)`. */
export function pyDumps(value: PyJson, opts: PyDumpOptions = {}): string {
  const { indent, sortKeys = false } = opts;
  const [itemSep, keySep] = opts.separators ?? (indent === undefined ? [', ', ': '] : [',', ': ']);
  const wrap = (open: string, items: string[], close: string, level: number): string => {
    if (indent === undefined) return open + items.join(itemSep) + close;
    const inner = `\n${' '.repeat(indent * (level + 1))}`;
    return `${open}${inner}${items.join(itemSep + inner)}\n${' '.repeat(indent * level)}${close}`;
  };
  const rec = (v: PyJson, level: number): string => {
    if (v === null) return 'null';
    if (typeof v === 'boolean') return v ? 'true' : 'false';
    if (typeof v === 'string') return asciiString(v);
    if (v instanceof PyInt) return v.value.toString();
    if (v instanceof PyFloat) {
      if (Number.isNaN(v.value)) return 'NaN';
      if (!Number.isFinite(v.value)) return v.value > 0 ? 'Infinity' : '-Infinity';
      return floatRepr(v.value);
    }
    if (Array.isArray(v)) return v.length === 0 ? '[]' : wrap('[', v.map((x) => rec(x, level + 1)), ']', level);
    if (v.size === 0) return '{}';
    const entries = [...v];
    if (sortKeys) entries.sort((a, b) => compareCodePoints(a[0], b[0]));
    return wrap('{', entries.map(([k, x]) => asciiString(k) + keySep + rec(x, level + 1)), '}', level);
  };
  return rec(value, 0);
}

/**
 * The reference's canonical form of arguments: `json.dumps(json.loads(text), sort_keys=True, ensure_ascii=True,
 * separators=(",", ":"))`. Throws `PyJsonError` on invalid JSON.
 */
export function pyCanonicalJson(text: string): string {
  return canonical(parsePyJson(text));
}

const canonical = (v: PyJson): string => pyDumps(v, { sortKeys: true, separators: [',', ':'] });

/** Python's `repr` of a JSON value (for the schema errors' `{expected}` / `{enum}` interpolations). */
function pyRepr(v: PyJson): string {
  if (v === null) return 'None';
  if (typeof v === 'boolean') return v ? 'True' : 'False';
  if (typeof v === 'string') return strRepr(v);
  if (v instanceof PyInt) return v.value.toString();
  if (v instanceof PyFloat) return Number.isNaN(v.value) ? 'nan' : !Number.isFinite(v.value) ? (v.value > 0 ? 'inf' : '-inf') : floatRepr(v.value);
  if (Array.isArray(v)) return `[${v.map(pyRepr).join(', ')}]`;
  return `{${[...v].map(([k, x]) => `${strRepr(k)}: ${pyRepr(x)}`).join(', ')}}`;
}

function strRepr(s: string): string {
  const q = s.includes("'") && !s.includes('"') ? '"' : "'";
  let body = '';
  for (const ch of s) {
    const code = ch.codePointAt(0)!;
    if (ch === '\\') body += '\\\\';
    else if (ch === '\n') body += '\\n';
    else if (ch === '\r') body += '\\r';
    else if (ch === '\t') body += '\\t';
    else if (ch === q) body += `\\${ch}`;
    else if (code < 0x20 || (code >= 0x7f && code <= 0x9f)) body += `\\x${code.toString(16).padStart(2, '0')}`;
    else body += ch;
  }
  return q + body + q;
}

/** Python's `str(x)`: strings as they are, everything else as `repr`. */
const pyStr = (v: PyJson): string => (typeof v === 'string' ? v : pyRepr(v));

/** Python's `==` on JSON values: bool, int and float compare as numbers (`True == 1 == 1.0`). */
function pyEquals(a: PyJson, b: PyJson): boolean {
  const na = numeric(a);
  const nb = numeric(b);
  if (na !== undefined || nb !== undefined) {
    if (na === undefined || nb === undefined) return false;
    if (typeof na === 'bigint' && typeof nb === 'bigint') return na === nb;
    if (typeof na === 'number' && typeof nb === 'number') return na === nb;
    const [i, f] = (typeof na === 'bigint' ? [na, nb] : [nb, na]) as [bigint, number];
    return Number.isInteger(f) && BigInt(f) === i;
  }
  if (a === null || b === null || typeof a === 'string' || typeof b === 'string') return a === b;
  if (Array.isArray(a) || Array.isArray(b)) return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, k) => pyEquals(x, b[k]!));
  if (isPyObject(a) && isPyObject(b)) return a.size === b.size && [...a].every(([k, x]) => b.has(k) && pyEquals(x, b.get(k)!));
  return false;
}

function numeric(v: PyJson): bigint | number | undefined {
  if (typeof v === 'boolean') return v ? 1n : 0n;
  if (v instanceof PyInt) return v.value;
  if (v instanceof PyFloat) return v.value;
  return undefined;
}

/** Python's truthiness of a JS value from a parsed schema. */
const truthy = (v: unknown): boolean =>
  !(v === null || v === undefined || v === false || v === 0 || v === '' || (Array.isArray(v) && v.length === 0) || (isRecord(v) && Object.keys(v).length === 0));

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const hasOwn = (o: object, k: string): boolean => Object.prototype.hasOwnProperty.call(o, k);

const pyTypeName = (v: PyJson): string =>
  v === null ? 'NoneType' : typeof v === 'boolean' ? 'bool' : typeof v === 'string' ? 'str' : v instanceof PyInt ? 'int' : v instanceof PyFloat ? 'float' : Array.isArray(v) ? 'list' : 'dict';

// ---------------------------------------------------------------------------------------------------------------
// Arguments as they arrive

/**
 * Arguments as JSON text, parsed losslessly (Python semantics: `1.0` stays a float). A class rather than a
 * `{raw}` object so that it can never be confused with real arguments that happen to have a `raw` key.
 */
export class RawArguments {
  constructor(readonly text: string) {}
}

/** What `execute` and `checkArguments` accept: `RawArguments`, or an already parsed JSON value (JS semantics). */
export type ToolArguments = RawArguments | unknown;

function readArguments(args: ToolArguments): { ok: true; value: PyJson } | { ok: false; error: string } {
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

type Checker = (args: PyObject) => string[];

/** The function part of a tool entry (`{type, function:{…}}`, or a bare `{name, …}`). */
const functionOf = (tool: unknown): Record<string, unknown> => {
  if (!isRecord(tool)) return {};
  if (hasOwn(tool, 'function')) return isRecord(tool['function']) ? tool['function'] : {};
  return tool;
};

function compileChecker(tool: unknown): Checker {
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

// ---------------------------------------------------------------------------------------------------------------
// Simulator prompt and answer

/** Our wording of the paper's "Prompt for Tool Simulation" (§6.3). */
export const SIMULATOR_SYSTEM_PROMPT = [
  'You stand in for a software tool: you produce the result the tool would return for a call, learning how the tool behaves from recorded calls.',
  '',
  'You receive:',
  "- the tool's input definition (JSON Schema);",
  '- earlier calls of tools from the same session, each with the result it returned;',
  '- the new call and its arguments.',
  '',
  'How to answer:',
  '1) Take the OUTPUT FORMAT from the recorded results: the same structure, field names, value types and conventions.',
  '2) Stay FACTUALLY CONSISTENT with everything the recorded results already establish.',
  '3) For the new call:',
  '   - apply that format to the new arguments;',
  '   - if the arguments resemble a recorded call, adapt its result to the differences;',
  '   - if they differ a lot, make up a new, plausible result in the same format that agrees with the known facts;',
  '   - where a recorded result has an evident type slip or mistake, you may correct it.',
  '4) If the arguments are invalid or incomplete, return an error shaped like the errors in the recorded results.',
  '',
  'Constraints:',
  '- Behave like the tool itself: no explanations, advice or hints.',
  '- Never say how a call could be fixed or improved.',
  '- Never mention or compare with the recorded calls.',
  '- Errors carry the bare minimum of information, nothing instructive.',
  '',
  'Output:',
  '- First analyse briefly how to produce the result, then give the result itself as a JSON object or array.',
  '- No markdown and no code fences.',
  '- Keep the output structure of the recorded results and their facts.',
  'Format:',
  '{',
  '  "analysis": str,',
  '  "execution_result": JSON object or array',
  '}',
].join('\n');

/** The structured-output schema of the simulator's answer (§6.3). Not OpenAI-strict (open result object). */
export const SIMULATION_JSON_SCHEMA = {
  name: 'tool_execution_response',
  strict: false,
  schema: {
    type: 'object',
    required: ['analysis', 'execution_result'],
    additionalProperties: false,
    properties: {
      analysis: { type: 'string' },
      execution_result: {
        anyOf: [
          { type: 'object', minProperties: 1, additionalProperties: true },
          { type: 'array', items: {} },
        ],
      },
    },
  },
} as const;

/** The reference simulator's sampling (§6.3, §6.8). */
export const SIMULATOR_SAMPLING = { temperature: 0.6, topP: 0.8, maxTokens: 8000 } as const;

/** `config` with the simulator role's unset temperature / top_p / max tokens set to the reference values. */
export function withSimulatorDefaults(config: LlmConfig): LlmConfig {
  const sim = config.roles.simulator;
  return {
    ...config,
    roles: {
      ...config.roles,
      simulator: {
        ...sim,
        temperature: sim.temperature ?? SIMULATOR_SAMPLING.temperature,
        topP: sim.topP ?? SIMULATOR_SAMPLING.topP,
        maxTokens: sim.maxTokens ?? SIMULATOR_SAMPLING.maxTokens,
      },
    },
  };
}

/**
 * The tool text of a simulator answer: `json.dumps(answer["execution_result"], ensure_ascii=True)`. The answer
 * must be a JSON object whose `execution_result` is a non-empty object or an array (the requested schema); a
 * leading code fence is tolerated (servers without schema-guided decoding).
 */
export function parseSimulation(text: string): { ok: true; value: string } | { ok: false; error: string } {
  const clean = stripLoneSurrogates(text);
  let answer: PyJson;
  try {
    answer = parsePyJson(clean);
  } catch (e) {
    const fenced = /^\s*```[A-Za-z]*[ \t]*\n([\s\S]*?)\n?```\s*$/.exec(clean);
    if (!fenced) return { ok: false, error: (e as Error).message };
    try {
      answer = parsePyJson(fenced[1]!);
    } catch (e2) {
      return { ok: false, error: (e2 as Error).message };
    }
  }
  if (!isPyObject(answer)) return { ok: false, error: `the answer is a JSON ${pyTypeName(answer)}, not an object` };
  const result = answer.get('execution_result');
  if (result === undefined) return { ok: false, error: "the answer has no 'execution_result' key" };
  if (!(Array.isArray(result) || (isPyObject(result) && result.size > 0))) {
    return { ok: false, error: `execution_result must be a non-empty object or an array, got ${pyTypeName(result)}` };
  }
  return { ok: true, value: pyDumps(result) };
}

// ---------------------------------------------------------------------------------------------------------------
// The environment

export type ToolSource = 'replay' | 'executable' | 'simulated' | 'schema_error' | 'unknown_tool' | 'bad_arguments' | 'failed';

export interface ToolResult {
  /** The tool message text the policy sees. */
  text: string;
  /** The reference's metrics `success`: false ends the rollout and fails the sample (unless the text is an `error_tool_call`). */
  success: boolean;
  source: ToolSource;
  /** LLM usage of a simulation (summed over parse attempts). */
  usage?: Usage;
}

/** An executable tool: decoded arguments (JS values) → the tool message text. */
export type Executable = (args: Record<string, unknown>) => string;

export interface ToolEnvironmentOptions {
  /** Client for the `simulator` role; without it (or with the role offline) non-executable calls fail. */
  llm?: LlmClient;
  /** Tools executed for real, by name (used after replay and the schema check). */
  executables?: Readonly<Record<string, Executable>>;
}

export interface ExecuteContext {
  /** Unique per call and stable across retries of the activity (e.g. `<rollout id>/<step>/c<k>`). */
  salt: string;
  signal?: AbortSignal;
}

/** The demo world's tools as executables: exactly `toolResultText(executeTool(name, args, worldSeed))`. */
export function demoWorldExecutables(worldSeed: number = DEFAULT_WORLD_SEED): Record<string, Executable> {
  return Object.fromEntries(WORLD_TOOL_NAMES.map((name) => [name, (args: Record<string, unknown>) => toolResultText(executeTool(name, args, worldSeed))]));
}

/** One recorded reference call: arguments as stored (JSON text or object) and the paired tool message. */
interface RecordedCall {
  name: string;
  args: string | Record<string, unknown>;
  response: string;
}

interface ToolEntry {
  /** The OpenAI function tool (a bare `{name, …}` wrapped), as in `extra_info.tools`. */
  tool: Record<string, unknown>;
  /** Built on first use: canonical args → recorded response (first recorded call wins). */
  replay?: Map<string, string>;
  checker?: Checker;
  /** `json.dumps(tool, ensure_ascii=True, indent=0)`, surrogates stripped. */
  schemaText?: string;
}

interface SampleIndex {
  tools: Map<string, ToolEntry>;
  /** Recorded calls by tool name, names in order of first appearance (the reference's few-shot order). */
  calls: Map<string, RecordedCall[]>;
  /** The few-shot block of the simulator prompt, built on first simulation. */
  fewShot?: string;
}

/** Arguments of a recorded call as PyJson, or undefined when they are not valid JSON (then never replayed or shown). */
function recordedArgs(call: RecordedCall): PyJson | undefined {
  const read = readArguments(typeof call.args === 'string' ? new RawArguments(call.args) : call.args);
  return read.ok ? read.value : undefined;
}

/** A tool list entry as an OpenAI function tool with its name, or undefined for entries without a usable name. */
function wrapTool(entry: unknown): { name: string; tool: Record<string, unknown> } | undefined {
  if (!isRecord(entry)) return undefined;
  if (hasOwn(entry, 'function')) {
    const fn = entry['function'];
    return isRecord(fn) && typeof fn['name'] === 'string' ? { name: fn['name'], tool: entry } : undefined;
  }
  return typeof entry['name'] === 'string' ? { name: entry['name'], tool: { type: 'function', function: entry } } : undefined;
}

/** Pair each call of assistant message `i` with a following tool message: by id when both have one, else by position. */
function pairCalls(messages: Example['messages'], i: number): RecordedCall[] {
  const calls = messages[i]!.tool_calls ?? [];
  const following: Example['messages'] = [];
  for (let j = i + 1; j < messages.length && messages[j]!.role === 'tool'; j++) following.push(messages[j]!);
  const byId = new Map<string, string>();
  for (const m of following) if (m.tool_call_id !== undefined && !byId.has(m.tool_call_id)) byId.set(m.tool_call_id, m.content);
  const out: RecordedCall[] = [];
  calls.forEach((call, k) => {
    const response = (call.id !== undefined ? byId.get(call.id) : undefined) ?? following[k]?.content;
    if (response !== undefined) out.push({ name: call.function.name, args: call.function.arguments, response });
  });
  return out;
}

/** `{"error_tool_call": {"code", "message", "details"}}` as the reference writes it (`json.dumps`, ensure_ascii). */
function errorToolCall(code: string, message: string, details: Record<string, PyJson>): string {
  const inner: PyObject = new Map<string, PyJson>([
    ['code', code],
    ['message', message],
    ['details', new Map(Object.entries(details))],
  ]);
  return pyDumps(new Map([['error_tool_call', inner]]));
}

/** The reference's failure text: `{"error": <message>}`, the message unquoted (not necessarily valid JSON). */
const failureText = (message: string): string => `{"error": ${message}}`;

export class ToolEnvironment {
  private readonly samples = new Map<string, SampleIndex>();
  private readonly executables: Map<string, Executable>;
  private readonly llm: LlmClient | undefined;

  constructor(examples: readonly Example[], opts: ToolEnvironmentOptions = {}) {
    this.llm = opts.llm;
    this.executables = new Map(Object.entries(opts.executables ?? {}));
    for (const ex of examples) {
      const tools = new Map<string, ToolEntry>();
      for (const entry of ex.tools) {
        const w = wrapTool(entry);
        if (w) tools.set(w.name, { tool: w.tool }); // a repeated name: the last entry wins, as in the reference's dict
      }
      const calls = new Map<string, RecordedCall[]>();
      ex.messages.forEach((m, i) => {
        if (m.role !== 'assistant' || !m.tool_calls?.length) return;
        for (const c of pairCalls(ex.messages, i)) {
          let list = calls.get(c.name);
          if (!list) calls.set(c.name, (list = []));
          list.push(c);
        }
      });
      this.samples.set(ex.uuid, { tools, calls });
    }
  }

  /** Sizes of the index, for logs. */
  summary(): { samples: number; tools: number; recordedCalls: number } {
    let tools = 0;
    let recordedCalls = 0;
    for (const s of this.samples.values()) {
      tools += s.tools.size;
      for (const list of s.calls.values()) recordedCalls += list.length;
    }
    return { samples: this.samples.size, tools, recordedCalls };
  }

  /** Answer one tool call of a rollout of sample `uuid` (see the module comment for the order of the steps). */
  async execute(uuid: string, name: string, args: ToolArguments, ctx: ExecuteContext): Promise<ToolResult> {
    const sample = this.samples.get(uuid);
    if (!sample) {
      return { text: errorToolCall('INDEX_NOT_FOUND', `original_index ${uuid} not found`, { original_index: uuid }), success: false, source: 'unknown_tool' };
    }
    const entry = sample.tools.get(name);
    if (!entry) {
      const text = errorToolCall('TOOL_NOT_AVAILABLE', `tool ${name} not available for original_index ${uuid}`, { tool: name, original_index: uuid });
      return { text, success: false, source: 'unknown_tool' };
    }
    const read = readArguments(args);
    if (!read.ok || !isPyObject(read.value)) {
      const type = read.ok ? pyTypeName(read.value) : 'str';
      const text = errorToolCall('INVALID_PARAMETERS', "'parameters' is missing, empty, or not a JSON object.", { tool: name, parameters_type: type });
      return { text, success: false, source: 'bad_arguments' };
    }
    const params = read.value;

    const replayed = this.replayTable(sample, entry, name).get(canonical(params));
    if (replayed !== undefined) return { text: stripLoneSurrogates(replayed), success: true, source: 'replay' };

    const errors = (entry.checker ??= compileChecker(entry.tool))(params);
    if (errors.length > 0) {
      const text = errorToolCall('SCHEMA_VALIDATION_FAILED', 'parameters do not conform to the tool schema', { errors, tool: name, original_index: uuid });
      return { text, success: true, source: 'schema_error' };
    }

    const executable = this.executables.get(name);
    if (executable) {
      try {
        return { text: executable(toJs(params) as Record<string, unknown>), success: true, source: 'executable' };
      } catch (e) {
        return { text: failureText(`executable tool ${name} threw: ${(e as Error).message}`), success: false, source: 'failed' };
      }
    }
    return this.simulate(sample, entry, name, params, ctx);
  }

  private replayTable(sample: SampleIndex, entry: ToolEntry, name: string): Map<string, string> {
    if (entry.replay) return entry.replay;
    const table = new Map<string, string>();
    for (const call of sample.calls.get(name) ?? []) {
      const args = recordedArgs(call);
      if (args === undefined) continue;
      const key = canonical(args);
      if (!table.has(key)) table.set(key, call.response);
    }
    return (entry.replay = table);
  }

  private async simulate(sample: SampleIndex, entry: ToolEntry, name: string, params: PyObject, ctx: ExecuteContext): Promise<ToolResult> {
    const llm = this.llm;
    if (!llm || !isOnline(llm.roleConfig('simulator'))) {
      const message = `tool ${name} has no executable implementation and the simulator LLM role is offline (no baseUrl configured)`;
      return { text: failureText(message), success: false, source: 'failed', usage: zeroUsage() };
    }
    const user = stripLoneSurrogates(
      `${this.fewShot(sample)}\n\n` +
        `Current tool name: ${name}\n` +
        `Current tool input schema (JSON Schema):\n${(entry.schemaText ??= stripLoneSurrogates(pyDumps(fromJs(entry.tool), { indent: 0 })))}\n` +
        `Current arguments (JSON):\n${pyDumps(params, { indent: 0 })}\n` +
        'Generate tool execution result in JSON format.',
    );
    const outcome = await withParseRetries(
      llm,
      llm.roleConfig('simulator').maxParseAttempts,
      {
        role: 'simulator',
        messages: [
          { role: 'system', content: SIMULATOR_SYSTEM_PROMPT },
          { role: 'user', content: user },
        ],
        jsonSchema: SIMULATION_JSON_SCHEMA,
        cacheSalt: `tool-sim/${ctx.salt}`,
        ...(ctx.signal ? { signal: ctx.signal } : {}),
      },
      parseSimulation,
    );
    if (outcome.ok) return { text: outcome.value, success: true, source: 'simulated', usage: outcome.usage };
    return { text: failureText(outcome.reason), success: false, source: 'failed', usage: outcome.usage };
  }

  /** Every recorded call of the sample as a few-shot block (all tools, grouped by tool in order of first use). */
  private fewShot(sample: SampleIndex): string {
    if (sample.fewShot !== undefined) return sample.fewShot;
    const lines = ['Previous tool calls and results (few-shot):'];
    for (const [name, list] of sample.calls) {
      for (const call of list) {
        const args = recordedArgs(call);
        if (args === undefined) continue;
        lines.push(
          `Tool name:\n${stripLoneSurrogates(name)}\nTool arguments:\n${pyDumps(args, { indent: 0 })}\nTool execution result:\n${stripLoneSurrogates(call.response)}\n`,
        );
      }
    }
    return (sample.fewShot = lines.join('\n'));
  }
}
