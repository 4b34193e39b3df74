/**
 * BFCL data files and answer files: shapes (zod) and parsing from text (pure; the runner reads the files).
 *
 * - Question files (`BFCL_v4_<category>.json`) are JSON Lines: `{"id", "question": [[{role, content}, ...], ...],
 *   "function": [function docs]}` — `question` is a list of turns, each a list of messages (single-turn categories
 *   have one turn).
 * - Possible-answer files (`possible_answer/BFCL_v4_<category>.json`): `{"id", "ground_truth": [{"func": {"param":
 *   [possible values]}}, ...]}`, aligned with the questions by line order (as BFCL does).
 * - Answer files (`--answers`): `{"id", "result": [{"func": {"param": value}}, ...]}`, one per line; `[]` means no
 *   call. Arguments given as a JSON string (BFCL's raw result files of function-calling models) are decoded.
 *
 * Possible answers and answers are parsed with `parsePyJson`, so float literals keep their type (see ./pyValue.ts).
 * Every error names the file, the 1-based line and the field.
 */
import { z } from 'zod';
import { categoryKind, categoryLanguage } from './categories';
export { BfclInputError } from './categories';
import { nestedTypes, typeTable } from './languages';
import { parsePyJson, PyJsonError, type PyValue } from './pyValue';
import type { FunctionDoc, PossibleCall } from './checker';

export class BfclDataError extends Error {
  constructor(readonly file: string, readonly line: number, readonly field: string, readonly problem: string) {
    super(`${file}:${line}: ${field ? `${field}: ` : ''}${problem}`);
    this.name = 'BfclDataError';
  }
}

const ParamDocSchema = z.looseObject({
  type: z.string().optional(),
  description: z.string().optional(),
  items: z.looseObject({ type: z.string().optional() }).optional(),
});

export const FunctionDocSchema = z.looseObject({
  name: z.string().min(1),
  description: z.string().optional(),
  parameters: z.looseObject({
    type: z.string().optional(),
    properties: z.record(z.string(), ParamDocSchema),
    required: z.array(z.string()).optional(),
  }),
});

const MessageSchema = z.looseObject({ role: z.string().min(1), content: z.string().nullable().transform((c) => c ?? '') });

export const QuestionSchema = z.looseObject({
  id: z.string().min(1),
  question: z.array(z.array(MessageSchema)).min(1),
  function: z.array(FunctionDocSchema),
});

const PossibleCallSchema = z.record(z.string(), z.record(z.string(), z.array(z.unknown())))
  .refine((c) => Object.keys(c).length === 1, 'each expected call is an object with exactly one function name');

export const PossibleAnswerSchema = z.looseObject({
  id: z.string().min(1),
  ground_truth: z.array(PossibleCallSchema),
});

export const AnswerLineSchema = z.looseObject({ id: z.string().min(1), result: z.unknown() });

export interface BfclMessage {
  role: string;
  content: string;
}

/** One example of a category, ready to run and score. */
export interface BfclExample {
  id: string;
  category: string;
  /** Turns of messages; single-turn categories have one. */
  question: BfclMessage[][];
  functions: FunctionDoc[];
  /** Expected calls (AST categories only). */
  groundTruth?: PossibleCall[];
}

/** `a.b[2].c` from a zod issue path. */
function fieldOf(path: readonly PropertyKey[]): string {
  return path.map((p, i) => (typeof p === 'number' ? `[${p}]` : i === 0 ? String(p) : `.${String(p)}`)).join('');
}

/** Non-empty lines with their 1-based numbers. */
function lines(text: string): { line: number; text: string }[] {
  return text.split('\n').map((t, i) => ({ line: i + 1, text: t })).filter((l) => l.text.trim() !== '');
}

function validate<T>(schema: z.ZodType<T>, value: unknown, file: string, line: number): T {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new BfclDataError(file, line, fieldOf(issue.path), issue.message);
  }
  return parsed.data;
}

function json(text: string, file: string, line: number, typed: boolean): unknown {
  try {
    return typed ? parsePyJson(text) : JSON.parse(text);
  } catch (e) {
    const msg = e instanceof PyJsonError || e instanceof SyntaxError ? e.message : String(e);
    throw new BfclDataError(file, line, '', `not valid JSON: ${msg}`);
  }
}

/**
 * The types the checker needs are known to BFCL's type tables (BFCL itself fails with a KeyError on others): in
 * AST categories every parameter has a known `type`, and list types name a known element type.
 */
function checkTypes(doc: z.infer<typeof FunctionDocSchema>, category: string, file: string, line: number, at: string): void {
  const language = categoryLanguage(category);
  const table = typeTable(language);
  for (const [name, p] of Object.entries(doc.parameters.properties)) {
    const field = `${at}.parameters.properties.${name}`;
    if (p.type === undefined) throw new BfclDataError(file, line, `${field}.type`, 'missing (the checker needs every parameter\'s type)');
    if (!(p.type in table)) throw new BfclDataError(file, line, `${field}.type`, `unknown ${language} type '${p.type}' (known: ${Object.keys(table).join(', ')})`);
    if (nestedTypes(language).includes(p.type)) {
      const item = p.items?.type;
      if (item === undefined) throw new BfclDataError(file, line, `${field}.items.type`, `missing (a ${p.type} parameter needs its element type)`);
      if (!(item in table)) throw new BfclDataError(file, line, `${field}.items.type`, `unknown ${language} type '${item}'`);
    }
  }
}

/** Parses a question file. `file` names it in errors. */
export function parseQuestions(text: string, file: string, category: string): z.infer<typeof QuestionSchema>[] {
  const ast = categoryKind(category) === 'ast';
  const seen = new Map<string, number>();
  return lines(text).map(({ line, text: t }) => {
    const q = validate(QuestionSchema, json(t, file, line, false), file, line);
    const before = seen.get(q.id);
    if (before !== undefined) throw new BfclDataError(file, line, 'id', `duplicate id '${q.id}' (first on line ${before})`);
    seen.set(q.id, line);
    if (ast) q.function.forEach((doc, k) => checkTypes(doc, category, file, line, `function[${k}]`));
    return q;
  });
}

/** Parses a possible-answer file. */
export function parsePossibleAnswers(text: string, file: string): z.infer<typeof PossibleAnswerSchema>[] {
  return lines(text).map(({ line, text: t }) => validate(PossibleAnswerSchema, json(t, file, line, true), file, line));
}

/**
 * Joins questions and possible answers into examples. Answers are aligned by position, as BFCL does (its ids may
 * differ in format); the counts must match, and every expected function must be among the example's docs.
 */
export function buildExamples(
  category: string,
  questions: z.infer<typeof QuestionSchema>[],
  answers: z.infer<typeof PossibleAnswerSchema>[] | undefined,
  files: { questions: string; answers?: string },
): BfclExample[] {
  const ast = categoryKind(category) === 'ast';
  if (ast && answers === undefined) throw new BfclDataError(files.answers ?? files.questions, 0, '', 'no possible-answer file for an AST-scored category');
  if (ast && answers!.length !== questions.length) {
    throw new BfclDataError(files.answers ?? '', answers!.length, '', `${answers!.length} possible answers for ${questions.length} questions in ${files.questions}`);
  }
  return questions.map((q, i) => {
    const example: BfclExample = { id: q.id, category, question: q.question, functions: q.function as FunctionDoc[] };
    if (ast) {
      const gt = answers![i]!.ground_truth as PossibleCall[];
      gt.forEach((call, k) => {
        const name = Object.keys(call)[0]!;
        if (!q.function.some((f) => f.name === name)) {
          throw new BfclDataError(files.answers ?? '', i + 1, `ground_truth[${k}]`, `function '${name}' is not among the docs of question ${q.id}`);
        }
      });
      example.groundTruth = gt;
    }
    return example;
  });
}

/** One line of an answers file, with where it came from. */
export interface AnswerEntry {
  id: string;
  line: number;
  /** The decoded result: a list of calls (arguments decoded from JSON strings when given so), or what the file held. */
  result: PyValue;
}

/**
 * Parses an answers JSONL (`{"id", "result"}` per line). Arguments written as a JSON string are decoded (a string
 * that is not valid JSON is an error naming the line and field). Duplicate ids are errors.
 */
export function parseAnswers(text: string, file: string): Map<string, AnswerEntry> {
  const out = new Map<string, AnswerEntry>();
  for (const { line, text: t } of lines(text)) {
    const entry = validate(AnswerLineSchema, json(t, file, line, true), file, line);
    const before = out.get(entry.id);
    if (before) throw new BfclDataError(file, line, 'id', `duplicate id '${entry.id}' (first on line ${before.line})`);
    let result = entry.result as PyValue;
    if (Array.isArray(result)) {
      result = result.map((call, k) => {
        if (typeof call !== 'object' || call === null || Array.isArray(call)) return call;
        const decoded: Record<string, PyValue> = {};
        for (const [name, args] of Object.entries(call as Record<string, PyValue>)) {
          if (typeof args !== 'string') {
            decoded[name] = args;
            continue;
          }
          try {
            decoded[name] = parsePyJson(args);
          } catch (e) {
            throw new BfclDataError(file, line, `result[${k}].${name}`, `arguments string is not valid JSON: ${(e as Error).message}`);
          }
        }
        return decoded;
      });
    }
    out.set(entry.id, { id: entry.id, line, result });
  }
  return out;
}
