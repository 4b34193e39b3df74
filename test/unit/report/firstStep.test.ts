import assert from 'node:assert/strict';
import test from 'node:test';
import { firstStepCounts, firstStepOf, offeredTools } from '../../../src/report/firstStep';

const tool = (name: string) => ({ type: 'function', function: { name, description: '', parameters: { type: 'object', properties: {} } } });
const tools = [tool('get_order_status'), tool('search_products'), tool('get_product')];
const calls = (name: string, args: Record<string, unknown>) => ({
  messages: [
    { role: 'user', content: 'Find me a lamp under 23 EUR.' },
    { role: 'assistant', content: '<think>\nsearch\n</think>', tool_calls: [{ id: 'c1', type: 'function', function: { name, arguments: JSON.stringify(args) } }] },
  ],
  tools,
});
const replies = { messages: [{ role: 'user', content: 'What is my balance?' }, { role: 'assistant', content: 'Which account should I check?' }], tools };
const gen = (name: string, args: unknown) => `<think>\nI will call ${name}.\n</think>\n<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;

test('offered tools: the names in the order the prompt lists them, malformed entries skipped', () => {
  assert.deepEqual(offeredTools([...tools, { name: 'bare' }, 42, null]), ['get_order_status', 'search_products', 'get_product']);
});

test('arguments match as the checklist compares them: text ignoring case and spaces, numbers by value, extra arguments allowed', () => {
  const ex = calls('search_products', { query: 'lamp', max_price: 23 });
  assert.equal(firstStepOf(gen('search_products', { query: ' Lamp ', max_price: 23.0, limit: 5 }), ex), 'right tool, same arguments');
  assert.equal(firstStepOf(gen('search_products', { query: 'lamp' }), ex), 'right tool, other arguments');
  assert.equal(firstStepOf(gen('search_products', { query: 'lamp', max_price: '23' }), ex), 'right tool, other arguments');
});

test('the first step against the reference: right tool (same or other arguments), wrong tool (first offered or not), unknown tool, broken call, reply or call where the reference does the other', () => {
  const ex = calls('search_products', { query: 'lamp', max_price: 23 });
  assert.equal(firstStepOf(gen('search_products', { query: 'Lamp', max_price: 23 }), ex), 'right tool, same arguments');
  assert.equal(firstStepOf(gen('search_products', { query: 'lamps' }), ex), 'right tool, other arguments');
  assert.equal(firstStepOf(gen('get_order_status', { order_id: 'ord-1' }), ex), 'wrong tool, the first offered');
  assert.equal(firstStepOf(gen('get_product', { id: 'p1' }), ex), 'wrong tool, another offered');
  assert.equal(firstStepOf(gen('get_jacket', {}), ex), 'tool not offered');
  assert.equal(firstStepOf('<tool_call>\n{"name": "search_products", "arguments": {"query": "lamp"}\n</tool_call>', ex), 'broken call', 'no newline before the tag: detected, not extracted');
  assert.equal(firstStepOf('\n<tool_call>\n{"name": "search_products", "arguments": {\n</tool_call>', ex), 'broken call');
  assert.equal(firstStepOf('<think>\nok\n</think>\n\nHere are lamps.', ex), 'reply where the reference calls');
  assert.equal(firstStepOf(gen('get_balance', { account_id: 'acc-101' }), replies), 'call where the reference replies');
  assert.equal(firstStepOf('Which account?', replies), 'reply, as the reference');
  assert.equal(firstStepOf('x', { messages: [{ role: 'user', content: 'hi' }], tools }), undefined);
});

test('counts per outcome over evaluated episodes; an episode without an example or a first step is unmatched', () => {
  const examples = new Map([['a', calls('search_products', { query: 'lamp' })], ['b', replies]]);
  const r = firstStepCounts([
    { uuid: 'a', messages: [{ role: 'user', content: 'u' }, { role: 'assistant', content: gen('search_products', { query: 'lamp' }) }, { role: 'tool', content: '{}' }, { role: 'assistant', content: 'done' }] },
    { uuid: 'b', messages: [{ role: 'user', content: 'u' }, { role: 'assistant', content: 'Which account?' }] },
    { uuid: 'a', messages: [{ role: 'user', content: 'u' }, { role: 'assistant', content: gen('get_order_status', {}) }] },
    { uuid: 'zz', messages: [{ role: 'user', content: 'u' }, { role: 'assistant', content: 'x' }] },
    { uuid: 'a', messages: [{ role: 'user', content: 'u' }] },
  ], examples);
  assert.deepEqual(r, { counts: { 'right tool, same arguments': 1, 'reply, as the reference': 1, 'wrong tool, the first offered': 1 }, unmatched: 2 });
});
