import { test } from 'node:test';
import assert from 'node:assert/strict';
import { extractJson } from '../../../src/kernel/jsonExtract';

test('raw JSON parses as is', () => {
  assert.deepEqual(extractJson('{"a": 1}'), { ok: true, value: { a: 1 } });
  assert.deepEqual(extractJson('  [1, 2]\n'), { ok: true, value: [1, 2] });
});

test('a leading code fence is stripped, with or without a language tag', () => {
  assert.deepEqual(extractJson('```json\n{"a": 1}\n```'), { ok: true, value: { a: 1 } });
  assert.deepEqual(extractJson('```\n[{"thinking": "x"}]\n```\n'), { ok: true, value: [{ thinking: 'x' }] });
  assert.deepEqual(extractJson('```JSON\n{"a": 1}'), { ok: true, value: { a: 1 } }, 'unterminated fence');
  assert.deepEqual(extractJson('```{"a": 1}```'), { ok: true, value: { a: 1 } }, 'JSON on the fence line');
});

test('prose around the value: slice from the first opener to the last closer', () => {
  assert.deepEqual(extractJson('Here you go: [{"thinking": "a"}] Hope it helps.'), { ok: true, value: [{ thinking: 'a' }] });
  assert.deepEqual(extractJson('Verdict: {"Reasoning": "ok", "NoError": true} done'), { ok: true, value: { Reasoning: 'ok', NoError: true } });
});

test('the outermost bracket pair is tried first', () => {
  // The "[1]" inside the string must not be taken for the answer.
  const text = 'Answer: {"Reasoning": "see step [1]", "NoError": false}';
  assert.deepEqual(extractJson(text), { ok: true, value: { Reasoning: 'see step [1]', NoError: false } });
});

test('fenced blocks are tried when everything else fails', () => {
  const text = 'First attempt:\n```json\n{broken\n```\nFixed:\n```json\n{"a": 2}\n```\n';
  assert.deepEqual(extractJson(text), { ok: true, value: { a: 2 } });
});

test('expect: candidates of the wrong shape are skipped', () => {
  assert.deepEqual(extractJson('[1]', { expect: 'object' }).ok, false);
  assert.deepEqual(extractJson('"just a string"', { expect: 'array' }).ok, false);
  // The raw text is an object; the slice finds the array inside it.
  assert.deepEqual(extractJson('{"x": [1, 2]}', { expect: 'array' }), { ok: true, value: [1, 2] });
});

test('failures say why', () => {
  const r = extractJson('no json here');
  assert.equal(r.ok, false);
  if (!r.ok) assert.match(r.error, /no JSON value found/);
  const empty = extractJson('');
  assert.equal(empty.ok, false);
  const shaped = extractJson('[1]', { expect: 'object' });
  if (!shaped.ok) assert.match(shaped.error, /expected a JSON object, found array/);
});
