/**
 * What a policy sees of a BFCL example (pure): the messages of the first turn and the functions as OpenAI tools.
 *
 * As BFCL prepares a function-calling model's request:
 * 1. Language hint: every description gets " Note that the provided function is in Python 3 syntax." (Java 8 SDK /
 *    JavaScript). In Java and JavaScript categories every parameter becomes `"type": "string"`, its description
 *    saying which type it really is ("This is Java long type parameter in string representation."), list element
 *    types and dict schemas moved into the description (BFCL `_func_doc_language_specific_pre_processing`).
 * 2. JSON schema (`convert_to_tool` with `GORILLA_TO_OPENAPI`): the parameters object gets `"type": "object"`; each
 *    property's type is mapped (`dict`→`object`, `float`→`number` plus `"format": "float"` and " This is a float type
 *    value." in its description, `tuple`→`array`, `any`→`string`, Java/JS names such as `long`→`integer`,
 *    `HashMap`→`object`; unknown or missing → `string`); element types and nested properties one level down.
 * 3. Endpoints whose tool names cannot contain `.` (OpenAI) get `a_b` for `a.b`; the checker then expects `a_b`.
 * The result is `[{type: "function", function: {name, description, parameters}}]`, the format the project's chat
 * template prints in `<tools>` (BFCL's Qwen handler prints the raw docs instead; see docs/eval.md).
 */
import { categoryLanguage } from './categories';
import type { FunctionDoc } from './checker';
import type { BfclExample, BfclMessage } from './data';

/** BFCL's `GORILLA_TO_OPENAPI`. */
export const GORILLA_TO_OPENAPI: Readonly<Record<string, string>> = {
  integer: 'integer', number: 'number', float: 'number', string: 'string', boolean: 'boolean', bool: 'boolean',
  array: 'array', list: 'array', dict: 'object', object: 'object', tuple: 'array', any: 'string', byte: 'integer',
  short: 'integer', long: 'integer', double: 'number', char: 'string', ArrayList: 'array', Array: 'array',
  HashMap: 'object', Hashtable: 'object', Queue: 'array', Stack: 'array', Any: 'string', String: 'string', Bigint: 'integer',
};

export interface OpenAiTool {
  type: 'function';
  function: { name: string; description: string; parameters: Record<string, unknown> };
}

type Schema = Record<string, unknown>;

const clone = <T>(v: T): T => structuredClone(v);

const HINT = { python: ' Note that the provided function is in Python 3 syntax.', java: ' Note that the provided function is in Java 8 SDK syntax.', javascript: ' Note that the provided function is in JavaScript syntax.' } as const;

/** Step 1: language hints and, for Java/JavaScript, string-typed parameters. Returns new docs. */
export function languageSpecificDocs(docs: readonly FunctionDoc[], category: string): FunctionDoc[] {
  const language = categoryLanguage(category);
  return docs.map((raw) => {
    const doc = clone(raw);
    doc.description = `${doc.description ?? ''}${HINT[language]}`;
    if (language === 'python') return doc;
    const langName = language === 'java' ? 'Java' : 'JavaScript';
    for (const p of Object.values(doc.parameters.properties) as Schema[]) {
      const type = String(p['type'] ?? '');
      let description = typeof p['description'] === 'string' ? p['description'] : '';
      description += type === 'any' ? ` This parameter can be of any type of ${langName} object in string representation.` : ` This is ${langName} ${type} type parameter in string representation.`;
      const listTypes = language === 'java' ? ['ArrayList', 'Array'] : ['array'];
      if (listTypes.includes(type) && p['items'] !== undefined) {
        description += ` The list elements are of type ${String((p['items'] as Schema)['type'])}; they are not in string representation.`;
        delete p['items'];
      }
      if (language === 'javascript' && type === 'dict' && p['properties'] !== undefined) {
        description += ` The dictionary entries have the following schema; they are not in string representation. ${pyJsonDumps(p['properties'])}`;
        delete p['properties'];
      }
      p['description'] = description;
      p['type'] = 'string';
    }
    return doc;
  });
}

/** Python's `json.dumps` default formatting (`", "` and `": "` separators, non-ASCII escaped). */
export function pyJsonDumps(v: unknown): string {
  if (v === null || v === undefined) return 'null';
  if (Array.isArray(v)) return `[${v.map(pyJsonDumps).join(', ')}]`;
  if (typeof v === 'object') return `{${Object.entries(v as Schema).map(([k, x]) => `${pyJsonDumps(k)}: ${pyJsonDumps(x)}`).join(', ')}}`;
  if (typeof v === 'string') return JSON.stringify(v).replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  return JSON.stringify(v);
}

const mapType = (t: unknown): string => (typeof t === 'string' && GORILLA_TO_OPENAPI[t] !== undefined ? GORILLA_TO_OPENAPI[t] : 'string');

/** Step 2 for a properties object (BFCL `_cast_to_openai_type`). Mutates and returns `properties`. */
function castProperties(properties: Record<string, Schema>): Record<string, Schema> {
  for (const p of Object.values(properties)) {
    if (p['type'] === undefined) p['type'] = 'string';
    else {
      if (p['type'] === 'float') {
        p['format'] = 'float';
        p['description'] = `${typeof p['description'] === 'string' ? p['description'] : ''} This is a float type value.`;
      }
      p['type'] = mapType(p['type']);
    }
    if (p['type'] !== 'array' && p['type'] !== 'object') continue;
    if (p['properties'] !== undefined && typeof p['properties'] === 'object') {
      p['properties'] = castProperties(p['properties'] as Record<string, Schema>);
    } else if (p['items'] !== undefined && typeof p['items'] === 'object') {
      const items = p['items'] as Schema;
      items['type'] = mapType(items['type']);
      if (items['type'] === 'array' && typeof items['items'] === 'object' && items['items'] !== null) {
        const inner = items['items'] as Schema;
        inner['type'] = mapType(inner['type']);
      } else if (items['type'] === 'object' && typeof items['properties'] === 'object' && items['properties'] !== null) {
        items['properties'] = castProperties(items['properties'] as Record<string, Schema>);
      }
    }
  }
  return properties;
}

/** Step 2 and 3: function docs → OpenAI tools. `dotToUnderscore` for endpoints that reject `.` in tool names. */
export function toOpenAiTools(docs: readonly FunctionDoc[], opts: { dotToUnderscore?: boolean } = {}): OpenAiTool[] {
  return docs.map((raw) => {
    const doc = clone(raw);
    const name = opts.dotToUnderscore ? doc.name.replace(/\./g, '_') : doc.name;
    const parameters: Schema = { ...doc.parameters, type: 'object', properties: castProperties(doc.parameters.properties as Record<string, Schema>) };
    return { type: 'function', function: { name, description: doc.description ?? '', parameters } };
  });
}

/** The tools of an example as a policy gets them. */
export function exampleTools(example: BfclExample, opts: { dotToUnderscore?: boolean } = {}): OpenAiTool[] {
  return toOpenAiTools(languageSpecificDocs(example.functions, example.category), opts);
}

/** The messages of the first turn (every supported category is single-turn). */
export function exampleMessages(example: BfclExample): BfclMessage[] {
  return (example.question[0] ?? []).map((m) => ({ role: m.role, content: m.content }));
}
