/**
 * The configuration reference of the README, generated from the zod schema so that it never drifts
 * (`npm run docs:config` writes it, `npm run docs:config -- --check` and test/unit/cli/configReference.test.ts
 * check it).
 *
 * Pure: walks `schema._zod.def` (not the JSON Schema, which loses prefaults, refinements and schema identity)
 * and renders one Markdown table per top-level key. Descriptions come from `.describe()` / `.meta({ description })`;
 * defaults, enums, bounds, unions and records from the schema itself.
 */
import { z } from 'zod';
import { applyEnvOverrides, Cm2Config, S3Config } from '../run/config';

export const REFERENCE_START = '<!-- config-reference:start -->';
export const REFERENCE_END = '<!-- config-reference:end -->';

type Schema = z.core.$ZodType;
type Def = z.core.$ZodTypes['_zod']['def'];

/** The fields of the check definitions we render (numeric bounds, lengths, formats, refinements). */
interface CheckDef {
  check: string;
  value?: unknown;
  inclusive?: boolean;
  format?: string;
  pattern?: RegExp;
  minimum?: number;
  maximum?: number;
  length?: number;
  error?: unknown;
}

/** One table row; `key` is the dotted path. */
export interface ReferenceRow {
  key: string;
  type: string;
  default: string;
  description: string;
}

/** A schema with its wrappers (optional, default, prefault, nullable, ...) peeled off. */
interface Unwrapped {
  core: Schema;
  nullable: boolean;
  hasDefault: boolean;
  defaultValue: unknown;
  description: string | undefined;
  /** Messages of `.refine()` checks, which the schema cannot otherwise show. */
  refinements: string[];
}

const defOf = (s: Schema): Def => (s as z.core.$ZodTypes)._zod.def;
const checksOf = (s: Schema): CheckDef[] => (s._zod.def.checks ?? []).map((c) => c._zod.def as CheckDef);
const descriptionOf = (s: Schema): string | undefined => z.globalRegistry.get(s)?.description || undefined;
/** True when the key may be left out of its object (optional, defaulted, prefaulted). */
const omittable = (s: Schema): boolean => s._zod.optin !== undefined;

function unwrap(schema: Schema): Unwrapped {
  const out: Unwrapped = { core: schema, nullable: false, hasDefault: false, defaultValue: undefined, description: undefined, refinements: [] };
  let s = schema;
  for (let depth = 0; depth < 64; depth++) {
    out.description ??= descriptionOf(s);
    out.refinements.push(...refinementMessages(s));
    const def = defOf(s);
    switch (def.type) {
      case 'default':
      case 'prefault':
        if (!out.hasDefault) {
          out.hasDefault = true;
          out.defaultValue = def.defaultValue;
        }
        s = def.innerType;
        continue;
      case 'nullable':
        out.nullable = true;
        s = def.innerType;
        continue;
      case 'optional':
      case 'nonoptional':
      case 'readonly':
      case 'catch':
        s = def.innerType;
        continue;
      case 'pipe':
        s = def.in;
        continue;
      case 'lazy':
        s = def.getter();
        continue;
      default:
        out.core = s;
        return out;
    }
  }
  throw new Error('configReference: schema wrappers nest too deep');
}

function refinementMessages(s: Schema): string[] {
  const out: string[] = [];
  for (const c of checksOf(s)) {
    if (c.check !== 'custom' || typeof c.error !== 'function') continue;
    try {
      const m: unknown = (c.error as (issue: unknown) => unknown)({ code: 'custom', input: undefined, path: [] });
      const text = typeof m === 'string' ? m : typeof m === 'object' && m !== null && 'message' in m ? (m as { message: unknown }).message : undefined;
      if (typeof text === 'string' && text) out.push(text);
    } catch {
      // An error map that needs a real issue: nothing to show.
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Values and types as text

const fmtNumber = (n: number): string => (Number.isInteger(n) || Math.abs(n) >= 1e-3 || n === 0 ? String(n) : n.toExponential());
/** Strings YAML would read as something else (numbers, booleans, null). */
const NOT_A_STRING = /^(true|false|null|yes|no|on|off|~|[-+]?(\d[\d_]*\.?\d*|\.\d+)([eE][-+]?\d+)?|[-+]?\.(inf|nan)|0x[\da-f]+|0o[0-7]+)$/i;

/** A value as YAML would show it: bare scalars where YAML reads them back as the same string, flow-style collections. */
function fmtValue(v: unknown, nested = false): string {
  if (v === null) return 'null';
  if (typeof v === 'number') return fmtNumber(v);
  if (typeof v === 'boolean') return String(v);
  if (typeof v === 'string') {
    const plain = v !== '' && v.trim() === v && !/^[-?:,[\]{}#&*!|>'"%@`]/.test(v) && !/: | #|[\n`]/.test(v) && !(nested && /[,[\]{}]/.test(v));
    return plain && !NOT_A_STRING.test(v) ? v : JSON.stringify(v);
  }
  if (Array.isArray(v)) return `[${v.map((x) => fmtValue(x, true)).join(', ')}]`;
  if (typeof v === 'object') {
    const entries = Object.entries(v as Record<string, unknown>).filter(([, x]) => x !== undefined);
    return entries.length ? `{ ${entries.map(([k, x]) => `${k}: ${fmtValue(x, true)}`).join(', ')} }` : '{}';
  }
  return String(v);
}

const code = (s: string): string => `\`${s}\``;
const alternatives = (values: readonly unknown[]): string => values.map((v) => code(fmtValue(v))).join(' | ');

function numberType(s: Schema): string {
  let integer = false;
  let lo: { value: number; inclusive: boolean } | undefined;
  let hi: { value: number; inclusive: boolean } | undefined;
  for (const c of checksOf(s)) {
    if (c.check === 'number_format') integer = true;
    if (c.check === 'greater_than' && typeof c.value === 'number' && (!lo || c.value >= lo.value)) lo = { value: c.value, inclusive: c.inclusive ?? true };
    if (c.check === 'less_than' && typeof c.value === 'number' && (!hi || c.value <= hi.value)) hi = { value: c.value, inclusive: c.inclusive ?? true };
  }
  const base = integer ? 'integer' : 'number';
  if (lo && hi && lo.inclusive && hi.inclusive) return `${base} ${fmtNumber(lo.value)}–${fmtNumber(hi.value)}`;
  const bounds = [
    ...(lo ? [`${lo.inclusive ? '≥' : '>'} ${fmtNumber(lo.value)}`] : []),
    ...(hi ? [`${hi.inclusive ? '≤' : '<'} ${fmtNumber(hi.value)}`] : []),
  ];
  return bounds.length ? `${base} ${bounds.join(', ')}` : base;
}

function lengthBounds(s: Schema, unit: (n: number) => string): string | undefined {
  let min: number | undefined;
  let max: number | undefined;
  for (const c of checksOf(s)) {
    if (c.check === 'min_length' && c.minimum !== undefined) min = c.minimum;
    if (c.check === 'max_length' && c.maximum !== undefined) max = c.maximum;
    if (c.check === 'length_equals' && c.length !== undefined) min = max = c.length;
  }
  if (min !== undefined && max !== undefined) return min === max ? `exactly ${unit(min)}` : `${min}–${unit(max)}`;
  if (min !== undefined) return `≥ ${unit(min)}`;
  if (max !== undefined) return `≤ ${unit(max)}`;
  return undefined;
}

function stringType(s: Schema): string {
  const formats = [String((defOf(s) as { format?: unknown }).format ?? ''), ...checksOf(s).filter((c) => c.check === 'string_format').map((c) => c.format ?? '')];
  const pattern = checksOf(s).find((c) => c.pattern instanceof RegExp)?.pattern;
  const named = formats.find((f) => f && f !== 'regex');
  const base = named === 'url' ? 'URL' : named ? `string (${named})` : 'string';
  const length = lengthBounds(s, (n) => `${n} char${n === 1 ? '' : 's'}`);
  const parts = [length === '≥ 1 char' ? `${base}, non-empty` : length ? `${base}, ${length}` : base];
  if (pattern) parts.push(`matching ${code(pattern.source)}`);
  return parts.join(' ');
}

const isObjectLike = (s: Schema): boolean => {
  const t = defOf(unwrap(s).core).type;
  return t === 'object' || t === 'record' || t === 'array' || (t === 'union' && unionOfObjects(unwrap(s).core));
};
const unionOfObjects = (s: Schema): boolean => {
  const def = defOf(s);
  return def.type === 'union' && def.options.every((o) => defOf(unwrap(o).core).type === 'object');
};

/** `string` → `strings`, `string, non-empty` → `non-empty strings`; anything longer in parentheses. */
function plural(type: string): string {
  const m = /^(string|number|integer|boolean|object|map)(, non-empty)?$/.exec(type);
  if (m) return `${m[2] ? 'non-empty ' : ''}${m[1]}s`;
  return type.includes(',') || type.includes(' or ') ? `(${type})` : type;
}

/** The type column of a schema with its wrappers already peeled off. */
function typeOf(u: Unwrapped): string {
  const def = defOf(u.core);
  let t: string;
  switch (def.type) {
    case 'string':
      t = stringType(u.core);
      break;
    case 'number':
      t = numberType(u.core);
      break;
    case 'boolean':
      t = 'boolean';
      break;
    case 'enum':
      t = alternatives(Object.values(def.entries));
      break;
    case 'literal':
      t = alternatives(def.values);
      break;
    case 'null':
      t = code('null');
      break;
    case 'object':
      t = 'object';
      break;
    case 'record':
      t = 'map';
      break;
    case 'array': {
      const item = unwrap(def.element);
      const length = lengthBounds(u.core, (n) => `${n} item${n === 1 ? '' : 's'}`);
      t = `list of ${isObjectLike(item.core) ? 'objects' : plural(typeOf(item))}${length ? `, ${length}` : ''}`;
      break;
    }
    case 'union':
      t = unionOfObjects(u.core) ? 'object' : def.options.map((o) => typeOf(unwrap(o))).join(' or ');
      break;
    case 'any':
    case 'unknown':
      t = 'any';
      break;
    default:
      t = def.type;
  }
  return u.nullable ? `${t} or ${code('null')}` : t;
}

// ---------------------------------------------------------------------------------------------------
// The walk

interface WalkOpts {
  /** May be left out of its parent object. */
  omittable: boolean;
  /** Label of the union variant the key belongs to (`kind: demo`). */
  variant?: string;
  /** Emit a row for this node itself when it is an object (top-level sections and collapsed groups do not). */
  emitSelf: boolean;
  /** Description to use instead of the schema's own (collapsed groups). */
  description?: string;
}

function defaultCell(u: Unwrapped, opts: WalkOpts): string {
  if (u.hasDefault) return code(fmtValue(u.defaultValue));
  return opts.omittable ? '—' : '**required**';
}

function describeCell(u: Unwrapped, opts: WalkOpts, extra: string[] = []): string {
  const text = [opts.description ?? u.description ?? '', ...u.refinements.map((r) => `Must be: ${r}.`), ...extra].filter(Boolean).join(' ');
  return opts.variant ? `*Only with ${code(opts.variant)}.* ${text}`.trim() : text;
}

function pushRow(rows: ReferenceRow[], key: string, u: Unwrapped, opts: WalkOpts, extra: string[] = []): void {
  rows.push({ key, type: typeOf(u), default: defaultCell(u, opts), description: describeCell(u, opts, extra) });
}

const nonTrivialDefault = (u: Unwrapped): boolean =>
  u.hasDefault && !(typeof u.defaultValue === 'object' && u.defaultValue !== null && Object.keys(u.defaultValue).length === 0);

function walk(rows: ReferenceRow[], key: string, schema: Schema, opts: WalkOpts): void {
  const u = unwrap(schema);
  const def = defOf(u.core);
  switch (def.type) {
    case 'object':
      if (opts.emitSelf && (u.description || opts.description || nonTrivialDefault(u))) pushRow(rows, key, u, opts);
      walkShape(rows, key, def.shape, opts.variant);
      return;
    case 'array': {
      pushRow(rows, `${key}[]`, u, opts);
      if (isObjectLike(def.element)) walk(rows, `${key}[]`, def.element, { omittable: false, emitSelf: false, ...(opts.variant ? { variant: opts.variant } : {}) });
      return;
    }
    case 'record': {
      const value = unwrap(def.valueType);
      const keyType = unwrap(def.keyType);
      const keyNote = ['enum', 'literal'].includes(defOf(keyType.core).type) ? [`${code('<name>')}: ${typeOf(keyType)}.`] : ['Any keys.'];
      const row = { ...u, core: value.core, nullable: value.nullable };
      pushRow(rows, `${key}.<name>`, row, opts, keyNote);
      if (isObjectLike(value.core)) walk(rows, `${key}.<name>`, def.valueType, { omittable: false, emitSelf: false, ...(opts.variant ? { variant: opts.variant } : {}) });
      return;
    }
    case 'union':
      if (unionOfObjects(u.core)) {
        walkUnion(rows, key, u, def.options, 'discriminator' in def ? (def as { discriminator: string }).discriminator : undefined, opts);
        return;
      }
      pushRow(rows, key, u, opts);
      return;
    default:
      pushRow(rows, key, u, opts);
  }
}

function walkUnion(rows: ReferenceRow[], key: string, u: Unwrapped, options: readonly Schema[], discriminator: string | undefined, opts: WalkOpts): void {
  const variants = options.map((o, i) => {
    const v = unwrap(o);
    const shape = (defOf(v.core) as { shape: Record<string, Schema> }).shape;
    const disc = discriminator !== undefined ? shape[discriminator] : undefined;
    const values = disc ? (defOf(unwrap(disc).core) as { values?: unknown[] }).values ?? [] : [];
    const label = discriminator !== undefined && values.length ? `${discriminator}: ${values.map((x) => fmtValue(x)).join(' | ')}` : `variant ${i + 1}`;
    return { label, values, shape, description: v.description };
  });
  if (opts.emitSelf) {
    const lines = variants.map((v) => `${code(v.label)}${v.description ? `: ${v.description}` : ''}`);
    const type = discriminator !== undefined ? `object, by ${code(discriminator)}: ${alternatives(variants.flatMap((v) => v.values))}` : `one of ${variants.length} objects`;
    rows.push({ key, type: u.nullable ? `${type} or ${code('null')}` : type, default: defaultCell(u, opts), description: [describeCell(u, opts), ...lines].filter(Boolean).join('<br>') });
  }
  if (discriminator !== undefined) {
    rows.push({
      key: `${key}.${discriminator}`,
      type: alternatives(variants.flatMap((v) => v.values)),
      default: '**required**',
      description: `Selects the variant: ${variants.map((v) => code(v.label)).join(', ')}; the keys marked *Only with …* belong to one variant.`,
    });
  }
  for (const v of variants) {
    for (const [k, field] of Object.entries(v.shape)) {
      if (k === discriminator) continue;
      walk(rows, `${key}.${k}`, field, { omittable: omittable(field), variant: v.label, emitSelf: true });
    }
  }
}

/**
 * Keys of one object that share one schema (the five LLM roles) are documented once, as `<role>`: same core schema
 * instance, same default, all omittable or all required.
 */
function sharedSchema(entries: [string, Schema][]): boolean {
  if (entries.length < 3) return false;
  const first = unwrap(entries[0]![1]);
  if (defOf(first.core).type !== 'object') return false;
  return entries.every(([, s]) => {
    const u = unwrap(s);
    return u.core === first.core && fmtValue(u.defaultValue) === fmtValue(first.defaultValue) && omittable(s) === omittable(entries[0]![1]);
  });
}

function placeholderOf(key: string): string {
  const last = key.split('.').pop() ?? '';
  const word = /^[A-Za-z]+$/.test(last) ? last : 'name';
  return `<${word.length > 3 && word.endsWith('s') ? word.slice(0, -1) : word}>`;
}

function walkShape(rows: ReferenceRow[], key: string, shape: Record<string, Schema>, variant: string | undefined): void {
  const entries = Object.entries(shape);
  const base = variant ? { variant } : {};
  if (sharedSchema(entries)) {
    const first = entries[0]![1];
    const placeholder = placeholderOf(key);
    const names = entries.map(([k, s]) => {
      const d = unwrap(s).description;
      return `${code(k)}${d ? `: ${d}` : ''}`;
    });
    const description = [`${code(placeholder)} is one of:`, ...names].join('<br>');
    const u = unwrap(first);
    rows.push({ key: `${key}.${placeholder}`, type: 'object', default: defaultCell(u, { omittable: omittable(first), emitSelf: true }), description: variant ? `*Only with ${code(variant)}.* ${description}` : description });
    walk(rows, `${key}.${placeholder}`, first, { omittable: omittable(first), emitSelf: false, ...base });
    return;
  }
  for (const [k, s] of entries) walk(rows, `${key}.${k}`, s, { omittable: omittable(s), emitSelf: true, ...base });
}

// ---------------------------------------------------------------------------------------------------
// Markdown

/** Escapes a table cell: `|` everywhere, `<` before a letter outside code spans (GitHub would take it for HTML). */
function cell(text: string): string {
  return text
    .replace(/\s*\n\s*/g, ' ')
    .split(/(`[^`]*`)/)
    .map((part, i) => (i % 2 === 1 ? part : part.replace(/<(?!br>)(?=[A-Za-z/!])/g, '&lt;')))
    .join('')
    .replace(/\|/g, '\\|');
}

/** The rows of one top-level key (`rl`, `llm`, ...). */
export function referenceRows(key: string, schema: Schema): ReferenceRow[] {
  const rows: ReferenceRow[] = [];
  walk(rows, key, schema, { omittable: omittable(schema), emitSelf: false });
  return rows;
}

function table(rows: ReferenceRow[]): string {
  const lines = ['| Key | Type | Default | Description |', '| --- | --- | --- | --- |'];
  for (const r of rows) lines.push(`| ${[code(r.key), r.type, r.default, r.description].map(cell).join(' | ')} |`);
  return lines.join('\n');
}

/** The well-known environment variables of `applyEnvOverrides`, with the key each sets (found by applying them). */
export const WELL_KNOWN_ENV = ['TEMPORAL_ADDRESS', 'TEMPORAL_NAMESPACE', 'TEMPORAL_TLS_SERVER_CA_CERT_PATH', 'TEMPORAL_TLS_CLIENT_CERT_PATH', 'TEMPORAL_TLS_CLIENT_KEY_PATH', 'TEMPORAL_TLS_SERVER_NAME', 'TEMPORAL_TLS_CA', 'TEMPORAL_TLS_CERT', 'TEMPORAL_TLS_KEY', 'CM2_TEMPORAL_UI_URL', 'CM2_METRICS_ADDR', 'CM2_S3_ENDPOINT', 'CM2_S3_BUCKET', 'CM2_S3_CA_FILE'] as const;

function findValue(node: unknown, value: string, path: string[] = []): string[] | undefined {
  if (node === value) return path;
  if (typeof node !== 'object' || node === null) return undefined;
  for (const [k, v] of Object.entries(node)) {
    const found = findValue(v, value, [...path, k]);
    if (found) return found;
  }
  return undefined;
}

function envPreamble(): string {
  const probe = '__cm2_config_reference_probe__';
  const wellKnown = WELL_KNOWN_ENV.map((name) => {
    const path = findValue(applyEnvOverrides({}, { [name]: probe }), probe);
    if (!path) throw new Error(`configReference: ${name} no longer sets a config key (update WELL_KNOWN_ENV)`);
    return `${code(name)} → ${code(path.join('.'))}`;
  });
  const s3 = S3Config.parse({});
  return [
    'Environment variables override the file (applied before validation, so they are checked like the file):',
    '',
    `- ${code('CM2_CFG__a__b=value')} sets ${code('a.b')}; the value is parsed as JSON when it parses, else taken as a string: ` +
      `${code('CM2_CFG__rl__hp__lr=5e-4')}, ${code(`CM2_CFG__data__source='{"kind":"file","paths":["/data/a.jsonl"]}'`)}.`,
    `- Applied after those: ${wellKnown.join(', ')}.`,
    `- Secrets come from the environment only and never appear in the file: the S3 credentials from ${code(s3.accessKeyEnv)} / ` +
      `${code(s3.secretKeyEnv)} (the names are ${code('s3.accessKeyEnv')} / ${code('s3.secretKeyEnv')}; ${code('cm2 infra up')} writes local ones) or the AWS sources of ${code('s3.credentials')}, ` +
      `the API key of an LLM role from the variable its ${code('apiKeyEnv')} names (for example ${code('OPENAI_API_KEY')}), a Temporal Cloud API key from ${code('TEMPORAL_API_KEY')} (${code('temporal.apiKeyEnv')}), TLS key data from ${code('TEMPORAL_TLS_CLIENT_KEY_DATA')}, the payload key ring from ${code('CM2_CODEC_KEY')}; ` +
      'a role without one sends a placeholder key, which local servers accept.',
  ].join('\n');
}

/** The configuration reference as Markdown (a `###` heading, a preamble, one `####` section per top-level key). */
export function configReference(schema: Schema = Cm2Config): string {
  const root = unwrap(schema);
  const def = defOf(root.core);
  if (def.type !== 'object') throw new Error('configReference: the config schema must be an object');
  const sections = Object.entries(def.shape).map(([key, s]) => {
    const u = unwrap(s);
    const rows = referenceRows(key, s);
    const intro = [u.description ?? '', omittable(s) ? '' : 'This section is required.'].filter(Boolean).join(' ');
    return [`#### ${code(key)}`, ...(intro ? ['', intro] : []), '', table(rows)].join('\n');
  });
  return [
    '### Configuration reference',
    '',
    '<!-- Generated from the zod schema (src/run/config.ts, src/llm/llmConfig.ts) by `npm run docs:config`: edit the .describe() texts there, not this section. -->',
    '',
    'Keys are dotted paths into the YAML file: `rl.hp.lr: 1e-6` stands for `rl: { hp: { lr: 1e-6 } }`. `[]` stands for the items',
    'of a list; `<name>` for any key of a map, `<role>` (and the like) for each of the keys listed in its row. Every key may be left',
    'out except those marked **required**; `—` means unset (the description says what happens then). A section or object left out',
    'gets the defaults of all its keys.',
    '',
    envPreamble(),
    '',
    sections.join('\n\n'),
    '',
  ].join('\n');
}

// ---------------------------------------------------------------------------------------------------
// README

/**
 * `readme` with `reference` between the markers. Without markers, they are inserted at the end of the
 * `## Configuration` section (before the next `## ` heading outside code fences, or at the end of the file).
 */
export function readmeWithReference(readme: string, reference: string): string {
  const block = `${REFERENCE_START}\n\n${reference.trimEnd()}\n\n${REFERENCE_END}`;
  const start = readme.indexOf(REFERENCE_START);
  const end = readme.indexOf(REFERENCE_END);
  if (start !== -1 && end > start) return readme.slice(0, start) + block + readme.slice(end + REFERENCE_END.length);
  if (start !== -1 || end !== -1) throw new Error(`README: ${REFERENCE_START} and ${REFERENCE_END} must both be present, in this order`);

  const lines = readme.split('\n');
  let fenced = false;
  let inSection = false;
  let insertAt: number | undefined;
  for (const [i, line] of lines.entries()) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
    if (fenced || !/^## /.test(line)) continue;
    if (inSection) {
      insertAt = i;
      break;
    }
    inSection = /^## Configuration\s*$/.test(line);
  }
  if (!inSection) throw new Error('README: no "## Configuration" section to put the configuration reference in');
  if (insertAt === undefined) return `${readme.trimEnd()}\n\n${block}\n`;
  const before = lines.slice(0, insertAt).join('\n').trimEnd();
  return `${before}\n\n${block}\n\n${lines.slice(insertAt).join('\n')}`;
}
