import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Example } from '../../../../src/kernel/schema';
import { buildFilterMessages, cascadeDecision, cascadeOf, FILTER_JSON_SCHEMA, FILTER_SYSTEM_PROMPT, filterCacheSalt, parseFilterVerdict, type PassOutcome } from '../../../../src/stages/prepare/llmFilter';
import { FilterCascade, REFERENCE_CASCADE } from '../../../../src/run/config';

const example: Example = {
  uuid: 'u1',
  messages: [
    { role: 'user', content: 'Weather in Zürich?', tool_calls: [] },
    {
      role: 'assistant',
      content: '<think>\nCall the tool.\n</think>',
      tool_calls: [{ id: 'c1', type: 'function', function: { name: 'weather', arguments: '{"city":"Zürich"}' } }],
    },
    { role: 'tool', content: '{"temp": 3}' },
    { role: 'assistant', content: '<think>\nAnswer.\n</think>\n\nIt is 3°C.' },
  ],
  tools: [{ type: 'function', function: { name: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
  meta: { source: 'secret-provenance.jsonl', line: 7 },
};

test('buildFilterMessages: system prompt + reference user format, meta never shown', () => {
  const msgs = buildFilterMessages(example);
  assert.equal(msgs.length, 2);
  assert.deepEqual(msgs[0], { role: 'system', content: FILTER_SYSTEM_PROMPT });
  const expected = '# Messages:\n' + JSON.stringify(example.messages, null, 2) + '\n# Candidate Tools:\n' + JSON.stringify(example.tools, null, 2);
  assert.equal(msgs[1]?.role, 'user');
  assert.equal(msgs[1]?.content, expected);
  assert.ok(msgs[1]?.content.startsWith('# Messages:\n[\n  {\n    "role": "user",'));
  assert.ok(msgs[1]?.content.includes('Zürich'), 'non-ASCII is kept, not escaped');
  assert.ok(!msgs[1]?.content.includes('secret-provenance'));
});

test('the system prompt states what the reference prompt asks', () => {
  for (const phrase of ['simulated', 'candidate', '<think>', 'ignore', 'strict', '"Reasoning"', '"NoError"']) {
    assert.ok(FILTER_SYSTEM_PROMPT.toLowerCase().includes(phrase.toLowerCase()), phrase);
  }
});

test('structured-output schema is strict-mode shaped', () => {
  assert.equal(FILTER_JSON_SCHEMA.schema.additionalProperties, false);
  assert.deepEqual([...FILTER_JSON_SCHEMA.schema.required], ['Reasoning', 'NoError']);
});

test('parseFilterVerdict: booleans', () => {
  assert.deepEqual(parseFilterVerdict('{"Reasoning": "fine", "NoError": true}'), { ok: true, value: { noError: true, reasoning: 'fine' } });
  assert.deepEqual(parseFilterVerdict('{"Reasoning": "wrong arg", "NoError": false}'), { ok: true, value: { noError: false, reasoning: 'wrong arg' } });
  assert.deepEqual(parseFilterVerdict('```json\n{"Reasoning": "x", "NoError": true}\n```'), { ok: true, value: { noError: true, reasoning: 'x' } });
});

test('parseFilterVerdict: the string "false" means false (the reference quirk bool("false") is fixed)', () => {
  assert.deepEqual(parseFilterVerdict('{"Reasoning": "r", "NoError": "false"}'), { ok: true, value: { noError: false, reasoning: 'r' } });
  assert.deepEqual(parseFilterVerdict('{"Reasoning": "r", "NoError": "FALSE"}'), { ok: true, value: { noError: false, reasoning: 'r' } });
  assert.deepEqual(parseFilterVerdict('{"Reasoning": "r", "NoError": " True "}'), { ok: true, value: { noError: true, reasoning: 'r' } });
});

test('parseFilterVerdict: anything else is a parse failure', () => {
  for (const bad of [
    '{"Reasoning": "r"}',
    '{"Reasoning": "r", "NoError": null}',
    '{"Reasoning": "r", "NoError": 1}',
    '{"Reasoning": "r", "NoError": "yes"}',
    '[true]',
    'I think it is fine.',
  ]) {
    assert.equal(parseFilterVerdict(bad).ok, false, bad);
  }
});

test('parseFilterVerdict: missing Reasoning is tolerated', () => {
  assert.deepEqual(parseFilterVerdict('{"NoError": true}'), { ok: true, value: { noError: true, reasoning: '' } });
});

test('FilterCascade default is the reference run.sh cascade', () => {
  const c = FilterCascade.parse({});
  assert.deepEqual(
    c.passes.map((p) => p.effort),
    ['low', 'low', 'medium', 'medium', 'high', 'high', 'high', 'high'],
  );
  assert.deepEqual([...REFERENCE_CASCADE], c.passes.map((p) => p.effort));
  assert.deepEqual(cascadeOf(['high']).passes, [{ effort: 'high' }]);
  assert.throws(() => FilterCascade.parse({ passes: [] }));
  assert.throws(() => FilterCascade.parse({ passes: [{ effort: 'extreme' }] }));
});

test('cache salts differ between identical passes', () => {
  assert.equal(filterCacheSalt(0, 'low'), 'filter-pass-0-low');
  assert.notEqual(filterCacheSalt(0, 'low'), filterCacheSalt(1, 'low'));
});

const pass = (noError: boolean, reasoning = 'r'): PassOutcome => ({ ok: true, value: { noError, reasoning } });

test('cascadeDecision: pending until every pass ran, kept if all pass', () => {
  const c = cascadeOf(['low', 'medium', 'high']);
  assert.deepEqual(cascadeDecision([], c), { status: 'pending', nextPass: 0, effort: 'low' });
  assert.deepEqual(cascadeDecision([pass(true)], c), { status: 'pending', nextPass: 1, effort: 'medium' });
  assert.deepEqual(cascadeDecision([pass(true), pass(true), pass(true)], c), { status: 'kept', passes: 3 });
});

test('cascadeDecision: early exit at the first failing pass', () => {
  const c = cascadeOf(['low', 'medium', 'high']);
  const d = cascadeDecision([pass(true), pass(false, 'wrong city'), pass(true)], c);
  assert.equal(d.status, 'dropped');
  if (d.status === 'dropped') {
    assert.equal(d.atPass, 1);
    assert.equal(d.reason.code, 'llm_filter');
    assert.equal(d.reason.detail, 'pass 2/3 (effort medium): judged erroneous: wrong city');
  }
  // Decided at pass 0 even though no further outcome exists.
  assert.equal(cascadeDecision([pass(false)], c).status, 'dropped');
});

test('cascadeDecision: no verdict drops the example with its own code', () => {
  const c = cascadeOf(['low', 'low']);
  const d = cascadeDecision([{ ok: false, reason: 'unparseable answer after 3 attempt(s)' }], c);
  assert.equal(d.status, 'dropped');
  if (d.status === 'dropped') {
    assert.equal(d.atPass, 0);
    assert.equal(d.reason.code, 'llm_filter_no_verdict');
    assert.match(d.reason.detail, /^pass 1\/2 \(effort low\): no usable verdict: unparseable/);
  }
});

test('cascadeDecision: long reasoning is truncated in the drop reason', () => {
  const d = cascadeDecision([pass(false, 'x'.repeat(2000))], cascadeOf(['low']));
  if (d.status !== 'dropped') assert.fail('expected dropped');
  assert.ok(d.reason.detail.length < 600);
  assert.ok(d.reason.detail.endsWith('…'));
});
