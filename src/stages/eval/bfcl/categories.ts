/**
 * BFCL test categories (pure): which files hold them, how they are scored, in which language.
 *
 * A category `C` is the question file `BFCL_v4_C.json` (+ `possible_answer/BFCL_v4_C.json` for AST-scored ones) of
 * a data folder. Its treatment follows from its name, as in BFCL's eval runner:
 * - a name containing `irrelevance` (`irrelevance`, `live_irrelevance`): correct when the policy makes no call;
 * - else a name containing `relevance` (`live_relevance`): correct when it makes at least one call;
 * - else AST-scored against the possible answers; `parallel` in the name → order-insensitive matching of all calls,
 *   `multiple` → one call among several functions, otherwise one call of the (first) function;
 * - language: `javascript` in the name → JavaScript, `java` → Java, otherwise Python.
 * Multi-turn, memory, web-search, format-sensitivity and agentic categories need BFCL's executable environments and
 * are not supported.
 */
import type { Language } from './languages';

/** A request that cannot be served: unknown or unsupported category, missing data file or folder. */
export class BfclInputError extends Error {
  override readonly name = 'BfclInputError';
}

/** The categories CM2 reports (the single-turn AST suite plus irrelevance). */
export const DEFAULT_CATEGORIES = ['simple_python', 'simple_java', 'simple_javascript', 'multiple', 'parallel', 'parallel_multiple', 'irrelevance'] as const;

export const VERSION_PREFIX = 'BFCL_v4';

export type CategoryKind = 'ast' | 'irrelevance' | 'relevance';

export function categoryKind(category: string): CategoryKind {
  if (category.includes('irrelevance')) return 'irrelevance';
  if (category.includes('relevance')) return 'relevance';
  return 'ast';
}

export function categoryLanguage(category: string): Language {
  if (category.includes('javascript')) return 'javascript';
  if (category.includes('java')) return 'java';
  return 'python';
}

const UNSUPPORTED_PARTS = ['multi_turn', 'memory', 'web_search', 'format_sensitivity', 'agentic'];
const UNSUPPORTED_WORDS = ['exec', 'executable', 'rest', 'sql', 'chatable'];

/** Why a category cannot be evaluated here, or undefined when it can. */
export function unsupportedReason(category: string): string | undefined {
  if (!/^[a-z0-9_]+$/.test(category)) return `'${category}' is not a category name (lower-case letters, digits and _)`;
  const words = category.split('_');
  const hit = UNSUPPORTED_PARTS.find((p) => category.includes(p)) ?? UNSUPPORTED_WORDS.find((w) => words.includes(w));
  return hit ? `'${category}': ${hit} categories need BFCL's executable environments and are not supported` : undefined;
}

export const questionFileName = (category: string) => `${VERSION_PREFIX}_${category}.json`;
export const answerFileName = (category: string) => `possible_answer/${VERSION_PREFIX}_${category}.json`;

/**
 * The categories a data folder can evaluate, given its file names (top level and `possible_answer/`): every
 * supported question file whose category is relevance-scored or has a possible-answer file. Sorted.
 */
export function discoverCategories(questionFiles: readonly string[], answerFiles: readonly string[]): string[] {
  const re = new RegExp(`^${VERSION_PREFIX}_([a-z0-9_]+)\\.json$`);
  const answers = new Set(answerFiles.map((f) => re.exec(f)?.[1]).filter((c): c is string => c !== undefined));
  return questionFiles
    .map((f) => re.exec(f)?.[1])
    .filter((c): c is string => c !== undefined && unsupportedReason(c) === undefined && (categoryKind(c) !== 'ast' || answers.has(c)))
    .sort();
}

/**
 * Parses `--category a,b` (or `all`): a deduplicated list in the given order. `available` (from `discoverCategories`)
 * resolves `all`; names are checked by the loader, which reports missing files.
 */
export function parseCategoryList(spec: string, available: readonly string[]): string[] {
  const names = spec.split(',').map((s) => s.trim()).filter(Boolean);
  if (names.length === 0) throw new BfclInputError('no category given (e.g. --category simple_python,irrelevance, or all)');
  const out: string[] = [];
  for (const n of names) {
    for (const c of n === 'all' ? available : [n]) {
      const why = unsupportedReason(c);
      if (why) throw new BfclInputError(why);
      if (!out.includes(c)) out.push(c);
    }
  }
  return out;
}

/**
 * The category of a BFCL example id: the id without its trailing number (`simple_python_12` → `simple_python`,
 * `live_simple_0-0-0` → `live_simple`, `multi_turn_base_3` → `multi_turn_base`).
 */
export function categoryOfId(id: string): string {
  const m = /^([a-z0-9_]+?)_\d+(?:-\d+)*$/.exec(id);
  if (!m) throw new BfclInputError(`'${id}' is not a BFCL example id (a category and a number, e.g. simple_python_0 or live_simple_0-0-0)`);
  return m[1]!;
}

/**
 * Parses `--ids a,b`: the ids (deduplicated, in the given order) and their categories in order of first appearance.
 */
export function parseIdList(spec: string): { ids: string[]; categories: string[] } {
  const ids = [...new Set(spec.split(',').map((s) => s.trim()).filter(Boolean))];
  if (ids.length === 0) throw new BfclInputError('no id given (e.g. --ids simple_python_0,multi_turn_base_3)');
  const categories: string[] = [];
  for (const id of ids) {
    const c = categoryOfId(id);
    if (!categories.includes(c)) categories.push(c);
  }
  return { ids, categories };
}

/**
 * The examples of one category that `ids` names (all of them when `ids` is undefined), then the first `limit`. An id
 * of this category that the data does not hold is an input error: a typo must not shrink an evaluation silently.
 */
export function selectExamples<T extends { id: string }>(category: string, examples: readonly T[], ids: readonly string[] | undefined, limit: number | undefined, where: string): T[] {
  let out: readonly T[] = examples;
  if (ids !== undefined) {
    const wanted = ids.filter((id) => categoryOfId(id) === category);
    const have = new Set(out.map((e) => e.id));
    const missing = wanted.filter((id) => !have.has(id));
    if (missing.length > 0) throw new BfclInputError(`${where} has no example ${missing.join(', ')} (--ids)`);
    const keep = new Set(wanted);
    out = out.filter((e) => keep.has(e.id));
  }
  return out.slice(0, limit);
}
