/**
 * BFCL data handling: file validation with errors naming file, line and field; answers files; categories; what a
 * policy sees (tools as JSON schema, messages); decoding of policy outputs.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { BfclInputError, categoryKind, categoryLanguage, categoryOfId, discoverCategories, parseCategoryList, parseIdList, selectExamples, unsupportedReason } from '../../../../src/stages/eval/bfcl/categories';
import { checkerMode, type DecodedCall, type FunctionDoc } from '../../../../src/stages/eval/bfcl/checker';
import { BfclDataError, buildExamples, parseAnswers, parsePossibleAnswers, parseQuestions, type BfclExample } from '../../../../src/stages/eval/bfcl/data';
import { decodeAnswerResult, decodeOpenAiMessage, decodeQwenText } from '../../../../src/stages/eval/bfcl/decode';
import { parsePyJson, PyFloat, stringifyPyJson } from '../../../../src/stages/eval/bfcl/pyValue';
import { referenceCalls } from '../../../../src/stages/eval/bfcl/reference';
import { evalBfclCommand, parseEndpointSpec, parseS3Ref } from '../../../../src/cli/evalCommand';
import { AnswersPolicy, evaluateBfcl, loadCategory } from '../../../../src/stages/eval/bfcl/runner';
import { BfclResults, formatSummary, scoreExample } from '../../../../src/stages/eval/bfcl/score';
import { exampleMessages, exampleTools, languageSpecificDocs, toOpenAiTools } from '../../../../src/stages/eval/bfcl/tools';
import { bfclDataDir } from '../../../../src/infra/binaries';

const q = (id: string, fn: unknown = { name: 'f', description: 'F.', parameters: { type: 'dict', properties: { x: { type: 'integer' } }, required: ['x'] } }) =>
  JSON.stringify({ id, question: [[{ role: 'user', content: `question ${id}` }]], function: [fn] });

/** Expects a BfclDataError with this file, line and field. */
function throwsAt(fn: () => unknown, file: string, line: number, field: string | RegExp) {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof BfclDataError, String(e));
    assert.equal(e.file, file);
    assert.equal(e.line, line);
    if (typeof field === 'string') assert.equal(e.field, field);
    else assert.match(e.field, field);
    assert.ok(e.message.startsWith(`${file}:${line}:`), e.message);
    return true;
  });
}

describe('question and possible-answer files', () => {
  test('valid files parse; answers keep float literals', () => {
    const qs = parseQuestions(`${q('simple_python_0')}\n\n${q('simple_python_1')}\n`, 'q.json', 'simple_python');
    const as = parsePossibleAnswers('{"id": "simple_python_0", "ground_truth": [{"f": {"x": [1.0]}}]}\n{"id": "simple_python_1", "ground_truth": [{"f": {"x": [2]}}]}', 'a.json');
    const ex = buildExamples('simple_python', qs, as, { questions: 'q.json', answers: 'a.json' });
    assert.equal(ex.length, 2);
    assert.ok(ex[0]!.groundTruth![0]!['f']!['x']![0] instanceof PyFloat);
    assert.equal(ex[1]!.groundTruth![0]!['f']!['x']![0], 2);
  });
  test('not JSON: file and line', () => {
    throwsAt(() => parseQuestions(`${q('a')}\n{"id": "b", `, 'BFCL_v4_simple_python.json', 'simple_python'), 'BFCL_v4_simple_python.json', 2, '');
  });
  test('missing or wrong fields: file, line and field path', () => {
    throwsAt(() => parseQuestions(JSON.stringify({ id: 'a', question: [[{ role: 'user', content: 'x' }]] }), 'q.json', 'simple_python'), 'q.json', 1, 'function');
    throwsAt(() => parseQuestions(`${q('a')}\n${JSON.stringify({ id: 'b', question: [[{ content: 'x' }]], function: [] })}`, 'q.json', 'simple_python'), 'q.json', 2, 'question[0][0].role');
    throwsAt(() => parseQuestions(q('a', { name: 'f', parameters: { type: 'dict' } }), 'q.json', 'simple_python'), 'q.json', 1, 'function[0].parameters.properties');
    throwsAt(() => parsePossibleAnswers('{"id": "a", "ground_truth": [{"f": {"x": 1}}]}', 'a.json'), 'a.json', 1, 'ground_truth[0].f.x');
    throwsAt(() => parsePossibleAnswers('{"id": "a", "ground_truth": [{"f": {"x": [1]}, "g": {}}]}', 'a.json'), 'a.json', 1, 'ground_truth[0]');
  });
  test('types the checker cannot handle are refused in AST categories, with the field', () => {
    const bad = { name: 'f', parameters: { type: 'dict', properties: { x: { type: 'number' } } } };
    throwsAt(() => parseQuestions(q('a', bad), 'q.json', 'simple_python'), 'q.json', 1, 'function[0].parameters.properties.x.type');
    const noItems = { name: 'f', parameters: { type: 'dict', properties: { xs: { type: 'array' } } } };
    throwsAt(() => parseQuestions(q('a', noItems), 'q.json', 'multiple'), 'q.json', 1, 'function[0].parameters.properties.xs.items.type');
    const javaType = { name: 'f', parameters: { type: 'dict', properties: { s: { type: 'string' } } } };
    throwsAt(() => parseQuestions(q('a', javaType), 'q.json', 'simple_java'), 'q.json', 1, /\.s\.type$/);
    assert.equal(parseQuestions(q('a', bad), 'q.json', 'irrelevance').length, 1, 'irrelevance only needs well-formed docs');
  });
  test('duplicate ids, count mismatch, and expected functions missing from the docs', () => {
    throwsAt(() => parseQuestions(`${q('a')}\n${q('a')}`, 'q.json', 'simple_python'), 'q.json', 2, 'id');
    const qs = parseQuestions(`${q('a')}\n${q('b')}`, 'q.json', 'simple_python');
    assert.throws(() => buildExamples('simple_python', qs, parsePossibleAnswers('{"id": "a", "ground_truth": [{"f": {"x": [1]}}]}', 'a.json'), { questions: 'q.json', answers: 'a.json' }), /1 possible answers for 2 questions/);
    const wrong = parsePossibleAnswers('{"id": "a", "ground_truth": [{"f": {"x": [1]}}]}\n{"id": "b", "ground_truth": [{"g": {"x": [1]}}]}', 'a.json');
    throwsAt(() => buildExamples('simple_python', qs, wrong, { questions: 'q.json', answers: 'a.json' }), 'a.json', 2, 'ground_truth[0]');
  });
  test('loadCategory: unknown category names the available ones; a missing answer file is named', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'bfcl-data-'));
    mkdirSync(path.join(dir, 'possible_answer'));
    writeFileSync(path.join(dir, 'BFCL_v4_simple_python.json'), `${q('simple_python_0')}\n`);
    writeFileSync(path.join(dir, 'possible_answer', 'BFCL_v4_simple_python.json'), '{"id": "simple_python_0", "ground_truth": [{"f": {"x": [1]}}]}\n');
    writeFileSync(path.join(dir, 'BFCL_v4_live_multiple.json'), `${q('live_multiple_0-0-0')}\n`);
    writeFileSync(path.join(dir, 'BFCL_v4_live_irrelevance.json'), `${q('live_irrelevance_0-0-0')}\n`);
    assert.equal(loadCategory(dir, 'simple_python').length, 1);
    assert.equal(loadCategory(dir, 'live_irrelevance').length, 1);
    assert.throws(() => loadCategory(dir, 'parallel'), (e: unknown) => e instanceof BfclInputError && /available: live_irrelevance, simple_python/.test(e.message));
    assert.throws(() => loadCategory(dir, 'live_multiple'), /possible_answer\/BFCL_v4_live_multiple\.json does not exist/);
    assert.throws(() => loadCategory(dir, 'multi_turn_base'), /not supported/);
    assert.throws(() => loadCategory(dir, '../etc'), /not a category name/);
  });
});

describe('answers files (--answers)', () => {
  test('decoded calls, JSON-string arguments, text results, duplicate ids and bad lines', () => {
    const text = [
      '{"id": "simple_python_0", "result": [{"calculate_triangle_area": {"base": 10, "height": 5.0}}]}',
      '{"id": "irrelevance_0", "result": []}',
      '{"id": "parallel_0", "result": [{"spotify_play": "{\\"artist\\": \\"Taylor Swift\\", \\"duration\\": 20}"}]}',
      '',
      '{"id": "multiple_0", "result": "I cannot help with that."}',
    ].join('\n');
    const answers = parseAnswers(text, 'answers.jsonl');
    assert.equal(answers.size, 4);
    const first = answers.get('simple_python_0')!;
    assert.equal(first.line, 1);
    const args = (first.result as Record<string, Record<string, unknown>>[])[0]!['calculate_triangle_area']!;
    assert.equal(args['base'], 10);
    assert.ok(args['height'] instanceof PyFloat);
    assert.deepEqual(answers.get('parallel_0')!.result, [{ spotify_play: { artist: 'Taylor Swift', duration: 20 } }]);
    assert.equal(answers.get('multiple_0')!.line, 5);
    assert.deepEqual(decodeAnswerResult(answers.get('irrelevance_0')!.result), { calls: [] });
    assert.match(decodeAnswerResult(answers.get('multiple_0')!.result).error ?? '', /text answer/);
    throwsAt(() => parseAnswers('{"id": "a", "result": []}\n{"id": "a", "result": []}', 'ans.jsonl'), 'ans.jsonl', 2, 'id');
    throwsAt(() => parseAnswers('{"id": "a", "result": []}\n\n{"result": []}', 'ans.jsonl'), 'ans.jsonl', 3, 'id');
    throwsAt(() => parseAnswers('{"id": "a", "result": [{"f": "{not json"}]}', 'ans.jsonl'), 'ans.jsonl', 1, 'result[0].f');
    throwsAt(() => parseAnswers('{"id": "a", "result": [}', 'ans.jsonl'), 'ans.jsonl', 1, '');
  });
  test('scoring an answers file: missing ids are no_answer; the results document validates', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'bfcl-ans-'));
    mkdirSync(path.join(dir, 'possible_answer'));
    writeFileSync(path.join(dir, 'BFCL_v4_simple_python.json'), `${q('simple_python_0')}\n${q('simple_python_1')}\n${q('simple_python_2')}\n`);
    writeFileSync(path.join(dir, 'possible_answer', 'BFCL_v4_simple_python.json'), [0, 1, 2].map((i) => `{"id": "simple_python_${i}", "ground_truth": [{"f": {"x": [${i}]}}]}`).join('\n'));
    writeFileSync(path.join(dir, 'BFCL_v4_irrelevance.json'), `${q('irrelevance_0')}\n`);
    const answers = parseAnswers('{"id": "simple_python_0", "result": [{"f": {"x": 0}}]}\n{"id": "simple_python_1", "result": [{"f": {"x": 7}}]}\n{"id": "irrelevance_0", "result": []}', 'a.jsonl');
    const results = await evaluateBfcl(new AnswersPolicy(answers, 'a.jsonl'), { categories: ['simple_python', 'irrelevance'], dataDir: dir });
    BfclResults.parse(JSON.parse(JSON.stringify(results)));
    assert.deepEqual(results.categories['simple_python'], { accuracy: 1 / 3, correct: 1, total: 3, reasons: { 'value_error:x': 1, no_answer: 1 } });
    assert.deepEqual(results.overall, { accuracy: 0.5, correct: 2, total: 4 });
    assert.deepEqual(results.examples.map((e) => [e.id, e.valid, e.reason ?? null]), [
      ['simple_python_0', true, null], ['simple_python_1', false, 'value_error:x'], ['simple_python_2', false, 'no_answer'], ['irrelevance_0', true, null],
    ]);
    assert.match(formatSummary(results), /simple_python +33\.3% +1\/3 +failures: value_error 1, no_answer 1/);
    const limited = await evaluateBfcl(new AnswersPolicy(answers, 'a.jsonl'), { categories: ['simple_python'], dataDir: dir, limit: 1 });
    assert.deepEqual(limited.overall, { accuracy: 1, correct: 1, total: 1 });
  });
});

describe('categories', () => {
  test('kind, language and checker mode follow the name, as in BFCL', () => {
    assert.equal(categoryKind('irrelevance'), 'irrelevance');
    assert.equal(categoryKind('live_irrelevance'), 'irrelevance');
    assert.equal(categoryKind('live_relevance'), 'relevance');
    assert.equal(categoryKind('live_parallel_multiple'), 'ast');
    assert.equal(categoryLanguage('simple_java'), 'java');
    assert.equal(categoryLanguage('simple_javascript'), 'javascript');
    assert.equal(categoryLanguage('live_simple'), 'python');
    assert.equal(checkerMode('parallel_multiple'), 'parallel');
    assert.equal(checkerMode('live_multiple'), 'multiple');
    assert.equal(checkerMode('simple_java'), 'simple');
    assert.ok(unsupportedReason('multi_turn_base'));
    assert.equal(unsupportedReason('live_simple'), undefined);
  });
  test('discovery and --category lists', () => {
    const found = discoverCategories(['BFCL_v4_simple_python.json', 'BFCL_v4_live_relevance.json', 'BFCL_v4_live_simple.json', 'BFCL_v4_multi_turn_base.json', 'LICENSE'], ['BFCL_v4_simple_python.json']);
    assert.deepEqual(found, ['live_relevance', 'simple_python']);
    assert.deepEqual(parseCategoryList('simple_python, irrelevance,simple_python', []), ['simple_python', 'irrelevance']);
    assert.deepEqual(parseCategoryList('all', found), found);
    assert.throws(() => parseCategoryList('', found), BfclInputError);
    assert.throws(() => parseCategoryList('memory_kv', found), /not supported/);
  });
  test('--ids: an id names its category; a selection keeps BFCL\'s order, applies --limit after it and names a missing id', () => {
    assert.equal(categoryOfId('simple_python_12'), 'simple_python');
    assert.equal(categoryOfId('live_simple_0-0-0'), 'live_simple');
    assert.equal(categoryOfId('live_parallel_multiple_3-1-0'), 'live_parallel_multiple');
    assert.equal(categoryOfId('multi_turn_base_3'), 'multi_turn_base');
    assert.throws(() => categoryOfId('simple_python'), /not a BFCL example id/);
    assert.deepEqual(parseIdList('multi_turn_base_3, simple_python_0,multi_turn_base_1,simple_python_0'), {
      ids: ['multi_turn_base_3', 'simple_python_0', 'multi_turn_base_1'],
      categories: ['multi_turn_base', 'simple_python'],
    });
    assert.throws(() => parseIdList(' , '), /no id given/);
    const ex = [0, 1, 2, 3].map((i) => ({ id: `simple_python_${i}` }));
    assert.deepEqual(selectExamples('simple_python', ex, ['simple_python_3', 'simple_python_1', 'irrelevance_0'], undefined, 'f').map((e) => e.id), ['simple_python_1', 'simple_python_3']);
    assert.deepEqual(selectExamples('simple_python', ex, ['simple_python_3', 'simple_python_1'], 1, 'f').map((e) => e.id), ['simple_python_1']);
    assert.deepEqual(selectExamples('simple_python', ex, undefined, 2, 'f').map((e) => e.id), ['simple_python_0', 'simple_python_1']);
    assert.throws(() => selectExamples('simple_python', ex, ['simple_python_9'], undefined, 'BFCL_v4_simple_python.json'), /BFCL_v4_simple_python.json has no example simple_python_9/);
  });
});

describe('what the policy sees', () => {
  const doc: FunctionDoc = {
    name: 'geo.distance',
    description: 'Distance.',
    parameters: {
      type: 'dict',
      properties: {
        a: { type: 'tuple', items: { type: 'float' }, description: 'From.' },
        km: { type: 'float', description: 'Scale.' },
        opts: { type: 'dict', properties: { mode: { type: 'string' }, w: { type: 'float' } }, description: 'Options.' },
        anything: { type: 'any', description: 'Any.' },
        rows: { type: 'array', items: { type: 'dict', properties: { n: { type: 'integer' } } }, description: 'Rows.' },
      },
      required: ['a'],
    },
  };
  const example = (category: string, functions: FunctionDoc[] = [doc]): BfclExample => ({ id: `${category}_0`, category, question: [[{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'How far?' }]], functions });

  test('Python docs → OpenAI tools: dict→object, float→number (+format), tuple→array, any→string, hint appended', () => {
    const [tool] = exampleTools(example('simple_python'));
    assert.equal(tool!.type, 'function');
    assert.equal(tool!.function.name, 'geo.distance');
    assert.equal(tool!.function.description, 'Distance. Note that the provided function is in Python 3 syntax.');
    const params = tool!.function.parameters as { type: string; properties: Record<string, Record<string, unknown>>; required: string[] };
    assert.equal(params.type, 'object');
    assert.deepEqual(params.required, ['a']);
    assert.deepEqual(params.properties['a'], { type: 'array', items: { type: 'number' }, description: 'From.' });
    assert.deepEqual(params.properties['km'], { type: 'number', format: 'float', description: 'Scale. This is a float type value.' });
    assert.deepEqual(params.properties['opts']!['properties'], { mode: { type: 'string' }, w: { type: 'number', format: 'float', description: ' This is a float type value.' } });
    assert.equal(params.properties['opts']!['type'], 'object');
    assert.equal(params.properties['anything']!['type'], 'string');
    assert.deepEqual(params.properties['rows']!['items'], { type: 'object', properties: { n: { type: 'integer' } } });
    assert.equal(doc.parameters.properties['km']!['type'], 'float', 'the example\'s docs are not modified');
  });
  test('endpoint names: a.b → a_b', () => {
    assert.equal(toOpenAiTools([doc], { dotToUnderscore: true })[0]!.function.name, 'geo_distance');
  });
  test('Java / JavaScript: every parameter is a string described with its real type', () => {
    const javaDoc: FunctionDoc = { name: 'M.run', description: 'Run.', parameters: { type: 'dict', properties: { ids: { type: 'ArrayList', items: { type: 'long' }, description: 'Ids.' }, obj: { type: 'any', description: 'Obj.' } }, required: ['ids'] } };
    const [j] = languageSpecificDocs([javaDoc], 'simple_java');
    assert.equal(j!.description, 'Run. Note that the provided function is in Java 8 SDK syntax.');
    assert.deepEqual(j!.parameters.properties['ids'], { type: 'string', description: 'Ids. This is Java ArrayList type parameter in string representation. The list elements are of type long; they are not in string representation.' });
    assert.equal(j!.parameters.properties['obj']!['description'], 'Obj. This parameter can be of any type of Java object in string representation.');
    const jsDoc: FunctionDoc = { name: 'draw', description: 'Draw.', parameters: { type: 'dict', properties: { o: { type: 'dict', properties: { c: { type: 'String' } }, description: 'O.' } } } };
    const [s] = toOpenAiTools(languageSpecificDocs([jsDoc], 'simple_javascript'));
    assert.deepEqual(s!.function.parameters['properties'], { o: { type: 'string', description: 'O. This is JavaScript dict type parameter in string representation. The dictionary entries have the following schema; they are not in string representation. {"c": {"type": "String"}}' } });
  });
  test('messages: the first turn, system message included', () => {
    assert.deepEqual(exampleMessages(example('simple_python')), [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'How far?' }]);
  });
});

describe('decoding policy outputs', () => {
  test('Qwen text: <tool_call> blocks after the last </think>; invalid JSON blocks skipped; malformed calls undecodable', () => {
    const call = (name: string, args: string) => `<tool_call>\n{"name": "${name}", "arguments": ${args}}\n</tool_call>`;
    assert.deepEqual(decodeQwenText(`<think>\nplan ${call('ignored', '{}')}\n</think>\n\n${call('a.b', '{"x": 1}')}\n${call('c', '{"y": [1.5]}')}<|im_end|>`), { calls: [{ 'a.b': { x: 1 } }, { c: { y: [new PyFloat(1.5)] } }] });
    assert.deepEqual(decodeQwenText('The weather is fine.'), { calls: [] });
    assert.deepEqual(decodeQwenText(`<tool_call>\n{"name": "a", "arguments": {oops}}\n</tool_call>\n${call('b', '{}')}`), { calls: [{ b: {} }] });
    assert.match(decodeQwenText(call('a', '"x=1"')).error ?? '', /not a JSON object/);
    assert.match(decodeQwenText('<tool_call>\n[1, 2]\n</tool_call>').error ?? '', /not a JSON object/);
    assert.ok(decodeQwenText(`${call('a', '{"v": 2.0}')}`).calls[0] !== undefined);
    assert.ok(((decodeQwenText(call('a', '{"v": 2.0}')).calls[0] as Record<string, Record<string, unknown>>)['a']!['v']) instanceof PyFloat);
  });
  test('OpenAI messages: native tool calls, text without calls, bad arguments', () => {
    assert.deepEqual(decodeOpenAiMessage({ content: null, tool_calls: [{ function: { name: 'geo_distance', arguments: '{"a": [1, 2.0]}' } }] }), { calls: [{ geo_distance: { a: [1, new PyFloat(2)] } }] });
    assert.deepEqual(decodeOpenAiMessage({ content: 'No function fits.' }), { calls: [] });
    assert.match(decodeOpenAiMessage({ tool_calls: [{ function: { name: 'f', arguments: '{"a": ' } }] }).error ?? '', /not valid JSON/);
  });
});

describe('cm2 eval bfcl (command)', () => {
  test('policy specs', () => {
    assert.deepEqual(parseEndpointSpec('openai:Qwen/Qwen3-8B@http://localhost:8000/v1'), { model: 'Qwen/Qwen3-8B', baseUrl: 'http://localhost:8000/v1' });
    assert.deepEqual(parseEndpointSpec('openai:gpt-4o@2024@https://api.openai.com/v1'), { model: 'gpt-4o@2024', baseUrl: 'https://api.openai.com/v1' });
    assert.throws(() => parseEndpointSpec('openai:gpt-4o'), /openai:MODEL@URL/);
    assert.deepEqual(parseS3Ref('s3://cm2/runs/demo/sft/final/'), { bucket: 'cm2', prefix: 'runs/demo/sft/final' });
    assert.throws(() => parseS3Ref('s3://cm2'), /s3:\/\/BUCKET\/PREFIX/);
  });
  test('--answers scores a file of reference answers; the results file keeps float literals', { skip: existsSync(bfclDataDir()) ? false : 'no BFCL data' }, async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'bfcl-cli-'));
    const lines = ['simple_python', 'parallel', 'irrelevance'].flatMap((c) => loadCategory(bfclDataDir(), c, 4)).map((ex) => stringifyPyJson({ id: ex.id, result: referenceCalls(ex) }));
    writeFileSync(path.join(dir, 'answers.jsonl'), `${lines.join('\n')}\n{"id": "simple_java_0", "result": []}\n`);
    const out = path.join(dir, 'results.json');
    const log = console.log;
    console.log = () => undefined;
    try {
      const results = await evalBfclCommand({ answers: path.join(dir, 'answers.jsonl'), category: 'simple_python,parallel,irrelevance', limit: '4', out, quiet: true }, () => {
        throw new Error('no config needed');
      });
      assert.deepEqual(results.overall, { accuracy: 1, correct: 12, total: 12 });
    } finally {
      console.log = log;
    }
    const written = readFileSync(out, 'utf8');
    BfclResults.parse(JSON.parse(written));
    // The recorded calls read back with their Python types and score the same (they can be re-scored as answers).
    const typed = parsePyJson(written) as unknown as { examples: { id: string; category: string; calls: DecodedCall[] }[] };
    for (const e of typed.examples) {
      const ex = loadCategory(bfclDataDir(), e.category, 4).find((x) => x.id === e.id)!;
      assert.equal(scoreExample(ex, { calls: e.calls }).valid, true, e.id);
    }
    await assert.rejects(evalBfclCommand({ policy: 'openai:m@http://x', answers: 'a.jsonl', quiet: true }, () => { throw new Error('unused'); }), /exactly one of --policy/);
  });
  test('--ids: only the named examples of BFCL\'s files, their categories taken from the ids; a missing id or one outside --category is an error', { skip: existsSync(bfclDataDir()) ? false : 'no BFCL data' }, async () => {
    const noConfig = () => {
      throw new Error('no config needed');
    };
    const log = console.log;
    console.log = () => undefined;
    try {
      const r = await evalBfclCommand({ policy: 'reference', ids: 'irrelevance_2,simple_python_5,simple_python_1', quiet: true }, noConfig);
      assert.deepEqual(Object.keys(r.categories), ['irrelevance', 'simple_python']);
      assert.deepEqual(r.examples.map((e) => e.id), ['irrelevance_2', 'simple_python_1', 'simple_python_5']);
      assert.deepEqual(r.ids, ['irrelevance_2', 'simple_python_5', 'simple_python_1']);
      assert.deepEqual(r.overall, { accuracy: 1, correct: 3, total: 3 });
      BfclResults.parse(r);
      // with --category: the categories none of the ids is in are left out, not reported with 0 examples
      const all = await evalBfclCommand({ policy: 'reference', category: 'all', ids: 'simple_python_1', quiet: true }, noConfig);
      assert.deepEqual(Object.keys(all.categories), ['simple_python']);
      assert.equal(all.overall.total, 1);
      await assert.rejects(evalBfclCommand({ policy: 'reference', ids: 'simple_python_1,simple_python_99999', quiet: true }, noConfig), /BFCL_v4_simple_python\.json has no example simple_python_99999/);
      await assert.rejects(evalBfclCommand({ policy: 'reference', category: 'simple_python', ids: 'simple_python_1,parallel_0', quiet: true }, noConfig), /--ids parallel_0: not of the categories evaluated \(simple_python\)/);
    } finally {
      console.log = log;
    }
  });
});
