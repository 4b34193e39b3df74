/**
 * Python-faithful JSON values, for the RL tool environment (argument replay, schema checks, the simulator's
 * answers), the checklist's step rendering and the judge.
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
 */
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
  /** The 0-based offset of the problem in the text. */
  constructor(message: string, readonly offset: number) {
    super(message);
  }
}

const NUMBER = /(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?/y;
const ESCAPES: Record<string, string> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };

/** `json.loads(text)` (strict mode, the defaults). Throws `PyJsonError` with Python's position format. */
export function parsePyJson(text: string): PyJson {
  let i = 0;
  const fail = (msg: string, at: number = i): never => {
    const line = text.slice(0, at).split('\n').length;
    const col = at - text.lastIndexOf('\n', at - 1);
    throw new PyJsonError(`${msg}: line ${line} column ${col} (char ${at})`, at);
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
  /** The members of an object or array whose opening bracket is at `i`, read by `member`, up to `close`. */
  const members = (close: string, member: () => void): void => {
    i++;
    ws();
    if (text[i] === close) {
      i++;
      return;
    }
    for (;;) {
      member();
      ws();
      if (text[i] === close) {
        i++;
        return;
      }
      if (text[i] !== ',') fail("Expecting ',' delimiter");
      i++;
      ws();
    }
  };
  const value = (): PyJson => {
    const c = text[i];
    if (c === '"') {
      i++;
      return str();
    }
    if (c === '{') {
      const obj: PyObject = new Map();
      members('}', () => {
        if (text[i] !== '"') fail('Expecting property name enclosed in double quotes');
        i++;
        const key = str();
        ws();
        if (text[i] !== ':') fail("Expecting ':' delimiter");
        i++;
        ws();
        obj.set(key, value()); // a duplicate key keeps its first position and takes the last value, like a dict
      });
      return obj;
    }
    if (c === '[') {
      const arr: PyJson[] = [];
      members(']', () => arr.push(value()));
      return arr;
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

export const isPyObject = (v: PyJson): v is PyObject => v instanceof Map;

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

export const canonical = (v: PyJson): string => pyDumps(v, { sortKeys: true, separators: [',', ':'] });

/** Python's `repr` of a JSON value (for the schema errors' `{expected}` / `{enum}` interpolations). */
export function pyRepr(v: PyJson): string {
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
export const pyStr = (v: PyJson): string => (typeof v === 'string' ? v : pyRepr(v));

/** Python's `==` on JSON values: bool, int and float compare as numbers (`True == 1 == 1.0`). */
export function pyEquals(a: PyJson, b: PyJson): boolean {
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

export function numeric(v: PyJson): bigint | number | undefined {
  if (typeof v === 'boolean') return v ? 1n : 0n;
  if (v instanceof PyInt) return v.value;
  if (v instanceof PyFloat) return v.value;
  return undefined;
}

/** Python's truthiness of a JS value from a parsed schema. */
export const truthy = (v: unknown): boolean =>
  !(v === null || v === undefined || v === false || v === 0 || v === '' || (Array.isArray(v) && v.length === 0) || (isRecord(v) && Object.keys(v).length === 0));

export const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
export const hasOwn = (o: object, k: string): boolean => Object.prototype.hasOwnProperty.call(o, k);

export const pyTypeName = (v: PyJson): string =>
  v === null ? 'NoneType' : typeof v === 'boolean' ? 'bool' : typeof v === 'string' ? 'str' : v instanceof PyInt ? 'int' : v instanceof PyFloat ? 'float' : Array.isArray(v) ? 'list' : 'dict';

