import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { filterCommand } from '../../../../src/cli/filterCommand';
import {
  deterministicUuid,
  formatFieldPath,
  importFile,
  normaliseRow,
  parseFileBytes,
  parseJsonlText,
  readParquetFile,
} from '../../../../src/stages/prepare/import';
import { Example } from '../../../../src/kernel/schema';
import { weatherTool } from '../../../fixtures/dialogues';
import { FIXTURES } from '../../../helpers/paths';

const FIXTURE = resolve(FIXTURES, 'nemotron-sample.parquet');
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** An OpenAI-chat row: null content on the tool-call turn, arguments as a JSON string. */
function openAiRow(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', content: '{"t": 18}', tool_call_id: 'c1' },
      { role: 'assistant', content: '<think>\nok\n</think>\n\n18 °C.' },
    ],
    tools: [weatherTool],
    ...extra,
  };
}

const line = (row: unknown): string => JSON.stringify(row);

async function tempDir(): Promise<string> {
  return mkdtemp(join(tmpdir(), 'cm2-import-'));
}

describe('parseJsonlText', () => {
  test('parses OpenAI chat rows: null content → "", tool calls kept, rows valid against the schema', () => {
    const { examples, errors } = parseJsonlText(line(openAiRow({ uuid: 'u-1' })), 'a.jsonl');
    assert.deepEqual(errors, []);
    assert.equal(examples.length, 1);
    const ex = examples[0]!;
    assert.equal(ex.uuid, 'u-1');
    assert.equal(ex.messages[1]!.content, '');
    assert.equal(ex.messages[1]!.tool_calls?.[0]?.function.arguments, '{"city":"Paris"}');
    assert.equal(ex.messages[2]!.tool_call_id, 'c1');
    assert.deepEqual(ex.tools, [weatherTool]);
    assert.deepEqual(ex.meta?.origin, { file: 'a.jsonl', line: 1, kind: 'line' });
    assert.ok(Example.safeParse(ex).success);
  });

  test('arguments may be an object; tools may be a JSON string; missing tool-call type defaults to function', () => {
    const row = openAiRow({ tools: JSON.stringify([weatherTool]) });
    (row.messages as Record<string, unknown>[])[1] = { role: 'assistant', content: '', tool_calls: [{ function: { name: 'get_weather', arguments: { city: 'Paris' } } }] };
    const { examples, errors } = parseJsonlText(line(row), 'a.jsonl');
    assert.deepEqual(errors, []);
    assert.deepEqual(examples[0]!.messages[1]!.tool_calls?.[0], { type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris' } } });
    assert.deepEqual(examples[0]!.tools, [weatherTool]);
  });

  test('the Nemotron metadata layout is accepted in JSONL too', () => {
    const row = openAiRow({ metadata: JSON.stringify({ tools: [weatherTool] }) });
    delete row.tools;
    assert.deepEqual(parseJsonlText(line(row), 'a.jsonl').examples[0]!.tools, [weatherTool]);
    const none = openAiRow();
    delete none.tools;
    assert.deepEqual(parseJsonlText(line(none), 'a.jsonl').examples[0]!.tools, []);
  });

  test('text content parts are joined; null ids are dropped; label columns go to meta', () => {
    const row = openAiRow({ category: 'tool_calling', score: 3, nested: { no: 1 } });
    const msgs = row.messages as Record<string, unknown>[];
    msgs[0] = { role: 'user', content: [{ type: 'text', text: 'Weather ' }, { type: 'text', text: 'in Paris?' }] };
    msgs[1] = { role: 'assistant', content: null, tool_calls: [{ id: null, type: 'function', function: { name: 'get_weather', arguments: '{}' } }], name: null };
    const ex = parseJsonlText(line(row), 'a.jsonl').examples[0]!;
    assert.equal(ex.messages[0]!.content, 'Weather in Paris?');
    assert.ok(!('id' in ex.messages[1]!.tool_calls![0]!));
    assert.ok(!('name' in ex.messages[1]!));
    assert.equal(ex.meta?.category, 'tool_calling');
    assert.equal(ex.meta?.score, 3);
    assert.ok(!('nested' in (ex.meta ?? {})));
  });

  test('missing uuid → deterministic uuid from file name and line; stable across re-imports and directories', () => {
    const text = `${line(openAiRow())}\n${line(openAiRow())}\n`;
    const first = parseJsonlText(text, '/data/x/train.jsonl').examples.map((e) => e.uuid);
    const again = parseJsonlText(text, '/elsewhere/train.jsonl').examples.map((e) => e.uuid);
    assert.deepEqual(first, again);
    assert.notEqual(first[0], first[1]);
    for (const id of first) assert.match(id, UUID_RE);
    assert.notEqual(first[0], parseJsonlText(text, 'other.jsonl').examples[0]!.uuid);
    assert.equal(first[0], deterministicUuid({ file: 'train.jsonl', line: 1, kind: 'line' }));
    assert.notEqual(deterministicUuid({ file: 'f', line: 1, kind: 'line' }), deterministicUuid({ file: 'f', line: 1, kind: 'row' }));
  });

  test('blank lines are skipped and line numbers stay 1-based file lines (CRLF too)', () => {
    const text = `\n${line(openAiRow())}\r\n   \r\n{bad json\r\n${line(openAiRow())}`;
    const { examples, errors } = parseJsonlText(text, 'a.jsonl');
    assert.deepEqual(examples.map((e) => e.meta?.origin), [
      { file: 'a.jsonl', line: 2, kind: 'line' },
      { file: 'a.jsonl', line: 5, kind: 'line' },
    ]);
    assert.equal(errors.length, 1);
    assert.equal(errors[0]!.line, 4);
    assert.equal(errors[0]!.field, '$');
    assert.equal(errors[0]!.kind, 'line');
    assert.match(errors[0]!.message, /invalid JSON/);
  });

  test('malformed rows are reported with the failing field path, never thrown', () => {
    const cases: [unknown, string][] = [
      [[1, 2], '$'],
      ['just a string', '$'],
      [{ tools: [] }, 'messages'],
      [{ messages: 'hello', tools: [] }, 'messages'],
      [{ messages: [], tools: [] }, 'messages'],
      [{ messages: [{ role: 'user', content: 'a' }, { content: 'no role' }], tools: [] }, 'messages[1].role'],
      [{ messages: [{ role: 5, content: 'a' }], tools: [] }, 'messages[0].role'],
      [{ messages: ['not a message'], tools: [] }, 'messages[0]'],
      [{ messages: [{ role: 'user', content: 42 }], tools: [] }, 'messages[0].content'],
      [{ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: {} }] }], tools: [] }, 'messages[0].content[0]'],
      [{ messages: [{ role: 'assistant', content: '', tool_calls: 'x' }], tools: [] }, 'messages[0].tool_calls'],
      [{ messages: [{ role: 'assistant', content: '', tool_calls: [{ type: 'function', function: { arguments: '{}' } }] }], tools: [] }, 'messages[0].tool_calls[0].function.name'],
      [{ messages: [{ role: 'assistant', content: '', tool_calls: [{ type: 'function', function: { name: 'f', arguments: [1] } }] }], tools: [] }, 'messages[0].tool_calls[0].function.arguments'],
      [{ messages: [{ role: 'assistant', content: '', tool_calls: [{ type: 'function', function: { name: 'f' } }] }], tools: [] }, 'messages[0].tool_calls[0].function.arguments'],
      [{ messages: [{ role: 'user', content: 'a' }], tools: { a: 1 } }, 'tools'],
      [{ messages: [{ role: 'user', content: 'a' }], tools: '[oops' }, 'tools'],
      [{ messages: [{ role: 'user', content: 'a' }], metadata: '{not json' }, 'metadata'],
      [{ messages: [{ role: 'user', content: 'a' }], metadata: '[1]' }, 'metadata'],
      [{ messages: [{ role: 'user', content: 'a' }], metadata: '{"tools": 3}' }, 'metadata.tools'],
      [{ uuid: 12, messages: [{ role: 'user', content: 'a' }], tools: [] }, 'uuid'],
    ];
    const text = cases.map(([row]) => line(row)).join('\n');
    const { examples, errors } = parseJsonlText(text, 'bad.jsonl');
    assert.equal(examples.length, 0);
    assert.deepEqual(errors.map((e) => [e.line, e.field]), cases.map(([, field], i) => [i + 1, field]));
    for (const e of errors) {
      assert.equal(e.file, 'bad.jsonl');
      assert.equal(e.kind, 'line');
      assert.ok(e.message.length > 0);
    }
  });

  test('semantic problems (unknown roles, bad tool entries) are left to the filters', () => {
    const row = { messages: [{ role: 'developer', content: 'x' }], tools: [{ type: 'retrieval' }] };
    const { examples, errors } = parseJsonlText(line(row), 'a.jsonl');
    assert.deepEqual(errors, []);
    assert.equal(examples[0]!.messages[0]!.role, 'developer');
  });
});

describe('normaliseRow', () => {
  test('an exotic input that throws while being read becomes a row error', () => {
    const hostile = {
      get messages(): unknown {
        throw new Error('boom');
      },
    };
    const result = normaliseRow(hostile, { file: 'f', line: 0, kind: 'row' });
    assert.equal(result.ok, false);
    if (!result.ok) assert.deepEqual([result.error.field, result.error.kind, result.error.line], ['$', 'row', 0]);
  });

  test('formatFieldPath', () => {
    assert.equal(formatFieldPath([]), '$');
    assert.equal(formatFieldPath(['messages', 3, 'tool_calls', 0, 'function', 'name']), 'messages[3].tool_calls[0].function.name');
  });
});

describe('parquet (Nemotron layout)', () => {
  test('reads the fixture: metadata.tools becomes the tool list; the malformed row is reported by index', async () => {
    const { examples, errors } = await readParquetFile(FIXTURE);
    assert.deepEqual(examples.map((e) => e.uuid), [
      '00000000-0000-4000-8000-000000000001',
      '00000000-0000-4000-8000-000000000002',
      '00000000-0000-4000-8000-000000000004',
    ]);
    assert.equal(errors.length, 1);
    assert.deepEqual({ ...errors[0]!, message: undefined }, { file: FIXTURE, line: 2, kind: 'row', field: 'metadata', message: undefined });
    const [first, second] = examples;
    assert.equal((first!.tools[0] as typeof weatherTool).function.name, 'get_weather');
    assert.equal(first!.messages[1]!.tool_calls?.[0]?.function.arguments, '{"city": "Paris"}');
    assert.deepEqual(first!.messages[0]!.tool_calls, []);
    assert.ok(!('id' in second!.messages[1]!.tool_calls![0]!), 'a null tool-call id is dropped');
    assert.equal(second!.tools.length, 2);
    assert.equal(first!.meta?.category, 'tool_calling');
    assert.deepEqual(first!.meta?.origin, { file: FIXTURE, line: 0, kind: 'row' });
    for (const ex of examples) assert.ok(Example.safeParse(ex).success);
  });

  test('importFile and parseFileBytes dispatch .parquet to the same reader', async () => {
    const fromFile = await importFile(FIXTURE);
    const fromBytes = await parseFileBytes(FIXTURE, await readFile(FIXTURE));
    assert.deepEqual(fromBytes, fromFile);
    assert.equal(fromFile.examples.length, 3);
  });
});

describe('importFile', () => {
  test('.jsonl, .json array (0-based rows), single .json object and JSONL named .json', async () => {
    const dir = await tempDir();
    const rows = [openAiRow({ uuid: 'a' }), openAiRow({ uuid: 'b' })];
    await writeFile(join(dir, 'x.jsonl'), `\uFEFF${rows.map(line).join('\n')}\n`);
    await writeFile(join(dir, 'arr.json'), JSON.stringify([rows[0], { nope: true }, rows[1]], null, 2));
    await writeFile(join(dir, 'one.json'), JSON.stringify(rows[0], null, 2));
    await writeFile(join(dir, 'lines.json'), rows.map(line).join('\n'));

    const jsonl = await importFile(join(dir, 'x.jsonl'));
    assert.deepEqual(jsonl.examples.map((e) => e.uuid), ['a', 'b'], 'a UTF-8 BOM is ignored');

    const arr = await importFile(join(dir, 'arr.json'));
    assert.deepEqual(arr.examples.map((e) => e.uuid), ['a', 'b']);
    assert.deepEqual(arr.errors.map((e) => [e.kind, e.line, e.field]), [['row', 1, 'messages']]);
    assert.deepEqual(arr.examples[1]!.meta?.origin, { file: join(dir, 'arr.json'), line: 2, kind: 'row' });

    assert.deepEqual((await importFile(join(dir, 'one.json'))).examples.map((e) => e.uuid), ['a']);
    assert.deepEqual((await importFile(join(dir, 'lines.json'))).examples.map((e) => e.uuid), ['a', 'b']);
  });

  test('unsupported extensions and missing files throw', async () => {
    await assert.rejects(importFile('data.csv'), /unsupported extension/);
    await assert.rejects(importFile(join(await tempDir(), 'missing.jsonl')));
  });
});

describe('filterCommand', () => {
  test('filters the parquet fixture: kept JSONL + report with reasons and import errors', async () => {
    const dir = await tempDir();
    const output = join(dir, 'out', 'kept.jsonl');
    const reportPath = join(dir, 'out', 'report.json');
    const report = await filterCommand({ input: FIXTURE, output, report: reportPath });
    assert.equal(report.total, 3);
    assert.equal(report.kept, 2);
    assert.equal(report.dropped, 1);
    assert.equal(report.reasons.tool_schema, 1);
    assert.equal(report.rejected[0]!.uuid, '00000000-0000-4000-8000-000000000004');
    assert.equal(report.rejected[0]!.line, 3);
    assert.match(report.rejected[0]!.reasons[0]!.detail, /book_flight/);
    assert.equal(report.importErrors.length, 1);
    assert.deepEqual(JSON.parse(await readFile(reportPath, 'utf8')), report);
    const kept = (await readFile(output, 'utf8')).trim().split('\n').map((l) => JSON.parse(l) as { uuid: string });
    assert.deepEqual(kept.map((k) => k.uuid), ['00000000-0000-4000-8000-000000000001', '00000000-0000-4000-8000-000000000002']);
    // The kept file re-imports to the same examples.
    const reimported = await importFile(output);
    assert.deepEqual(reimported.errors, []);
    assert.deepEqual(reimported.examples.map((e) => e.messages), (await readParquetFile(FIXTURE)).examples.slice(0, 2).map((e) => e.messages));
  });

  test('a custom filter list is honoured; an unknown one throws before any I/O', async () => {
    const dir = await tempDir();
    const report = await filterCommand({ input: FIXTURE, output: join(dir, 'k.jsonl'), report: join(dir, 'r.json'), filters: ['think_tags'] });
    assert.equal(report.kept, 3);
    assert.deepEqual(report.enabled, ['think_tags']);
    await assert.rejects(filterCommand({ input: FIXTURE, output: join(dir, 'k.jsonl'), report: join(dir, 'r.json'), filters: ['nope'] }), /unknown rule filter/);
  });
});
