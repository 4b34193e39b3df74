/** Small helpers of checklist validation (validate.ts): values and paths described, zod issues as messages. */
import type { z } from 'zod';
import { Message } from '../../kernel/schema';

/** One problem of a checklist (validate.ts): a machine-readable `code` and where it is. */
export interface Violation {
  severity: 'error' | 'warning';
  /** Machine-readable rule name, e.g. `weight_sum`, `evidence_snippet`, `structure`. */
  code: string;
  /** Checklist variant (stored form only). */
  variant?: number;
  turn?: number;
  /** Item id. */
  item?: string;
  /** Path inside the item (`evidence[1].step`) or the block (`weight.C2`, `dependence.C3`, `turn`). */
  field?: string;
  message: string;
}

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export const isNonNegInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;

export const isNonEmptyString = (v: unknown): v is string => typeof v === 'string' && v.length > 0;

/** A short JSON rendering of a value for messages. */
export function describe(v: unknown, max = 60): string {
  if (v === undefined) return 'undefined';
  let s: string;
  try {
    s = JSON.stringify(v) ?? String(v);
  } catch {
    s = String(v);
  }
  return s.length > max ? `${s.slice(0, max - 3)}...` : s;
}

export function typeName(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  return typeof v;
}

export const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;

/** A path as a JS-like accessor: `evidence[1].step`, `dependence.C3`, `weight["my id"]`. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else {
      const name = String(key);
      out += IDENTIFIER.test(name) ? (out ? `.${name}` : name) : `[${JSON.stringify(name)}]`;
    }
  }
  return out;
}

export function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let cur = root;
  for (const key of path) {
    if (Array.isArray(cur) && typeof key === 'number') cur = cur[key];
    else if (isPlainObject(cur) && typeof key === 'string' && Object.hasOwn(cur, key)) cur = cur[key];
    else return undefined;
  }
  return cur;
}

export const quoteList = (values: readonly unknown[]): string => values.map((v) => JSON.stringify(v)).join(', ');

/** A zod issue in words, naming the allowed values of enums. */
export function issueMessage(issue: z.core.$ZodIssue, value: unknown): string {
  switch (issue.code) {
    case 'invalid_type':
    {
      const expected = issue.expected === 'record' ? 'object' : issue.expected === 'int' ? 'an integer' : issue.expected;
      if (value === undefined) return `missing (expected ${expected})`;
      return `expected ${expected}, got ${value === null ? 'null' : `${typeName(value)} ${describe(value)}`}`;
    }
    case 'invalid_value':
      return `must be one of ${quoteList(issue.values)}; got ${describe(value)}`;
    case 'too_small':
      if (issue.origin === 'string' && Number(issue.minimum) === 1) return 'must be a non-empty string';
      if (issue.origin === 'array') return `must have at least ${issue.minimum} entr${Number(issue.minimum) === 1 ? 'y' : 'ies'}`;
      return `must be ${issue.inclusive ? '>=' : '>'} ${issue.minimum}; got ${describe(value)}`;
    case 'invalid_union':
      if ('options' in issue && Array.isArray(issue.options)) return `must be one of ${quoteList(issue.options)}; got ${describe(value)}`;
      return issue.message;
    default:
      return issue.message;
  }
}

/**
 * A zod issue of a checklist (annotator form) as a violation: the turn is the block's `turn` when it is valid (else
 * its position), the item is the item's id when it has one (else the field names its position).
 */
export function structureViolation(issue: z.core.$ZodIssue, raw: unknown): Violation {
  const path = issue.path;
  const message = issueMessage(issue, valueAt(raw, path));
  if (path.length === 0) return { severity: 'error', code: 'structure', message: `the checklist must be a JSON array of turn blocks: ${message}` };
  const [blockIndex, ...rest] = path;
  const block = valueAt(raw, [blockIndex as PropertyKey]);
  const turn = isPlainObject(block) && isNonNegInt(block.turn) ? block.turn : typeof blockIndex === 'number' ? blockIndex : undefined;
  const base: Violation = { severity: 'error', code: 'structure', ...(turn !== undefined ? { turn } : {}), message };
  if (rest.length === 0) return { ...base, message: `a turn block must be an object: ${message}` };
  return { ...base, ...itemPath(block, rest, 'checklist') };
}

/** Item id and field of a path inside a block (or a stored turn, whose items sit at `[k, ...]`). */
export function itemPath(container: unknown, rest: readonly PropertyKey[], itemsKey?: string): { item?: string; field?: string } {
  const inItems = itemsKey === undefined ? typeof rest[0] === 'number' : rest[0] === itemsKey && typeof rest[1] === 'number';
  if (!inItems) return { field: formatPath(rest) };
  const head = itemsKey === undefined ? 1 : 2;
  const rawItem = valueAt(container, rest.slice(0, head));
  const id = isPlainObject(rawItem) && isNonEmptyString(rawItem.id) ? rawItem.id : undefined;
  if (id === undefined || rest.length === head) return { field: formatPath(rest) };
  return { item: id, field: formatPath(rest.slice(head)) };
}

/** Messages coerced to the Message shape (a malformed entry becomes an empty message with its role kept). */
export function safeMessages(example: unknown): Message[] {
  const raw = isPlainObject(example) && Array.isArray(example.messages) ? example.messages : [];
  return raw.map((m) => {
    const parsed = Message.safeParse(m);
    if (parsed.success) return parsed.data;
    return { role: isPlainObject(m) && typeof m.role === 'string' ? m.role : '', content: isPlainObject(m) && typeof m.content === 'string' ? m.content : '' };
  });
}
