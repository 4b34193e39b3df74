/**
 * Python value semantics for the BFCL checker (pure, no I/O).
 *
 * BFCL's checker is Python: it reads possible answers and model outputs with `json.loads`, so `6.0` is a float and
 * `6` an int, and it compares types with `type(x) == int` and values with `==` (where `1 == 1.0 == True`). A plain
 * `JSON.parse` loses the int/float distinction, which changes verdicts (BFCL rejects `[10, 15]` for an array of
 * floats whose possible answer is `[10.0, 15.0]`, and `5.0` for an integer parameter). So:
 *
 * - `parsePyJson` parses JSON keeping float literals apart: a number written with `.` or an exponent becomes a
 *   `PyFloat`; an integer literal stays a plain JS number (an int).
 * - `pyType` names a value's Python type; `pyEquals` is Python's `==` on these values; `pyIn` is `x in list`.
 *
 * `PyFloat` serialises as a plain JSON number (`toJSON`), so results files stay ordinary JSON.
 */
import { parsePyJson as parseLossless, PyFloat as LosslessFloat, PyInt, PyJsonError as LosslessError, type PyJson } from '../../../kernel/pyjson';

/** A Python float (a JSON number written with a fraction or an exponent, or produced by a float conversion). */
export class PyFloat {
  constructor(readonly value: number) {}
  toJSON(): number {
    return this.value;
  }
}

/** A value as Python's `json.loads` would give it, with floats marked. */
export type PyValue = null | boolean | number | string | PyFloat | PyValue[] | { [key: string]: PyValue };

/** Python type names the checker compares (`set` only appears as an expected Java type). */
export type PyType = 'NoneType' | 'bool' | 'int' | 'float' | 'str' | 'list' | 'dict' | 'set';

export const isPyDict = (v: unknown): v is Record<string, PyValue> => typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof PyFloat);

/** `type(v).__name__`. A plain JS number is an int when integral (values from `parsePyJson` always are). */
export function pyType(v: unknown): PyType {
  if (v === null || v === undefined) return 'NoneType';
  if (typeof v === 'boolean') return 'bool';
  if (typeof v === 'number') return Number.isInteger(v) ? 'int' : 'float';
  if (v instanceof PyFloat) return 'float';
  if (typeof v === 'string') return 'str';
  if (Array.isArray(v)) return 'list';
  return 'dict';
}

/** The numeric value of a bool/int/float, or undefined for other types (Python compares these three numerically). */
function numeric(v: unknown): number | undefined {
  if (typeof v === 'boolean') return v ? 1 : 0;
  if (typeof v === 'number') return v;
  if (v instanceof PyFloat) return v.value;
  return undefined;
}

/** Python `a == b` on JSON-like values. */
export function pyEquals(a: unknown, b: unknown): boolean {
  const na = numeric(a);
  const nb = numeric(b);
  if (na !== undefined || nb !== undefined) return na !== undefined && nb !== undefined && na === nb;
  if (a === null || a === undefined || b === null || b === undefined) return (a ?? null) === (b ?? null);
  if (typeof a === 'string' || typeof b === 'string') return a === b;
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    return a.every((x, i) => pyEquals(x, b[i]));
  }
  if (isPyDict(a) && isPyDict(b)) {
    const ka = Object.keys(a);
    if (ka.length !== Object.keys(b).length) return false;
    return ka.every((k) => Object.hasOwn(b, k) && pyEquals(a[k], b[k]));
  }
  return false;
}

/** Python `x in xs` for a list. */
export const pyIn = (x: unknown, xs: readonly unknown[]): boolean => xs.some((y) => pyEquals(x, y));

/** A short Python-like `repr` for error messages. */
export function pyRepr(v: unknown): string {
  if (v === null || v === undefined) return 'None';
  if (typeof v === 'boolean') return v ? 'True' : 'False';
  if (typeof v === 'number') return String(v);
  if (v instanceof PyFloat) return Number.isInteger(v.value) ? `${v.value}.0` : String(v.value);
  if (typeof v === 'string') return `'${v.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
  if (Array.isArray(v)) return `[${v.map(pyRepr).join(', ')}]`;
  return `{${Object.entries(v as Record<string, unknown>).map(([k, x]) => `${pyRepr(k)}: ${pyRepr(x)}`).join(', ')}}`;
}

/** Sets `obj[key] = value` without ever touching the prototype (a `__proto__` key stays an own property). */
export function setOwn(obj: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__') Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
  else obj[key] = value;
}

/** Thrown by `parsePyJson` with the 0-based offset of the problem. */
export class PyJsonError extends Error {
  constructor(message: string, readonly offset: number) {
    super(`${message} at position ${offset}`);
    this.name = 'PyJsonError';
  }
}

/**
 * JSON → PyValue: Python's `json.loads` (src/kernel/pyjson.ts: standard JSON plus `NaN`, `Infinity`, `-Infinity`),
 * float literals as `PyFloat`, integer literals as plain numbers, objects as plain objects.
 */
export function parsePyJson(text: string): PyValue {
  try {
    return fromLossless(parseLossless(text));
  } catch (err) {
    if (err instanceof LosslessError) throw new PyJsonError(err.message, err.offset);
    throw err;
  }
}

function fromLossless(v: PyJson): PyValue {
  if (v instanceof PyInt) return Number(v.value);
  if (v instanceof LosslessFloat) return new PyFloat(v.value);
  if (Array.isArray(v)) return v.map(fromLossless);
  if (v instanceof Map) {
    const out: Record<string, PyValue> = {};
    for (const [k, x] of v) setOwn(out, k, fromLossless(x));
    return out;
  }
  return v;
}

/** Plain JSON value → PyValue: integral numbers become ints, others floats (for values built in code, e.g. tests). */
export function toPyValue(v: unknown): PyValue {
  if (v === null || v === undefined) return null;
  if (typeof v === 'number') return Number.isInteger(v) ? v : new PyFloat(v);
  if (typeof v === 'boolean' || typeof v === 'string' || v instanceof PyFloat) return v;
  if (Array.isArray(v)) return v.map(toPyValue);
  const out: Record<string, PyValue> = {};
  for (const [k, x] of Object.entries(v as Record<string, unknown>)) setOwn(out, k, toPyValue(x));
  return out;
}

/**
 * BFCL's string normalisation before comparing strings: drop spaces and `,./-_*^`, lower-case, and turn single
 * quotes into double quotes (so "April 1, 2024" equals "april 1 2024").
 */
export const standardizeString = (s: string): string => s.replace(/[ ,./\-_*^]/g, '').toLowerCase().replace(/'/g, '"');

/**
 * JSON text of a value, floats written as floats (`PyFloat(3)` → `3.0`), so that `parsePyJson` reads back the same
 * types. `indent` as in `JSON.stringify`. Non-finite floats are written as Python does (`NaN`, `Infinity`).
 */
export function stringifyPyJson(value: unknown, indent = 0): string {
  const pad = (depth: number) => (indent > 0 ? `\n${' '.repeat(indent * depth)}` : '');
  const sep = indent > 0 ? ': ' : ':';
  const go = (v: unknown, depth: number): string | undefined => {
    if (v === undefined || typeof v === 'function') return undefined;
    if (v instanceof PyFloat) {
      if (Number.isNaN(v.value)) return 'NaN';
      if (!Number.isFinite(v.value)) return v.value > 0 ? 'Infinity' : '-Infinity';
      const s = String(v.value);
      return /[.eE]/.test(s) ? s : `${s}.0`;
    }
    if (v === null || typeof v !== 'object') return JSON.stringify(v);
    if (typeof (v as { toJSON?: unknown }).toJSON === 'function') return go((v as { toJSON: () => unknown }).toJSON(), depth);
    if (Array.isArray(v)) {
      if (v.length === 0) return '[]';
      return `[${v.map((x) => `${pad(depth + 1)}${go(x, depth + 1) ?? 'null'}`).join(',')}${pad(depth)}]`;
    }
    const entries = Object.entries(v).flatMap(([k, x]) => {
      const s = go(x, depth + 1);
      return s === undefined ? [] : [`${pad(depth + 1)}${JSON.stringify(k)}${sep}${s}`];
    });
    return entries.length === 0 ? '{}' : `{${entries.join(',')}${pad(depth)}}`;
  };
  return go(value, 0) ?? 'null';
}
