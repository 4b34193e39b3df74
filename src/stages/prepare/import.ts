/**
 * Importers: turn raw dialogue files into `Example`s (spec §1.2–1.3).
 *
 * Two source layouts are accepted and meet in one normaliser (`normaliseRow`):
 *  - OpenAI-chat JSONL (or a JSON array): `{uuid?, messages, tools}`; tool-call `arguments` is a JSON string or an
 *    object; `content: null` is allowed on pure tool-call turns.
 *  - The Nemotron parquet layout: `uuid`, `messages` (list of `{role, content, tool_calls}`), `metadata` (a JSON
 *    *string* whose `tools` key is the candidate tool list) plus label columns (`category`, `generator`, ...).
 *
 * The importer only rejects rows that are not a dialogue at all (see schema.ts); anything semantic is left to the
 * rule filters so that it is reported with a reason code. Bad rows never throw: they come back as `ImportError`s
 * naming file, line (1-based, JSONL) or row (0-based, parquet / JSON array) and the failing field path.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { basename, extname } from 'node:path';
import { Example, type ImportError, type RowOrigin } from '../../kernel/schema';

export interface ImportResult {
  examples: Example[];
  errors: ImportError[];
}

export type NormaliseResult = { ok: true; example: Example } | { ok: false; error: ImportError };

/** Keys of a raw row that are consumed by the normaliser; other scalar keys are kept as provenance labels in `meta`. */
const CONSUMED_KEYS = new Set(['uuid', 'messages', 'tools', 'metadata', 'meta']);

/**
 * A stable uuid for a row that has none, so that re-importing the same file gives the same ids (resume, caching
 * and S3 keys all hang off the uuid). Derived from the file's *base name* and the row position, hashed with
 * SHA-256 and formatted as an RFC 9562 version-8 ("custom") uuid.
 */
export function deterministicUuid(origin: RowOrigin): string {
  const hex = createHash('sha256').update(`cm2:${basename(origin.file)}:${origin.kind}:${origin.line}`).digest('hex');
  const variant = ((parseInt(hex.charAt(16), 16) & 0x3) | 0x8).toString(16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-8${hex.slice(13, 16)}-${variant}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

/** `['messages', 3, 'role']` → `messages[3].role`; the empty path (the row itself) is `$`. */
export function formatFieldPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else out += out === '' ? String(key) : `.${String(key)}`;
  }
  return out === '' ? '$' : out;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

type Fail = { ok: false; field: string; message: string };
const fail = (field: string, message: string): Fail => ({ ok: false, field, message });

/** A JSON string is decoded; anything else is passed through. */
function maybeJson(value: unknown, field: string): { ok: true; value: unknown } | Fail {
  if (typeof value !== 'string') return { ok: true, value };
  try {
    return { ok: true, value: JSON.parse(value) as unknown };
  } catch (e) {
    return fail(field, `not valid JSON: ${(e as Error).message}`);
  }
}

/**
 * Resolve the candidate tool list: a top-level `tools` (array or JSON string) wins; otherwise the Nemotron
 * `metadata.tools` (metadata being a JSON string or an object). No tools anywhere means an empty list: a dialogue
 * without candidate tools is still a dialogue, and any tool call in it will be caught by the tool_schema filter.
 */
function resolveTools(row: Record<string, unknown>): { ok: true; value: unknown[] } | Fail {
  if (row.tools !== undefined && row.tools !== null) {
    const tools = maybeJson(row.tools, 'tools');
    if (!tools.ok) return tools;
    return Array.isArray(tools.value) ? { ok: true, value: tools.value } : fail('tools', 'expected an array of tools');
  }
  if (row.metadata === undefined || row.metadata === null) return { ok: true, value: [] };
  const metadata = maybeJson(row.metadata, 'metadata');
  if (!metadata.ok) return metadata;
  if (!isPlainObject(metadata.value)) return fail('metadata', 'expected a JSON object');
  const inner = metadata.value.tools;
  if (inner === undefined || inner === null) return { ok: true, value: [] };
  const tools = maybeJson(inner, 'metadata.tools');
  if (!tools.ok) return tools;
  return Array.isArray(tools.value) ? { ok: true, value: tools.value } : fail('metadata.tools', 'expected an array of tools');
}

/** Drop `null`-valued optional keys (parquet structs and OpenAI JSON both use null for "absent"). */
function withoutNulls(obj: Record<string, unknown>, keys: readonly string[]): Record<string, unknown> {
  const out = { ...obj };
  for (const k of keys) if (out[k] === null) delete out[k];
  return out;
}

/**
 * OpenAI-tolerant message content: null/absent → "", an array of `{type:'text', text}` parts → their concatenation.
 * Anything else is left for the schema to reject with a field path.
 */
function normaliseContent(content: unknown, field: string): { ok: true; value: unknown } | Fail {
  if (content === null || content === undefined) return { ok: true, value: '' };
  if (!Array.isArray(content)) return { ok: true, value: content };
  let text = '';
  for (const [i, part] of content.entries()) {
    if (isPlainObject(part) && part.type === 'text' && typeof part.text === 'string') text += part.text;
    else return fail(`${field}[${i}]`, 'only text content parts are supported');
  }
  return { ok: true, value: text };
}

/** Pre-normalise one message; structural validation is left to the zod schema so errors carry exact paths. */
function normaliseMessage(message: unknown, index: number): { ok: true; value: unknown } | Fail {
  if (!isPlainObject(message)) return { ok: true, value: message };
  const out = withoutNulls(message, ['tool_calls', 'tool_call_id', 'name']);
  const content = normaliseContent(message.content, `messages[${index}].content`);
  if (!content.ok) return content;
  out.content = content.value;
  if (Array.isArray(out.tool_calls)) {
    out.tool_calls = out.tool_calls.map((call) => (isPlainObject(call) ? withoutNulls(call, ['id', 'type']) : call));
  }
  return { ok: true, value: out };
}

/** Scalar label columns (category, generator, ...) kept as provenance; bigint (parquet int64) becomes a number. */
function scalarLabels(row: Record<string, unknown>): Record<string, unknown> {
  const labels: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(row)) {
    if (CONSUMED_KEYS.has(k)) continue;
    if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean') labels[k] = v;
    else if (typeof v === 'bigint') labels[k] = Number(v);
  }
  return labels;
}

/**
 * Normalise one raw row (from either importer) into an `Example`, or report why it is not a dialogue.
 * Never throws.
 */
export function normaliseRow(raw: unknown, origin: RowOrigin): NormaliseResult {
  const error = (field: string, message: string): NormaliseResult => ({
    ok: false,
    error: { file: origin.file, line: origin.line, kind: origin.kind, field, message },
  });
  try {
    if (!isPlainObject(raw)) return error('$', 'row is not a JSON object');

    let uuid: unknown = raw.uuid;
    if (uuid === undefined || uuid === null || uuid === '') uuid = deterministicUuid(origin);
    else if (typeof uuid !== 'string') return error('uuid', `expected a string, got ${typeof uuid}`);

    const messagesRaw = maybeJson(raw.messages, 'messages');
    if (!messagesRaw.ok) return error(messagesRaw.field, messagesRaw.message);
    if (messagesRaw.value === undefined || messagesRaw.value === null) return error('messages', 'missing messages');
    let messages: unknown = messagesRaw.value;
    if (Array.isArray(messages)) {
      const normalised: unknown[] = [];
      for (const [i, m] of messages.entries()) {
        const n = normaliseMessage(m, i);
        if (!n.ok) return error(n.field, n.message);
        normalised.push(n.value);
      }
      messages = normalised;
    }

    const tools = resolveTools(raw);
    if (!tools.ok) return error(tools.field, tools.message);

    const meta = {
      ...(isPlainObject(raw.meta) ? raw.meta : {}),
      ...scalarLabels(raw),
      origin: { file: origin.file, line: origin.line, kind: origin.kind },
    };

    const parsed = Example.safeParse({ uuid, messages, tools: tools.value, meta });
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      return error(issue ? formatFieldPath(issue.path) : '$', issue ? issue.message : 'invalid row');
    }
    return { ok: true, example: parsed.data };
  } catch (e) {
    // Defensive: exotic inputs (getters that throw, cyclic objects) must still become a row error.
    return error('$', `unexpected error while normalising: ${(e as Error).message}`);
  }
}

function collect(results: Iterable<NormaliseResult>): ImportResult {
  const examples: Example[] = [];
  const errors: ImportError[] = [];
  for (const r of results) {
    if (r.ok) examples.push(r.example);
    else errors.push(r.error);
  }
  return { examples, errors };
}

/** Parse JSONL text: one row per non-blank line, 1-based line numbers. */
export function parseJsonlText(text: string, file: string): ImportResult {
  const results: NormaliseResult[] = [];
  const lines = text.split(/\r?\n/);
  for (const [i, line] of lines.entries()) {
    if (line.trim() === '') continue;
    const origin: RowOrigin = { file, line: i + 1, kind: 'line' };
    let raw: unknown;
    try {
      raw = JSON.parse(line);
    } catch (e) {
      results.push({ ok: false, error: { ...origin, field: '$', message: `invalid JSON: ${(e as Error).message}` } });
      continue;
    }
    results.push(normaliseRow(raw, origin));
  }
  return collect(results);
}

/** Normalise the elements of a JSON array (the format of the reference's intermediate files); 0-based rows. */
export function parseJsonArray(rows: unknown[], file: string): ImportResult {
  return collect(rows.map((raw, i) => normaliseRow(raw, { file, line: i, kind: 'row' })));
}

/** hyparquet's `AsyncBuffer` (declared here because a CommonJS module cannot import types from an ESM package). */
interface ParquetSource {
  byteLength: number;
  slice(start: number, end?: number): ArrayBuffer | Promise<ArrayBuffer>;
}

/**
 * Normalise every row of a Nemotron-layout parquet source, one row group at a time (a row group is the unit
 * hyparquet decodes, so reading by group keeps memory bounded without decoding any group twice). hyparquet is
 * ESM-only, hence the dynamic import. Row errors carry the 0-based row index.
 */
async function readParquet(source: ParquetSource, file: string): Promise<ImportResult> {
  const { parquetMetadataAsync, parquetReadObjects } = await import('hyparquet');
  const metadata = await parquetMetadataAsync(source);
  const results: NormaliseResult[] = [];
  let rowStart = 0;
  for (const group of metadata.row_groups) {
    const rowEnd = rowStart + Number(group.num_rows);
    if (rowEnd > rowStart) {
      const rows = await parquetReadObjects({ file: source, metadata, rowStart, rowEnd });
      for (const [i, row] of rows.entries()) results.push(normaliseRow(row, { file, line: rowStart + i, kind: 'row' }));
    }
    rowStart = rowEnd;
  }
  return collect(results);
}

/** Read a Nemotron-layout parquet file from disk (read lazily by range, not loaded whole). */
export async function readParquetFile(path: string): Promise<ImportResult> {
  const { asyncBufferFromFile } = await import('hyparquet');
  return readParquet(await asyncBufferFromFile(path), path);
}

type SourceFormat = 'jsonl' | 'json' | 'parquet';

/** Input format by extension; unknown extensions are a usage error. */
function formatOf(path: string): SourceFormat {
  const ext = extname(path).toLowerCase();
  if (ext === '.parquet') return 'parquet';
  if (ext === '.jsonl') return 'jsonl';
  if (ext === '.json') return 'json';
  throw new Error(`cannot import ${path}: unsupported extension '${ext}' (expected .jsonl, .json or .parquet)`);
}

/** JSONL, or for `.json` a whole array (0-based rows) or a single object when the text parses as one document. */
function parseText(rawText: string, path: string, format: 'jsonl' | 'json'): ImportResult {
  // A UTF-8 byte-order mark would make the first row fail to parse.
  const text = rawText.replace(/^\uFEFF/, '');
  if (format === 'json') {
    // A .json file may hold a whole array (the reference's intermediate files), a single dialogue object, or
    // be JSONL under another name; only the first two parse as one document.
    let whole: unknown;
    try {
      whole = JSON.parse(text);
    } catch {
      whole = undefined;
    }
    if (Array.isArray(whole)) return parseJsonArray(whole, path);
    if (isPlainObject(whole)) return collect([normaliseRow(whole, { file: path, line: 1, kind: 'line' })]);
  }
  return parseJsonlText(text, path);
}

/**
 * Import file contents already in memory (e.g. fetched from object storage), dispatching on the extension of
 * `path` like `importFile`; `path` is also the file name reported in errors.
 */
export async function parseFileBytes(path: string, bytes: Uint8Array): Promise<ImportResult> {
  const format = formatOf(path);
  if (format === 'parquet') {
    const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
    return readParquet(buffer, path);
  }
  return parseText(new TextDecoder('utf-8').decode(bytes), path, format);
}

/**
 * Import a file by extension: `.jsonl` → JSONL; `.json` → a JSON array (0-based rows) or a single object if the
 * file holds one, else JSONL; `.parquet` → Nemotron parquet. Unknown extensions and unreadable files throw (they
 * are usage errors, not row errors).
 */
export async function importFile(path: string): Promise<ImportResult> {
  const format = formatOf(path);
  if (format === 'parquet') return readParquetFile(path);
  return parseText(await readFile(path, 'utf8'), path, format);
}
