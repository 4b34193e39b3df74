/**
 * Language-specific type handling of BFCL's AST checker (pure).
 *
 * In the Java and JavaScript categories every argument is given as a *string* in the language's syntax
 * (`"true"`, `"5L"`, `"new ArrayList<>(Arrays.asList(1, 2))"`, `"{key: 'v'}"`); the checker converts it to a Python
 * value with BFCL's converters before comparing. A string the converter does not recognise stays a string (and
 * then usually fails the type check, unless the possible answer is itself a string: a variable name).
 *
 * The converters below reproduce BFCL's regular-expression based behaviour, quirks included (`bfcl_eval/
 * eval_checker/ast_eval/type_convertor/{java,js}_type_converter.py` at gorilla commit 6ea5797):
 * - Java `String`/`any`/`char` values are kept verbatim: quotes are NOT removed, so `new String[]{"a"}` gives
 *   `['"a"']` while `new ArrayList<>(Arrays.asList("a"))` gives `['a']` (ArrayList strips one character at each end).
 * - Java `Set`, `Hashtable`, `Queue`, `Stack` raise NotImplementedError in BFCL; here the string is kept as is.
 * - JavaScript collections are parsed with non-greedy regexes: nested brackets and braces are not balanced.
 */
import { PyFloat, setOwn, type PyType, type PyValue } from './pyValue';

export type Language = 'python' | 'java' | 'javascript';

/** BFCL's Python type of each parameter type, per language (`PYTHON_TYPE_MAPPING`, `JAVA_TYPE_CONVERSION`, `JS_TYPE_CONVERSION`). */
export const PYTHON_TYPES: Readonly<Record<string, PyType>> = {
  string: 'str', integer: 'int', float: 'float', boolean: 'bool', array: 'list', tuple: 'list', dict: 'dict', any: 'str',
};
export const JAVA_TYPES: Readonly<Record<string, PyType>> = {
  byte: 'int', short: 'int', integer: 'int', float: 'float', double: 'float', long: 'int', boolean: 'bool', char: 'str',
  Array: 'list', ArrayList: 'list', Set: 'set', HashMap: 'dict', Hashtable: 'dict', Queue: 'list', Stack: 'list', String: 'str', any: 'str',
};
export const JS_TYPES: Readonly<Record<string, PyType>> = {
  String: 'str', integer: 'int', float: 'float', Bigint: 'int', Boolean: 'bool', dict: 'dict', array: 'list', any: 'str',
};

export const typeTable = (language: Language): Readonly<Record<string, PyType>> =>
  language === 'java' ? JAVA_TYPES : language === 'javascript' ? JS_TYPES : PYTHON_TYPES;

/** Types whose element type (`items.type`) is checked: Python `array`/`tuple`, Java `Array`/`ArrayList`, JS `array`. */
export const nestedTypes = (language: Language): readonly string[] =>
  language === 'java' ? ['Array', 'ArrayList'] : language === 'javascript' ? ['array'] : ['array', 'tuple'];

// ---------------------------------------------------------------------------------------------------------------
// Python's int() / float() on strings (what BFCL's fallbacks call)

const PY_INT = /^\s*[+-]?\d+(?:_\d+)*\s*$/;
const PY_FLOAT = /^\s*[+-]?(?:(?:\d+(?:_\d+)*)?\.\d+(?:_\d+)*|\d+(?:_\d+)*\.?)(?:[eE][+-]?\d+(?:_\d+)*)?\s*$/;
const PY_FLOAT_SPECIAL = /^\s*[+-]?(?:inf|infinity|nan)\s*$/i;

/** `int(s)`, or undefined where Python raises ValueError. */
export function pyInt(s: string): number | undefined {
  return PY_INT.test(s) ? Number(s.replace(/_/g, '').trim()) : undefined;
}

/** `float(s)`, or undefined where Python raises ValueError. */
export function pyFloat(s: string): PyFloat | undefined {
  if (PY_FLOAT.test(s)) return new PyFloat(Number(s.replace(/_/g, '').trim()));
  if (PY_FLOAT_SPECIAL.test(s)) {
    const t = s.trim().toLowerCase().replace(/^\+/, '');
    return new PyFloat(t.includes('nan') ? NaN : t.startsWith('-') ? -Infinity : Infinity);
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------------------------
// Java

/** A Java literal without type information: boolean, quoted string, long, float, else int/float/verbatim. */
export function parseJavaValue(s: string): PyValue {
  if (s === 'true') return true;
  if (s === 'false') return false;
  if (s.startsWith('"') && s.endsWith('"')) return s.slice(1, -1);
  if (/^-?\d+[lL]$/.test(s)) return Number(s.slice(0, -1));
  if (/^-?\d+(\.\d+)?([eE][+-]?\d+)?[fF]$/.test(s)) return new PyFloat(Number(s.slice(0, -1)));
  return pyInt(s) ?? pyFloat(s) ?? s;
}

/** One element of an ArrayList: chars and Strings lose their first and last character, others are converted. */
function javaListElement(s: string, nested: string | undefined): PyValue {
  if (nested === 'char' || nested === 'String') return s.slice(1, -1);
  return nested ? convertJava(s, nested) : parseJavaValue(s);
}

function parseJavaArrayList(input: string, nested: string | undefined): PyValue {
  const asList = /new\s+ArrayList<\w*>\(Arrays\.asList\((.+?)\)\)/.exec(input);
  if (asList) return asList[1]!.split(',').map((e) => javaListElement(e.trim(), nested));
  const adds = /new\s+ArrayList<\w*>\(\)\s*\{\{\s*(.+?)\s*\}\}/s.exec(input);
  if (adds) return [...adds[1]!.matchAll(/add\((.+?)\)/g)].map((m) => javaListElement(m[1]!.trim(), nested));
  if (/new\s+ArrayList<\w*>\(\)/.test(input)) return [];
  return input;
}

function parseJavaArray(input: string, nested: string | undefined): PyValue {
  const m = /new\s+\w+\[\]\s*\{(.*?)\}/.exec(input);
  if (!m) return input;
  return m[1]!.split(',').map((x) => x.trim()).filter((x) => x !== '').map((x) => (nested ? convertJava(x, nested) : parseJavaValue(x)));
}

function parseJavaHashMap(input: string): PyValue {
  const m = /new\s+HashMap<.*?>\s*\(\)\s*\{\s*\{?\s*(.*?)\s*\}?\s*\}/s.exec(input);
  if (m) {
    const out: Record<string, PyValue> = {};
    const puts = m[1]!;
    if (puts.trim() !== '') for (const p of puts.matchAll(/put\("(.*?)",\s*(.*?)\)/g)) setOwn(out, p[1]!, parseJavaValue(p[2]!.trim()));
    return out;
  }
  if (/new\s+HashMap<.*?>\s*\(\)/.test(input)) return {};
  return input;
}

/** A Java argument string → the Python value BFCL compares (`java_type_converter`). */
export function convertJava(value: string, type: string, nested?: string): PyValue {
  switch (type) {
    case 'byte':
    case 'short':
    case 'integer':
      return /^-?\d+$/.test(value) ? Number(value) : value;
    case 'float':
      return /^-?\d+(\.\d+)?([eE][+-]?\d+)?[fF]$/.test(value) ? new PyFloat(Number(value.slice(0, -1))) : value;
    case 'double':
      return /^-?\d+(\.\d+)?([eE][+-]?\d+)?$/.test(value) ? new PyFloat(Number(value)) : value;
    case 'long':
      return /^-?\d+[lL]$/.test(value) ? Number(value.slice(0, -1)) : value;
    case 'boolean':
      return value === 'true' ? true : value === 'false' ? false : value;
    case 'Array':
      return parseJavaArray(value, nested);
    case 'ArrayList':
      return parseJavaArrayList(value, nested);
    case 'HashMap':
      return parseJavaHashMap(value);
    default:
      // String, any, char (BFCL's char pattern can never match), and the unimplemented Set/Hashtable/Queue/Stack.
      return value;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// JavaScript

/** A JavaScript literal without type information. */
export function parseJsValue(raw: string): PyValue {
  const s = raw.trim();
  if (s === 'true') return true;
  if (s === 'false') return false;
  if ((s.startsWith('"') && s.endsWith('"')) || (s.startsWith("'") && s.endsWith("'"))) return s.slice(1, -1);
  return pyInt(s) ?? pyFloat(s) ?? s;
}

class ConversionError extends Error {}

function parseJsCollection(raw: string, kind: 'array' | 'dict', nested?: string): PyValue {
  const code = raw.trim();
  if (kind === 'array') {
    try {
      const twoD = /^(?:\[\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\]|\bnew\s+Array\(\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\))/.exec(code);
      if (twoD) {
        return [...twoD[0].matchAll(/\[(.*?)\]/g)].map((m, idx) => {
          let inner = m[1]!.trim();
          if (idx === 0 && inner.startsWith('[')) inner = inner.slice(1);
          return inner.split(',').map((e) => parseJsValue(e.trim()));
        });
      }
      const oneD = /^(?:\[(.*?)\]|\bnew\s+Array\((.*?)\))/.exec(code);
      if (!oneD) return code;
      const body = (oneD[1] ?? oneD[2] ?? '').trim();
      const elements = body === '' ? [] : body.split(',');
      if (!nested) return elements.map((e) => parseJsValue(e.trim()));
      return elements.map((e) => {
        const t = e.trim();
        if (!(nested in JS_TYPES)) throw new ConversionError(`unsupported type ${nested}`);
        return convertJs(t, nested, t.startsWith("'") || t.startsWith('"') ? 'String' : undefined);
      });
    } catch (e) {
      if (e instanceof ConversionError || e instanceof RangeError) return code;
      throw e;
    }
  }
  if (code === '{}') return {};
  const m = /^\{(.*?)\}/.exec(code);
  if (!m) return code;
  const out: Record<string, PyValue> = {};
  for (const p of m[1]!.matchAll(/([^:]+):\s*(.*?)(?:,\s*(?=[^,]+:)|$)/g)) {
    const key = stripChars(p[1]!.trim(), `'"`);
    const v = p[2]!.trim();
    let parsed: PyValue;
    if (v.startsWith('[') && v.endsWith(']')) parsed = parseJsCollection(v, 'array');
    else if (v.startsWith('{') && v.endsWith('}')) parsed = parseJsCollection(v, 'dict');
    else parsed = parseJsValue(stripChars(v, `'"`));
    setOwn(out, key, parsed);
  }
  return out;
}

/** Python's `s.strip(chars)`. */
function stripChars(s: string, chars: string): string {
  let a = 0;
  let b = s.length;
  while (a < b && chars.includes(s[a]!)) a++;
  while (b > a && chars.includes(s[b - 1]!)) b--;
  return s.slice(a, b);
}

/** A JavaScript argument string → the Python value BFCL compares (`js_type_converter`). */
export function convertJs(value: string, type: string, nested?: string): PyValue {
  switch (type) {
    case 'String':
      if ((value.startsWith('"') && value.endsWith('"')) || (value.startsWith("'") && value.endsWith("'"))) return value.slice(1, -1);
      return value;
    case 'integer':
      return /^-?\d+$/.test(value) ? Number(value) : value;
    case 'float':
      return /^-?\d+(\.\d+)?$/.test(value) ? new PyFloat(Number(value)) : value;
    case 'Bigint':
      return /^-?\d+n$/.test(value) ? Number(value.slice(0, -1)) : value;
    case 'Boolean':
      return value === 'true' ? true : value === 'false' ? false : value;
    case 'dict':
      return parseJsCollection(value, 'dict', nested);
    case 'array':
      return parseJsCollection(value, 'array', nested);
    default:
      return value; // any
  }
}
