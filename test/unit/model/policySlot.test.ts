/** A worker's one loaded evaluation policy (src/model/net/policySlot.ts): loaded once per key, never disposed under a user. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PolicySlot } from '../../../src/model/net/policySlot';

class Fake {
  disposed = false;
  constructor(readonly key: string) {}
  dispose() {
    this.disposed = true;
  }
}

test('one load per key; another key disposes of the held value first; idle values are released', async () => {
  const slot = new PolicySlot<Fake>(30);
  const made: Fake[] = [];
  const load = (key: string) => async () => {
    const f = new Fake(key);
    made.push(f);
    return f;
  };
  const use = async (f: Fake) => {
    assert.equal(f.disposed, false);
    return f.key;
  };
  assert.equal(await slot.with('a', load('a'), use), 'a');
  assert.equal(await slot.with('a', load('a'), use), 'a');
  assert.equal(slot.loads, 1, 'the next chunk of the same policy reuses it');
  assert.equal(await slot.with('b', load('b'), use), 'b');
  assert.equal(made[0]!.disposed, true, 'a different key disposes of the held one');
  assert.equal(slot.key, 'b');
  await new Promise((r) => setTimeout(r, 80));
  assert.equal(made[1]!.disposed, true, 'released when idle');
  assert.equal(slot.key, undefined);
});

test('a user of the held value keeps it: another key meanwhile gets its own copy; a failed load is not kept', async () => {
  const slot = new PolicySlot<Fake>();
  const made: Fake[] = [];
  const load = (key: string) => async () => {
    const f = new Fake(key);
    made.push(f);
    return f;
  };
  let release!: () => void;
  const busy = slot.with('a', load('a'), (f) => new Promise<boolean>((r) => (release = () => r(f.disposed))));
  await new Promise((r) => setImmediate(r));
  assert.equal(await slot.with('b', load('b'), async (f) => f.key), 'b');
  assert.equal(made[1]!.disposed, true, 'the private copy is disposed of after use');
  release();
  assert.equal(await busy, false, 'the held value was not disposed of under its user');
  assert.equal(slot.key, 'a');
  await assert.rejects(slot.with('c', async () => {
    throw new Error('no such policy');
  }, async () => 1), /no such policy/);
  assert.equal(made[0]!.disposed, true);
  assert.equal(slot.key, undefined);
  await slot.clear();
});
