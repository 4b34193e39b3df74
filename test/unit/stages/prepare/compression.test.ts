import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Example } from '../../../../src/kernel/schema';
import {
  buildCompressionMessages,
  COMPRESSION_SYSTEM_PROMPT,
  countAssistantMessages,
  parseCompression,
  reassembleCompressed,
  splitThinking,
  toStructuredColdStart,
} from '../../../../src/stages/prepare/compression';

const call = { id: 'c1', type: 'function', function: { name: 'search', arguments: '{"q":"flights"}' } };

const example: Example = {
  uuid: 'u1',
  messages: [
    { role: 'user', content: 'Find flights to Oslo.' },
    { role: 'assistant', content: '<think>\n  I should search for flights first, then summarise.  \n</think>\n\nleftover text', tool_calls: [call] },
    { role: 'tool', content: '{"flights": 2}' },
    { role: 'assistant', content: '<think>\nTwo flights found; tell the user.\n</think>\n\nThere are 2 flights to Oslo.', tool_calls: [] },
  ],
  tools: [{ type: 'function', function: { name: 'search', parameters: { type: 'object', properties: { q: { type: 'string' } } } } }],
  meta: { source: 'x' },
};

test('splitThinking: thinking stripped, reply only without tool calls', () => {
  assert.deepEqual(splitThinking('<think>\n a \n</think>\n\n b ', false), { thinking: 'a', reply: 'b' });
  assert.deepEqual(splitThinking('<think>\n a \n</think>\n\n b ', true), { thinking: 'a', reply: '' });
  assert.deepEqual(splitThinking('<think>a</think>', false), { thinking: 'a', reply: '' });
  // Malformed input (excluded by the think_tags filter) is handled leniently.
  assert.deepEqual(splitThinking('no tags here', false), { thinking: '', reply: 'no tags here' });
  assert.deepEqual(splitThinking('<think> unterminated', false), { thinking: 'unterminated', reply: '' });
});

test('toStructuredColdStart: the §1.3 form', () => {
  const s = toStructuredColdStart(example);
  assert.equal(s.uuid, 'u1');
  assert.deepEqual(s.messages, [
    { role: 'user', content: 'Find flights to Oslo.', tool_calls: [] },
    { role: 'assistant', content: { thinking: 'I should search for flights first, then summarise.', reply: '' }, tool_calls: [call] },
    { role: 'tool', content: '{"flights": 2}', tool_calls: [] },
    { role: 'assistant', content: { thinking: 'Two flights found; tell the user.', reply: 'There are 2 flights to Oslo.' }, tool_calls: [] },
  ]);
  assert.ok(!('meta' in s));
});

test('buildCompressionMessages: user message is {tools, messages} as 4-space JSON', () => {
  const msgs = buildCompressionMessages(example);
  assert.deepEqual(msgs[0], { role: 'system', content: COMPRESSION_SYSTEM_PROMPT });
  const s = toStructuredColdStart(example);
  assert.equal(msgs[1]?.content, JSON.stringify({ tools: example.tools, messages: s.messages }, null, 4));
  assert.ok(msgs[1]?.content.startsWith('{\n    "tools": [\n        {'));
});

test('parseCompression: bare array (reference format) and wrapped object', () => {
  assert.deepEqual(parseCompression('[{"thinking": " a "}, {"thinking": "b"}]', 2), { ok: true, value: ['a', 'b'] });
  assert.deepEqual(parseCompression('{"thinkings": [{"thinking": "a"}, {"thinking": "b"}]}', 2), { ok: true, value: ['a', 'b'] });
  assert.deepEqual(parseCompression('```json\n[{"thinking": "a"}]\n```', 1), { ok: true, value: ['a'] });
  assert.deepEqual(parseCompression('Sure! [{"thinking": "a"}]', 1), { ok: true, value: ['a'] });
});

test('parseCompression: count and content validation', () => {
  const mismatch = parseCompression('[{"thinking": "a"}]', 2);
  assert.deepEqual(mismatch, { ok: false, error: 'assistant message count mismatch: parsed=1 vs expected=2' });
  assert.deepEqual(parseCompression('[{"thinking": "a"}, {"thinking": "   "}]', 2), { ok: false, error: 'item 1.thinking must be non-empty' });
  assert.deepEqual(parseCompression('[{"thinking": 3}]', 1), { ok: false, error: 'item 0.thinking must be a string' });
  assert.deepEqual(parseCompression('["a"]', 1), { ok: false, error: 'item 0 must be an object' });
  assert.deepEqual(parseCompression('[{"text": "a"}]', 1), { ok: false, error: 'item 0.thinking must be a string' });
  assert.equal(parseCompression('{"other": []}', 0).ok, false);
  assert.equal(parseCompression('not json', 1).ok, false);
});

test('reassembleCompressed: exact strings', () => {
  const out = reassembleCompressed(example, ['Search flights, then summarise.', '  Tell the user.  ']);
  assert.deepEqual(out.messages, [
    { role: 'user', content: 'Find flights to Oslo.', tool_calls: [] },
    // Tool-call message: only the think block, text after </think> dropped, tool_calls kept.
    { role: 'assistant', content: '<think>\nSearch flights, then summarise.\n</think>', tool_calls: [call] },
    { role: 'tool', content: '{"flights": 2}', tool_calls: [] },
    { role: 'assistant', content: '<think>\nTell the user.\n</think>\n\nThere are 2 flights to Oslo.', tool_calls: [] },
  ]);
  assert.equal(out.uuid, 'u1');
  assert.deepEqual(out.tools, example.tools);
  assert.deepEqual(out.meta, example.meta);
  // The input is not mutated.
  assert.match(example.messages[1]!.content, /leftover text/);
});

test('reassembleCompressed: final reply without reply text has no trailing separator', () => {
  const ex: Example = { uuid: 'u2', messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: '<think>x</think>' }], tools: [] };
  assert.equal(reassembleCompressed(ex, ['y']).messages[1]?.content, '<think>\ny\n</think>');
});

test('reassembleCompressed: keeps tool_call_id and name when present', () => {
  const ex: Example = {
    uuid: 'u3',
    messages: [
      { role: 'user', content: 'q' },
      { role: 'assistant', content: '<think>t</think>', tool_calls: [call] },
      { role: 'tool', content: '{}', tool_call_id: 'c1', name: 'search' },
      { role: 'assistant', content: '<think>t2</think>\n\nok' },
    ],
    tools: [],
  };
  assert.deepEqual(reassembleCompressed(ex, ['a', 'b']).messages[2], { role: 'tool', content: '{}', tool_calls: [], tool_call_id: 'c1', name: 'search' });
});

test('reassembleCompressed: count mismatch throws', () => {
  assert.equal(countAssistantMessages(example), 2);
  assert.throws(() => reassembleCompressed(example, ['only one']), /1 thinkings for 2 assistant messages/);
});
