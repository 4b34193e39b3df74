import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeArguments } from '../../../src/kernel/schema';

test('decodeArguments parses JSON strings and passes objects through', () => {
  assert.deepEqual(decodeArguments('{"a":1}'), { ok: true, value: { a: 1 } });
  assert.deepEqual(decodeArguments({ a: 1 }), { ok: true, value: { a: 1 } });
  assert.equal(decodeArguments('{').ok, false);
});
