/**
 * The reference answer of an example (pure): for every expected call, the first listed possible value of each
 * parameter (a parameter whose first value is the optional marker "" is left out), written as the category's
 * language needs it — a Python value, or for Java/JavaScript a string in that language's syntax that BFCL's
 * converters turn back into the value. Used to check the checker (every example's own reference must score as
 * correct) and as a sanity policy.
 *
 * Dict parameters' possible answers hold, per key, a list of possible values: the reference takes the first of each
 * (one level deep, as the checker compares). Java `Array` elements of type String are written without quotes and
 * `ArrayList` ones with, because BFCL's converter keeps the quotes of the former and strips them from the latter.
 */
import { categoryKind, categoryLanguage } from './categories';
import type { FunctionDoc, ParamDoc, PossibleCall } from './checker';
import type { BfclExample } from './data';
import type { Language } from './languages';
import { isPyDict, PyFloat, setOwn, type PyValue } from './pyValue';

/** First listed value of a dict's per-key options, keys whose first value is "" left out. */
function firstOfDict(options: Record<string, PyValue>): Record<string, PyValue> {
  const out: Record<string, PyValue> = {};
  for (const [k, v] of Object.entries(options)) {
    const first = Array.isArray(v) ? v[0] : v;
    if (first !== '' && first !== undefined) setOwn(out, k, first);
  }
  return out;
}

const isDictType = (language: Language, type: string) => (language === 'java' ? type === 'HashMap' || type === 'Hashtable' : type === 'dict');

/** The Python value of a parameter from its first option (dicts and lists of dicts unwrapped one level). */
function pythonValue(doc: ParamDoc | undefined, first: PyValue, language: Language): PyValue {
  const type = doc?.type ?? 'any';
  if (isDictType(language, type) && isPyDict(first)) return firstOfDict(first);
  if ((type === 'array' || type === 'tuple') && doc?.items?.type === 'dict' && Array.isArray(first)) return first.map((d) => (isPyDict(d) ? firstOfDict(d) : d));
  return first;
}

const num = (v: PyValue): number | undefined => (typeof v === 'number' ? v : v instanceof PyFloat ? v.value : undefined);

/** A float written with a fraction, as Java/JS source would (`3` → `3.0`). */
const floatText = (n: number) => (Number.isInteger(n) ? `${n}.0` : String(n));

/** A Java scalar of a known type, as source text BFCL's converter reads back. */
function javaScalar(v: PyValue, type: string): string {
  const n = num(v);
  if (typeof v === 'string') return v;
  if (typeof v === 'boolean') return String(v);
  if (n !== undefined) {
    if (type === 'long') return `${n}L`;
    if (type === 'float') return `${floatText(n)}f`;
    if (type === 'double' || v instanceof PyFloat) return floatText(n);
    return String(n);
  }
  return JSON.stringify(v);
}

/** A Java value for `parse_java_value` (HashMap values, untyped list elements). */
function javaUntyped(v: PyValue): string {
  if (typeof v === 'string') return JSON.stringify(v);
  if (v instanceof PyFloat) return floatText(v.value);
  return String(v);
}

const JAVA_ELEMENT: Record<string, string> = { integer: 'int', long: 'long', short: 'short', byte: 'byte', float: 'float', double: 'double', boolean: 'boolean', char: 'char', String: 'String' };

function javaValue(doc: ParamDoc | undefined, value: PyValue): string {
  const type = doc?.type ?? 'any';
  const items = doc?.items?.type;
  if (typeof value === 'string') return value; // a variable name or a string literal (Java strings are unquoted)
  if (type === 'Array' && Array.isArray(value)) {
    return `new ${JAVA_ELEMENT[items ?? ''] ?? 'Object'}[]{${value.map((e) => (items ? javaScalar(e, items) : javaUntyped(e))).join(', ')}}`;
  }
  if (type === 'ArrayList' && Array.isArray(value)) {
    if (value.length === 0) return 'new ArrayList<>()';
    const element = (e: PyValue) => (items === 'String' || items === 'char' ? `"${String(e)}"` : items ? javaScalar(e, items) : javaUntyped(e));
    return `new ArrayList<>(Arrays.asList(${value.map(element).join(', ')}))`;
  }
  if (type === 'HashMap' && isPyDict(value)) {
    const puts = Object.entries(value).map(([k, v]) => `put("${k}", ${javaUntyped(v)});`).join(' ');
    return puts ? `new HashMap<String, Object>() {{ ${puts} }}` : 'new HashMap<>()';
  }
  return javaScalar(value, type);
}

/** A JavaScript literal for `parse_js_value` (array elements, dict values). */
function jsLiteral(v: PyValue): string {
  if (typeof v === 'string') return JSON.stringify(v);
  if (v instanceof PyFloat) return floatText(v.value);
  if (Array.isArray(v)) return `[${v.map(jsLiteral).join(', ')}]`;
  if (isPyDict(v)) return `{${Object.entries(v).map(([k, x]) => `${k}: ${jsLiteral(x)}`).join(', ')}}`;
  return String(v);
}

function jsValue(doc: ParamDoc | undefined, value: PyValue): string {
  const type = doc?.type ?? 'any';
  if (typeof value === 'string') return value;
  if (type === 'array' && Array.isArray(value)) return `[${value.map(jsLiteral).join(', ')}]`;
  if (type === 'dict' && isPyDict(value)) return jsLiteral(value);
  const n = num(value);
  if (type === 'Bigint' && n !== undefined) return `${n}n`;
  if (type === 'float' && n !== undefined) return floatText(n);
  if (n !== undefined) return String(n);
  if (typeof value === 'boolean') return String(value);
  return jsLiteral(value);
}

/** The reference call for one expected call, written for `language`. */
export function referenceCall(doc: FunctionDoc | undefined, expected: PossibleCall, language: Language): Record<string, Record<string, PyValue>> {
  const [name, options] = Object.entries(expected)[0]!;
  const args: Record<string, PyValue> = {};
  const required = doc?.parameters.required ?? [];
  for (const [param, values] of Object.entries(options)) {
    const pdoc = doc?.parameters.properties[param];
    // Two data slips of BFCL are resolved the way the checker accepts: an optional parameter the function does not
    // have is left out, and a required parameter whose first option is "" takes its first real value.
    if (!pdoc && values.includes('')) continue;
    const first = required.includes(param) ? values.find((v) => v !== '') : values[0];
    if (first === '' || first === undefined) continue;
    const value = pythonValue(pdoc, first as PyValue, language);
    setOwn(args, param, language === 'java' ? javaValue(pdoc, value) : language === 'javascript' ? jsValue(pdoc, value) : value);
  }
  return { [name]: args };
}

/** The reference calls of an example: its expected calls with first listed values; `[]` for relevance categories. */
export function referenceCalls(example: BfclExample): Record<string, Record<string, PyValue>>[] {
  if (categoryKind(example.category) === 'irrelevance') return [];
  if (categoryKind(example.category) === 'relevance') {
    const doc = example.functions[0];
    return doc ? [{ [doc.name]: {} }] : [];
  }
  const language = categoryLanguage(example.category);
  return (example.groundTruth ?? []).map((call) => referenceCall(example.functions.find((f) => f.name === Object.keys(call)[0]), call, language));
}
