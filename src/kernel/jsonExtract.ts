/**
 * Extracting one JSON value from free-form model output (spec §3.2, reused by §5.4).
 *
 * Models asked for "JSON only" still wrap it in code fences or add a sentence around it. The reference
 * tries, in order: the raw text; the text with a leading code fence stripped; a slice from the first
 * opening bracket to the last closing one; every fenced block. We do the same, with two refinements:
 * - the slice is tried for both `[...]` and `{...}`, starting with whichever opener comes first in the
 *   text (so `{"Reasoning": "see [1]"...` is not mistaken for the array `[1]`);
 * - callers may say which top-level shape they expect, and candidates of the wrong shape are skipped
 *   instead of being returned.
 *
 * Pure: no I/O.
 */

export type JsonShape = 'array' | 'object';

export type ExtractResult = { ok: true; value: unknown } | { ok: false; error: string };

export interface ExtractOptions {
  /** Skip candidates whose top-level value is not of this shape. */
  expect?: JsonShape;
}

export function extractJson(text: string, opts: ExtractOptions = {}): ExtractResult {
  const errors: string[] = [];
  const seen = new Set<string>();
  for (const candidate of candidates(text)) {
    const trimmed = candidate.trim();
    if (trimmed === '' || seen.has(trimmed)) continue;
    seen.add(trimmed);
    let value: unknown;
    try {
      value = JSON.parse(trimmed);
    } catch (e) {
      errors.push((e as Error).message);
      continue;
    }
    if (opts.expect !== undefined && shapeOf(value) !== opts.expect) {
      errors.push(`expected a JSON ${opts.expect}, found ${shapeOf(value)}`);
      continue;
    }
    return { ok: true, value };
  }
  const what = opts.expect === undefined ? 'JSON value' : `JSON ${opts.expect}`;
  const first = errors[0] === undefined ? 'empty output' : errors[0];
  return { ok: false, error: `no ${what} found in model output (${text.length} chars; first error: ${first})` };
}

/** Candidate substrings, most literal first. Generated lazily: most outputs parse at the first one. */
function* candidates(text: string): Generator<string> {
  yield text;

  const unfenced = stripLeadingFence(text);
  if (unfenced !== undefined) yield unfenced;

  const source = unfenced ?? text;
  const pairs: Array<[string, string]> = [
    ['[', ']'],
    ['{', '}'],
  ];
  // Try the bracket pair whose opener appears first: that is the outermost value.
  pairs.sort((a, b) => firstIndex(source, a[0]) - firstIndex(source, b[0]));
  for (const [open, close] of pairs) {
    const start = source.indexOf(open);
    const end = source.lastIndexOf(close);
    if (start !== -1 && end > start) yield source.slice(start, end + 1);
  }

  for (const m of text.matchAll(/```[A-Za-z0-9_-]*\n([\s\S]*?)```/g)) {
    if (m[1] !== undefined) yield m[1];
  }
}

/**
 * If the (trimmed) text starts with a code fence, return what lies between it and the next fence,
 * without the language tag line (`json`, `JSON`, ...). Otherwise undefined.
 */
function stripLeadingFence(text: string): string | undefined {
  const s = text.trim();
  if (!s.startsWith('```')) return undefined;
  let body = s.slice(3);
  const close = body.indexOf('```');
  if (close !== -1) body = body.slice(0, close);
  const newline = body.indexOf('\n');
  const firstLine = (newline === -1 ? body : body.slice(0, newline)).trim();
  // A first line that is not the start of the JSON itself is a language tag.
  if (firstLine !== '' && !firstLine.startsWith('[') && !firstLine.startsWith('{')) {
    body = newline === -1 ? '' : body.slice(newline + 1);
  }
  return body.trim();
}

function firstIndex(s: string, ch: string): number {
  const i = s.indexOf(ch);
  return i === -1 ? Number.POSITIVE_INFINITY : i;
}

function shapeOf(value: unknown): string {
  if (Array.isArray(value)) return 'array';
  if (value === null) return 'null';
  return typeof value;
}
