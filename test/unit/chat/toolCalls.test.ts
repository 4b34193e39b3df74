import assert from 'node:assert/strict';
import { test } from 'node:test';
import { errorToolCallText, NO_TOOL_CALL_FOUND, parseToolCalls, splitThinking, stripLoneSurrogates } from '../../../src/chat/toolCalls';

const THINK = '<think>\nI need the weather.\n</think>\n\n';

test('no <tool_call>: a final reply, no calls, no errors', () => {
  const r = parseToolCalls(`${THINK}It is sunny.`);
  assert.deepEqual(r, { hasToolCall: false, normalText: `${THINK}It is sunny.`, calls: [], errors: [] });
});

test('one call with "arguments"; normalText is the text before the first \\n<tool_call>\\n', () => {
  const r = parseToolCalls(`${THINK}<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>`);
  assert.equal(r.hasToolCall, true);
  assert.deepEqual(r.calls, [{ name: 'get_weather', arguments: { city: 'Oslo' } }]);
  assert.deepEqual(r.errors, []);
  assert.equal(r.normalText, THINK.slice(0, -1));
});

test('"parameters" is accepted and wins over "arguments"', () => {
  const r = parseToolCalls('\n<tool_call>\n{"name": "f", "parameters": {"a": 1}, "arguments": {"a": 2}}\n</tool_call>');
  assert.deepEqual(r.calls, [{ name: 'f', arguments: { a: 1 } }]);
  assert.deepEqual(r.errors, []);
});

test('several blocks (parallel calls) and a block holding a list of calls', () => {
  const text =
    'x\n<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n<tool_call>\n[{"name": "b", "arguments": {"k": "v"}}, {"name": "c", "parameters": {"n": 2}}]\n</tool_call>';
  const r = parseToolCalls(text);
  assert.deepEqual(r.calls, [
    { name: 'a', arguments: {} },
    { name: 'b', arguments: { k: 'v' } },
    { name: 'c', arguments: { n: 2 } },
  ]);
  assert.deepEqual(r.errors, []);
  assert.equal(r.normalText, 'x');
});

test('string-encoded arguments holding an object are decoded; other strings are errors', () => {
  const ok = parseToolCalls('\n<tool_call>\n{"name": "f", "arguments": "{\\"city\\": \\"Oslo\\"}"}\n</tool_call>');
  assert.deepEqual(ok.calls, [{ name: 'f', arguments: { city: 'Oslo' } }]);
  assert.deepEqual(ok.errors, []);
  for (const bad of ['"[1, 2]"', '"not json"', '[1]', '3', '"\\"str\\""']) {
    const r = parseToolCalls(`\n<tool_call>\n{"name": "f", "arguments": ${bad}}\n</tool_call>`);
    assert.deepEqual(r.calls, [], bad);
    assert.equal(r.errors.length, 1, bad);
    assert.match(r.errors[0] ?? '', /^Tool call tag detected but no one success/);
  }
});

test('missing or null arguments, missing or empty name are errors', () => {
  assert.match(parseToolCalls('\n<tool_call>\n{"name": "f"}\n</tool_call>').errors[0] ?? '', /^No argumets found/);
  assert.match(parseToolCalls('\n<tool_call>\n{"name": "f", "arguments": null}\n</tool_call>').errors[0] ?? '', /^No argumets found/);
  assert.match(parseToolCalls('\n<tool_call>\n{"arguments": {}}\n</tool_call>').errors[0] ?? '', /"name"/);
  assert.match(parseToolCalls('\n<tool_call>\n{"name": "", "arguments": {}}\n</tool_call>').errors[0] ?? '', /"name"/);
  assert.match(parseToolCalls('\n<tool_call>\n"f"\n</tool_call>').errors[0] ?? '', /not a JSON object/);
});

test('invalid JSON in a block is an error; the other blocks still parse', () => {
  const r = parseToolCalls('\n<tool_call>\n{"name": "f", "arguments": {}\n</tool_call>\n<tool_call>\n{"name": "g", "arguments": {}}\n</tool_call>');
  assert.deepEqual(r.calls, [{ name: 'g', arguments: {} }]);
  assert.equal(r.errors.length, 1);
  assert.match(r.errors[0] ?? '', /^Tool call 0 is not valid JSON/);
  assert.deepEqual(JSON.parse(errorToolCallText(r.errors)), { error_tool_call: { code: 'TOOL_CALL_PARSE_ERROR', message: r.errors[0] } });
});

test('missing newlines around the tags: detected (<tool_call> substring) but not parsed → "No tool call found"', () => {
  for (const text of [
    '<tool_call>{"name": "f", "arguments": {}}</tool_call>', // no newlines at all
    '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>', // at the very start: no "\n" before the tag
    'ok <tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>', // space instead of newline
    '\n<tool_call>\n{"name": "f", "arguments": {}}</tool_call>', // no newline before the closing tag
    'I will use <tool_call> tags later.', // mention only
  ]) {
    const r = parseToolCalls(text);
    assert.equal(r.hasToolCall, true, text);
    assert.deepEqual(r.calls, [], text);
    assert.deepEqual(r.errors, [NO_TOOL_CALL_FOUND], text);
    assert.equal(r.normalText, text.startsWith('\n<tool_call>\n') ? '' : text, text);
  }
});

test('reference behaviour: a call written inside the think block is still matched and executed', () => {
  const text = '<think>\nMaybe\n<tool_call>\n{"name": "draft", "arguments": {}}\n</tool_call>\nno.\n</think>\n\nDone.';
  const r = parseToolCalls(text);
  assert.deepEqual(r.calls, [{ name: 'draft', arguments: {} }]);
  assert.equal(r.normalText, '<think>\nMaybe');
});

test('splitThinking: first think block, reply after it stripped, no block → all thinking', () => {
  assert.deepEqual(splitThinking('<think>\nplan\n</think>\n\n Hello! \n'), { thinking: '\nplan\n', reply: 'Hello!' });
  assert.deepEqual(splitThinking('<think>a</think>b<think>c</think>d'), { thinking: 'a', reply: 'b<think>c</think>d' });
  assert.deepEqual(splitThinking('<think>\nmulti\nline\n</think>'), { thinking: '\nmulti\nline\n', reply: '' });
  assert.deepEqual(splitThinking('just text'), { thinking: 'just text', reply: '' });
  assert.deepEqual(splitThinking('<think>unclosed'), { thinking: '<think>unclosed', reply: '' });
});

test('stripLoneSurrogates keeps pairs and drops lone halves', () => {
  assert.equal(stripLoneSurrogates('a\uD83D\uDE00b'), 'a\uD83D\uDE00b');
  assert.equal(stripLoneSurrogates('a\uD83Db\uDE00c\uD800'), 'abc');
  assert.equal(stripLoneSurrogates('\uDE00\uD83D'), '');
});
