/**
 * BFCL's AST checker, reimplemented from its documented behaviour (pure, no I/O).
 *
 * Reference semantics: `bfcl_eval/eval_checker/ast_eval/ast_checker.py` and `eval_runner.py` of ShishirPatil/gorilla
 * (commit 6ea5797, the one `shared/benchmarks/bfcl` comes from). What it decides, in order, for one call:
 *
 * 1. the function name matches (for endpoints that cannot use `.` in tool names, `a.b` is expected as `a_b`);
 * 2. every `required` parameter of the function doc is present;
 * 3. every given parameter exists in the doc AND in the possible answer (else `unexpected_param`);
 * 4. each value passes BFCL's type check and is among the possible answers:
 *    - Java/JavaScript values must be strings and are converted first (./languages.ts);
 *    - Python: an int is accepted for a `float` parameter; otherwise the Python type must match the doc's type — or the
 *      type of the possible answers, which then are variable names / literal values compared exactly ("is_variable");
 *    - arrays/tuples check their element type one level deep (skipped when a possible answer is not a list, e.g. "");
 *    - strings (and strings inside lists and dicts) are compared after `standardizeString`;
 *    - dicts are compared key by key against each possible dict (keys whose options contain "" may be left out);
 *      lists of dicts element by element; other values with Python `==`;
 * 5. every parameter of the possible answer that was left out has "" among its options (the optional marker).
 *
 * Categories: "parallel" in the name → calls matched order-insensitively (greedy, as BFCL: each expected call takes
 * the first unmatched model call that passes); else "multiple" → exactly one call, checked against the expected
 * function's doc; else (simple) exactly one call, checked against the first doc. Relevance categories are decided by
 * whether any call was made (`checkRelevance`).
 *
 * Failures carry a short `reason` (`wrong_func_name`, `missing_required`, `unexpected_param`, `missing_optional`,
 * `type_error:PARAM`, `value_error:PARAM`, `wrong_count`, `no_match`, …), the BFCL `error_type` it corresponds to,
 * and a human-readable `detail`.
 */
import { nestedTypes, typeTable, convertJava, convertJs, type Language } from './languages';
import { isPyDict, pyEquals, pyIn, pyRepr, pyType, PyFloat, standardizeString, type PyType, type PyValue } from './pyValue';

/** A parameter of a BFCL function doc (only the fields the checker reads are typed). */
export interface ParamDoc {
  type: string;
  items?: { type?: string; [k: string]: unknown };
  [k: string]: unknown;
}

/** A BFCL function doc. */
export interface FunctionDoc {
  name: string;
  description?: string;
  parameters: { type?: string; properties: Record<string, ParamDoc>; required?: string[]; [k: string]: unknown };
  [k: string]: unknown;
}

/** One decoded call: `{function_name: {param: value}}` (exactly one key). */
export type DecodedCall = Record<string, Record<string, PyValue>>;

/** One expected call: `{function_name: {param: [possible values...]}}`; `""` among the values marks "may be omitted". */
export type PossibleCall = Record<string, Record<string, PyValue[]>>;

export interface CheckOptions {
  language: Language;
  /** Expect `a.b` as `a_b` (BFCL's `underscore_to_dot` models: OpenAI-style tools, whose names cannot hold dots). */
  underscoreToDot?: boolean;
}

export interface CheckResult {
  valid: boolean;
  /** Short machine-readable reason (absent when valid). */
  reason?: string;
  /** The BFCL `error_type` this failure corresponds to. */
  bfcl?: string;
  /** Human-readable explanation. */
  detail?: string;
  /** For `no_match` (parallel): why each candidate call failed for the unmatched expected call. */
  candidates?: { index: number; reason: string; detail: string }[];
}

const OK: CheckResult = { valid: true };
const fail = (reason: string, bfcl: string, detail: string): CheckResult => ({ valid: false, reason, bfcl, detail });

/** The expected name as the model must write it. */
export function expectedName(name: string, opts: CheckOptions): string {
  return opts.underscoreToDot && name.includes('.') ? name.replace(/\./g, '_') : name;
}

/** The type of the first possible answer that is not the optional marker "" (BFCL's `get_possible_answer_type`). */
function possibleAnswerType(options: readonly PyValue[]): PyType | undefined {
  const first = options.find((o) => o !== '');
  return first === undefined ? undefined : pyType(first);
}

interface TypeCheck {
  valid: boolean;
  isVariable: boolean;
  nested?: boolean;
  detail?: string;
}

/**
 * BFCL's `type_checker`. `isVariable` means "the possible answers are of another type than the doc says" (a variable
 * name or a literal): the value is then compared with plain `==`, without normalisation.
 */
function typeCheck(param: string, value: PyValue, options: readonly PyValue[], expectedDesc: string, expected: PyType, nested: PyType | undefined): TypeCheck {
  const pat = possibleAnswerType(options);
  const isVariable = pat !== undefined && pat !== expected;
  let nestedFailed = false;
  if (pyType(value) === expected) {
    if (nested === undefined) return { valid: true, isVariable };
    for (const option of options) {
      let ok = true;
      if (Array.isArray(option)) {
        for (const item of value as PyValue[]) {
          if (!typeCheck(param, item, option, nested, nested, undefined).valid) {
            ok = false;
            break;
          }
        }
      }
      if (ok) return { valid: true, isVariable };
    }
    nestedFailed = true;
  }
  if (pat !== undefined && pyType(value) === pat) {
    // BFCL returns here even after a failed element check: the result stays invalid (a nested type error).
    if (nestedFailed) {
      return { valid: false, isVariable: true, nested: true, detail: `elements of ${param} are not all of type ${nested}: ${pyRepr(value)}` };
    }
    return { valid: true, isVariable: true };
  }
  return {
    valid: false,
    isVariable: false,
    detail: nestedFailed
      ? `elements of ${param} are not all of type ${nested}: ${pyRepr(value)}`
      : `${param} should be of type ${expectedDesc}, got ${pyType(value)}: ${pyRepr(value)}`,
  };
}

/** Strings normalised, other values as they are (one level: BFCL does not normalise deeper). */
const standardized = (v: PyValue): PyValue => (typeof v === 'string' ? standardizeString(v) : v);

/** Python's iteration of an option in `list_checker`: a list's elements, a string's characters. */
function optionItems(option: PyValue): PyValue[] | undefined {
  if (Array.isArray(option)) return option;
  if (typeof option === 'string') return [...option];
  return undefined;
}

/** Python's `"" in options`: a list holding "", a dict with key "", or any string (the empty string is in every string). */
function containsEmpty(options: PyValue | undefined): boolean {
  if (Array.isArray(options)) return options.includes('');
  if (typeof options === 'string') return true;
  return isPyDict(options) && Object.hasOwn(options, '');
}

function stringCheck(param: string, value: string, options: readonly PyValue[]): CheckResult {
  const allowed = options.filter((o): o is string => typeof o === 'string').map(standardizeString);
  if (allowed.includes(standardizeString(value))) return OK;
  return fail(`value_error:${param}`, 'value_error:string', `${param}: ${pyRepr(value)} is not one of ${pyRepr(options)} (compared after normalisation)`);
}

/** The text a Java/JavaScript list element holds for a number or boolean of the ground truth ('42', 'true'). */
function scalarText(v: PyValue): string | undefined {
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  if (typeof v === 'number') return String(v);
  if (v instanceof PyFloat) return String(v.value);
  return undefined;
}

/**
 * `lenientScalars` (Java/JavaScript): the converted list holds every element as a string (BFCL's `ArrayList<any>`
 * conversion), so a number or boolean of the ground truth is compared by its text. BFCL itself compares `'42'` with
 * `42` and fails every answer there (simple_java_36, simple_java_65); docs/eval.md lists this repair.
 */
function listCheck(param: string, value: PyValue[], options: readonly PyValue[], lenientScalars = false): CheckResult {
  const got = value.map(standardized);
  const allowed = options.map(optionItems).filter((o): o is PyValue[] => o !== undefined).map((o) => o.map(standardized));
  if (pyIn(got, allowed)) return OK;
  if (lenientScalars) {
    const sameText = (g: PyValue, a: PyValue) => {
      const text = typeof g === 'string' ? scalarText(a) : undefined;
      return text !== undefined ? standardizeString(text) === g : pyEquals(g, a);
    };
    if (allowed.some((o) => o.length === got.length && o.every((a, i) => sameText(got[i]!, a)))) return OK;
  }
  return fail(`value_error:${param}`, 'value_error:list/tuple', `${param}: ${pyRepr(value)} is not one of ${pyRepr(options)}`);
}

function dictCheck(param: string, value: Record<string, PyValue>, options: readonly PyValue[]): CheckResult {
  let result = fail(`value_error:${param}`, 'dict_checker:unclear', `${param}: no possible dict to compare with`);
  for (const option of options) {
    if (option === '') continue;
    if (!isPyDict(option)) {
      result = fail(`value_error:${param}`, 'value_error:dict_key', `${param}: ${pyRepr(value)} is not ${pyRepr(option)}`);
      continue;
    }
    let ok = true;
    for (const [key, v] of Object.entries(value)) {
      if (!Object.hasOwn(option, key)) {
        result = fail(`value_error:${param}`, 'value_error:dict_key', `${param}: unexpected key ${pyRepr(key)}`);
        ok = false;
        break;
      }
      const keyOptions = option[key];
      // A list of options; a bare value is one option. (BFCL iterates a bare string's characters, which fails every
      // answer on simple_java_64; docs/eval.md lists this repair.)
      const allowed = (Array.isArray(keyOptions) ? keyOptions : [keyOptions!]).map(standardized);
      if (!pyIn(standardized(v), allowed)) {
        result = fail(`value_error:${param}`, 'value_error:dict_value', `${param}.${key}: ${pyRepr(v)} is not one of ${pyRepr(keyOptions)}`);
        ok = false;
        break;
      }
    }
    for (const [key, keyOptions] of Object.entries(option)) {
      if (!Object.hasOwn(value, key) && !containsEmpty(keyOptions)) {
        result = fail(`value_error:${param}`, 'value_error:dict_key', `${param}: missing key ${pyRepr(key)}`);
        ok = false;
        break;
      }
    }
    if (ok) return OK;
  }
  return result;
}

function listDictCheck(param: string, value: PyValue[], options: readonly PyValue[]): CheckResult {
  let result = fail(`value_error:${param}`, 'list_dict_checker:unclear', `${param}: no possible list to compare with`);
  for (const option of options) {
    const items = optionItems(option) ?? [];
    if (value.length !== items.length) {
      result = fail(`value_error:${param}`, 'value_error:list_dict_count', `${param}: ${value.length} dicts, expected ${items.length}`);
      continue;
    }
    let ok = true;
    for (let k = 0; k < value.length; k++) {
      const item = value[k]!;
      result = isPyDict(item)
        ? dictCheck(param, item, [items[k]!])
        : fail(`value_error:${param}`, 'value_error:dict_value', `${param}[${k}]: ${pyRepr(item)} is not a dict`);
      if (!result.valid) {
        ok = false;
        break;
      }
    }
    if (ok) return OK;
  }
  return result;
}

/** The doc's type of a parameter, as the checker reads it (a missing `type` is a data error, caught at load time). */
const typeOf = (p: ParamDoc | undefined): string => (typeof p?.type === 'string' ? p.type : 'any');

/** BFCL's `simple_function_checker`: one model call against one expected call. */
export function checkCall(doc: FunctionDoc, call: DecodedCall, expected: PossibleCall, opts: CheckOptions): CheckResult {
  const options = Object.values(expected)[0] ?? {};
  const name = expectedName(doc.name, opts);
  if (!isPyDict(call) || !Object.hasOwn(call, name)) {
    const got = isPyDict(call) ? Object.keys(call).join(', ') : pyRepr(call);
    return fail('wrong_func_name', 'simple_function_checker:wrong_func_name', `expected a call to ${name}, got ${got || 'nothing'}`);
  }
  const args = call[name];
  if (!isPyDict(args)) return fail('wrong_output_format', 'ast_decoder:decoder_wrong_output_format', `arguments of ${name} are not a dict: ${pyRepr(args)}`);
  const properties = doc.parameters.properties;
  for (const param of doc.parameters.required ?? []) {
    if (!Object.hasOwn(args, param)) return fail('missing_required', 'simple_function_checker:missing_required', `missing required parameter ${pyRepr(param)}`);
  }
  const table = typeTable(opts.language);
  for (const [param, raw] of Object.entries(args)) {
    if (!Object.hasOwn(properties, param) || !Object.hasOwn(options, param)) {
      return fail('unexpected_param', 'simple_function_checker:unexpected_param', `unexpected parameter ${pyRepr(param)}`);
    }
    const paramOptions = options[param] ?? [];
    const desc = typeOf(properties[param]);
    const expectedType = table[desc];
    if (expectedType === undefined) return fail(`type_error:${param}`, 'type_error:simple', `${param}: unsupported ${opts.language} type ${desc}`);
    const nestedDesc = nestedTypes(opts.language).includes(desc) ? properties[param]?.items?.type : undefined;
    const nestedType = nestedDesc === undefined ? undefined : table[nestedDesc];
    let value: PyValue = raw;
    if (opts.language !== 'python') {
      if (typeof raw !== 'string') {
        const bfcl = opts.language === 'java' ? 'type_error:java' : 'type_error:js';
        return fail(`type_error:${param}`, bfcl, `${param}: expected a ${opts.language} value written as a string, got ${pyType(raw)}: ${pyRepr(raw)}`);
      }
      value = opts.language === 'java' ? convertJava(raw, desc, nestedDesc) : convertJs(raw, desc, nestedDesc);
    } else if (desc === 'float' && pyType(value) === 'int') {
      value = new PyFloat(value as number); // Python's int → float promotion
    }
    const tc = typeCheck(param, value, paramOptions, desc, expectedType, nestedType);
    if (!tc.valid) return fail(`type_error:${param}`, tc.nested ? 'type_error:nested' : 'type_error:simple', tc.detail ?? '');
    if (!tc.isVariable) {
      let special: CheckResult | undefined;
      if (expectedType === 'dict') special = dictCheck(param, value as Record<string, PyValue>, paramOptions);
      else if (expectedType === 'list' && nestedType === 'dict') special = listDictCheck(param, value as PyValue[], paramOptions);
      else if (expectedType === 'str') special = stringCheck(param, value as string, paramOptions);
      else if (expectedType === 'list') special = listCheck(param, value as PyValue[], paramOptions, opts.language !== 'python');
      if (special) {
        if (!special.valid) return special;
        continue;
      }
    }
    if (!pyIn(value, paramOptions)) {
      return fail(`value_error:${param}`, 'value_error:others', `${param}: ${pyRepr(value)} is not one of ${pyRepr(paramOptions)}`);
    }
  }
  for (const [param, paramOptions] of Object.entries(options)) {
    if (!Object.hasOwn(args, param) && !paramOptions.includes('')) {
      return fail('missing_optional', 'simple_function_checker:missing_optional', `parameter ${pyRepr(param)} is needed (the doc does not require it, the answer does)`);
    }
  }
  return OK;
}

/** How a category's calls are checked (by its name, as BFCL's `ast_checker`). */
export type CheckerMode = 'parallel' | 'multiple' | 'simple';
export const checkerMode = (category: string): CheckerMode => (category.includes('parallel') ? 'parallel' : category.includes('multiple') ? 'multiple' : 'simple');

const BFCL_CHECKER: Record<CheckerMode, string> = { simple: 'simple_function_checker', multiple: 'multiple_function_checker', parallel: 'parallel_function_checker_no_order' };

/** Wrong number of calls; none at all is reported as `no_call` (BFCL: `wrong_count`, or `decoder_failed` for a text answer). */
const countFailure = (mode: CheckerMode, got: number, want: number): CheckResult =>
  fail(got === 0 ? 'no_call' : 'wrong_count', `${BFCL_CHECKER[mode]}:wrong_count`, `${got} function call(s), expected ${want}`);

/** The AST verdict of one example: the model's decoded calls against the possible answer. */
export function checkAst(docs: readonly FunctionDoc[], calls: readonly DecodedCall[], expected: readonly PossibleCall[], mode: CheckerMode, opts: CheckOptions): CheckResult {
  const find = (name: string) => docs.find((d) => d.name === name);
  if (mode === 'simple') {
    if (calls.length !== 1) return countFailure(mode, calls.length, 1);
    const doc = docs[0];
    if (!doc || !expected[0]) return fail('bad_example', 'data', 'the example has no function doc or no possible answer');
    return checkCall(doc, calls[0]!, expected[0], opts);
  }
  if (calls.length !== expected.length) return countFailure(mode, calls.length, expected.length);
  if (mode === 'multiple') {
    const name = Object.keys(expected[0] ?? {})[0] ?? '';
    const doc = find(name);
    if (!doc) return fail('bad_example', 'data', `no function doc named ${name}`);
    return checkCall(doc, calls[0]!, expected[0]!, opts);
  }
  const matched = new Set<number>();
  for (const [i, want] of expected.entries()) {
    const name = Object.keys(want)[0] ?? '';
    const doc = find(name);
    if (!doc) return fail('bad_example', 'data', `no function doc named ${name}`);
    const candidates: NonNullable<CheckResult['candidates']> = [];
    let found = false;
    for (const [index, call] of calls.entries()) {
      if (matched.has(index)) continue;
      const r = checkCall(doc, call, want, opts);
      if (r.valid) {
        matched.add(index);
        found = true;
        break;
      }
      candidates.push({ index, reason: r.reason ?? '', detail: r.detail ?? '' });
    }
    if (!found) {
      const why = candidates.map((c) => `call ${c.index}: ${c.reason}`).join('; ');
      return { valid: false, reason: 'no_match', bfcl: 'parallel_function_checker_no_order:cannot_find_match', detail: `no call matches expected call ${i} (${name}): ${why}`, candidates };
    }
  }
  return OK;
}

/**
 * BFCL's `is_empty_output`: a decoded output counts as "no call" unless it is a non-empty list of `{name: {args}}`
 * (`[]` and `[{}]` are empty, and so is anything not in that format).
 */
export function containsCall(decoded: unknown): boolean {
  if (!Array.isArray(decoded)) return false;
  const wellFormed = decoded.every((c) => isPyDict(c) && Object.keys(c).length === 1 && isPyDict(Object.values(c)[0]));
  if (!wellFormed || decoded.length === 0) return false;
  return !(decoded.length === 1 && Object.keys(decoded[0] as object).length === 0);
}

/** Relevance categories: `irrelevance` ones are correct when no call is made, the others (`live_relevance`) when one is. */
export function checkRelevance(decoded: unknown, expectCall: boolean): CheckResult {
  const called = containsCall(decoded);
  if (called === expectCall) return OK;
  return expectCall
    ? fail('no_call', 'relevance_error:decoder_failed', 'a function call was expected, none was made')
    : fail('irrelevance_call', 'irrelevance_error:decoder_success', 'no function call was expected (none of the functions fits), one was made');
}

/** BFCL's `is_function_calling_format_output`: a list of `{name: {args}}` with exactly one key each. */
export function isCallList(decoded: unknown): decoded is DecodedCall[] {
  return Array.isArray(decoded) && decoded.every((c) => isPyDict(c) && Object.keys(c).length === 1 && isPyDict(Object.values(c)[0]));
}

