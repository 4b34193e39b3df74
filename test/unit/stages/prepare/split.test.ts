import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Example } from '../../../../src/kernel/schema';
import {
  dropProbability,
  DropTable,
  harderSampleDrop,
  HARDER_SELECTION_CODE,
  matchingDropRatios,
  mulberry32,
  REFERENCE_DROP_TABLE,
  seededSplit,
  selectHarderSamples,
  shuffle,
  splitColdStart,
  uniformAt,
} from '../../../../src/stages/prepare/split';
import { computeStats, type ExampleStats } from '../../../../src/stages/prepare/stats';
import { assistant, call, directReplyExample, goodExample, tool, user } from '../../../fixtures/dialogues';

const range = (n: number): number[] => Array.from({ length: n }, (_, i) => i);

describe('PRNG and shuffle', () => {
  test('mulberry32 is deterministic per seed and uniform-ish in [0, 1)', () => {
    const a = mulberry32(42);
    const b = mulberry32(42);
    const xs = range(10_000).map(() => a());
    assert.deepEqual(range(5).map(() => b()), xs.slice(0, 5));
    assert.ok(xs.every((x) => x >= 0 && x < 1));
    const mean = xs.reduce((s, x) => s + x, 0) / xs.length;
    assert.ok(Math.abs(mean - 0.5) < 0.02, `mean ${mean}`);
    assert.notEqual(mulberry32(43)(), mulberry32(42)());
  });

  test('shuffle is a seeded permutation that leaves its input alone', () => {
    const items = range(50);
    const s1 = shuffle(items, mulberry32(7));
    assert.deepEqual(s1, shuffle(items, mulberry32(7)));
    assert.notDeepEqual(s1, items);
    assert.deepEqual([...s1].sort((x, y) => x - y), items);
    assert.deepEqual(items, range(50));
    assert.deepEqual(shuffle([], mulberry32(1)), []);
  });

  test('shuffle is unbiased enough: every item reaches position 0 about equally often', () => {
    const counts = [0, 0, 0, 0];
    const rng = mulberry32(1);
    for (let i = 0; i < 8000; i++) counts[shuffle([0, 1, 2, 3], rng)[0]!]! += 1;
    for (const c of counts) assert.ok(Math.abs(c - 2000) < 200, `counts ${counts.join(',')}`);
  });

  test('uniformAt is a pure function of (seed, stream, position)', () => {
    assert.equal(uniformAt(42, 0, 5), uniformAt(42, 0, 5));
    assert.notEqual(uniformAt(42, 0, 5), uniformAt(42, 1, 5));
    assert.notEqual(uniformAt(42, 0, 5), uniformAt(43, 0, 5));
    const xs = range(10_000).map((i) => uniformAt(42, 0, i));
    assert.equal(new Set(xs).size, xs.length, 'no collisions within a stream');
    assert.ok(xs.every((x) => x >= 0 && x < 1));
    const mean = xs.reduce((s, x) => s + x, 0) / xs.length;
    assert.ok(Math.abs(mean - 0.5) < 0.02, `mean ${mean}`);
  });
});

describe('cold-start / RL split (§3.1)', () => {
  test('seeded shuffle then cut: disjoint, complete, reproducible', () => {
    const items = range(100);
    const { coldStart, rl } = splitColdStart(items, 30);
    assert.equal(coldStart.length, 30);
    assert.equal(rl.length, 70);
    assert.deepEqual([...coldStart, ...rl].sort((a, b) => a - b), items);
    assert.deepEqual(splitColdStart(items, 30, 42), { coldStart, rl });
    assert.notDeepEqual(splitColdStart(items, 30, 1).coldStart, coldStart);
    assert.deepEqual(seededSplit(items, { coldStart: 30 }), { coldStart, rl });
    assert.deepEqual(seededSplit(items, { coldStart: 30, seed: 1 }), splitColdStart(items, 30, 1));
  });

  test('edge sizes and usage errors', () => {
    assert.deepEqual(splitColdStart([1, 2], 0).coldStart, []);
    assert.deepEqual(splitColdStart([1, 2], 2).rl, []);
    assert.throws(() => splitColdStart([1, 2], 3), RangeError);
    assert.throws(() => splitColdStart([1, 2], -1), RangeError);
    assert.throws(() => splitColdStart([1, 2], 1.5), RangeError);
  });
});

describe('harder-sample selection (§5.1)', () => {
  const stats = (over: Partial<ExampleStats>): ExampleStats => ({
    num_turns: 5, tool_calls_total: 9, max_parallel_tool_calls: 2, num_candidate_tools: 8,
    num_selected_tools: 4, max_assistant_steps: 5, num_assistant_messages: 12, ...over,
  });

  test('the reference table', () => {
    assert.deepEqual(REFERENCE_DROP_TABLE.num_candidate_tools, { 1: 0.7, 2: 0.4, 3: 0, 6: 0, 10: 0 });
    assert.deepEqual(REFERENCE_DROP_TABLE.num_turns, { 1: 0.4, 3: 0 });
    assert.ok(DropTable.safeParse(REFERENCE_DROP_TABLE).success);
  });

  test('combined probability is 1 − Π(1 − r) over matching metrics', () => {
    assert.equal(dropProbability(stats({})), 0);
    assert.equal(dropProbability(stats({ num_turns: 1 })), 0.4);
    assert.ok(Math.abs(dropProbability(stats({ num_turns: 1, num_candidate_tools: 1 })) - (1 - 0.6 * 0.3)) < 1e-12);
    assert.deepEqual(matchingDropRatios(stats({ num_turns: 3, tool_calls_total: 3 })), { num_turns: 0, tool_calls_total: 0 });
    // The easiest possible example: one turn, one call, one tool, two assistant messages.
    const easy = stats({ num_turns: 1, tool_calls_total: 1, max_parallel_tool_calls: 1, num_candidate_tools: 1, num_selected_tools: 1, max_assistant_steps: 2, num_assistant_messages: 2 });
    const expected = 1 - 0.6 * 0.7 * 0.3 * 0.6 * 0.7;
    assert.ok(Math.abs(dropProbability(easy) - expected) < 1e-12);
  });

  test('the table is configurable and validated', () => {
    const table = { num_turns: { 2: 1 } };
    assert.equal(dropProbability(stats({ num_turns: 2 }), table), 1);
    assert.equal(dropProbability(stats({ num_turns: 1 }), table), 0);
    assert.equal(DropTable.safeParse({ num_turns: { 1: 1.5 } }).success, false);
    assert.equal(DropTable.safeParse({ bogus_metric: { 1: 0.5 } }).success, false);
  });

  test('harderSampleDrop: draw vs probability, with a readable detail', () => {
    const s = stats({ num_turns: 1 });
    const d = harderSampleDrop(s, { seed: 42, stream: 3, position: 7 });
    assert.equal(d.draw, uniformAt(42, 3, 7));
    assert.equal(d.probability, 0.4);
    assert.equal(d.drop, d.draw < 0.4);
    assert.match(d.detail, /drop probability 0\.4000 \(num_turns=1→0\.4\); draw 0\.\d{4}/);
    assert.equal(harderSampleDrop(stats({}), { position: 0 }).drop, false);
    assert.equal(harderSampleDrop(stats({}), { position: 0, table: { num_turns: { 5: 1 } } }).drop, true);
  });

  test('selectHarderSamples: one draw per example in dataset order; drop rate matches the probability', () => {
    const single = directReplyExample(); // num_turns 1, candidate tools 1, assistant messages 1, steps 1
    const p = dropProbability(computeStats(single));
    assert.ok(Math.abs(p - (1 - 0.6 * 0.3 * 0.8 * 0.7)) < 1e-12);
    const examples: Example[] = range(4000).map((i) => ({ ...single, uuid: `s-${i}` }));
    const { kept, decisions } = selectHarderSamples(examples);
    assert.equal(decisions.length, examples.length);
    decisions.forEach((d, i) => {
      assert.equal(d.uuid, `s-${i}`);
      assert.equal(d.draw, uniformAt(42, 0, i));
      assert.equal(d.drop, d.draw < p);
      assert.equal(d.reason?.code, d.drop ? HARDER_SELECTION_CODE : undefined);
    });
    assert.deepEqual(kept.map((e) => e.uuid), decisions.filter((d) => !d.drop).map((d) => d.uuid));
    const rate = 1 - kept.length / examples.length;
    assert.ok(Math.abs(rate - p) < 0.03, `drop rate ${rate} vs ${p}`);
    assert.deepEqual(selectHarderSamples(examples).decisions.map((d) => d.drop), decisions.map((d) => d.drop));
  });

  test('hard examples are always kept', () => {
    const hard = goodExample(); // 2 candidate tools would still carry p = 0.4; a third makes it 0
    hard.tools.push({ type: 'function', function: { name: 'get_news', parameters: { type: 'object', properties: {} } } });
    hard.messages.push(user('more'), assistant('<think>x</think>', [call('get_weather', { city: 'Rome' })]), tool('{}'), assistant('<think>y</think>\n\nok'));
    assert.equal(dropProbability(computeStats(hard)), 0);
    const { kept } = selectHarderSamples(range(200).map((i) => ({ ...hard, uuid: `h-${i}` })));
    assert.equal(kept.length, 200);
  });
});
