import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { computeStats, splitTurns, STAT_NAMES } from '../../../../src/stages/prepare/stats';
import { assistant, call, directReplyExample, goodExample, tool, user } from '../../../fixtures/dialogues';

describe('splitTurns', () => {
  test('turns run from a user message to the final reply; steps are an assistant message plus its tool messages', () => {
    const turns = splitTurns(goodExample().messages);
    assert.equal(turns.length, 2);
    const [t0, t1] = turns;
    assert.deepEqual({ ...t0!, steps: undefined }, { index: 0, userIndex: 0, start: 0, end: 6, finalReplyIndex: 6, steps: undefined });
    assert.deepEqual(t0!.steps, [
      { index: 0, assistantIndex: 1, toolIndices: [2], start: 1, end: 2, toolCalls: 1 },
      { index: 1, assistantIndex: 3, toolIndices: [4, 5], start: 3, end: 5, toolCalls: 2 },
      { index: 2, assistantIndex: 6, toolIndices: [], start: 6, end: 6, toolCalls: 0 },
    ]);
    assert.deepEqual(t1, {
      index: 1, userIndex: 7, start: 7, end: 8, finalReplyIndex: 8,
      steps: [{ index: 0, assistantIndex: 8, toolIndices: [], start: 8, end: 8, toolCalls: 0 }],
    });
  });

  test('a leading system message belongs to no turn', () => {
    const turns = splitTurns([{ role: 'system', content: 's' }, ...directReplyExample().messages]);
    assert.equal(turns.length, 1);
    assert.equal(turns[0]!.start, 1);
  });

  test('an unfinished turn has no final reply; malformed order never throws', () => {
    const turns = splitTurns([user('a'), assistant('<think>x</think>', [call('get_weather', { city: 'P' })]), tool('{}')]);
    assert.equal(turns[0]!.finalReplyIndex, undefined);
    assert.equal(turns[0]!.end, 2);
    assert.deepEqual(splitTurns([]), []);
    assert.deepEqual(splitTurns([tool('{}'), assistant('x')]), []);
    const odd = splitTurns([user('a'), tool('{}'), assistant('x')]);
    assert.deepEqual(odd[0]!.steps.map((s) => s.toolIndices), [[]], 'a tool message before any assistant joins no step');
  });
});

describe('computeStats', () => {
  test('the §5.1 statistics of a multi-turn, multi-step dialogue', () => {
    assert.deepEqual(computeStats(goodExample()), {
      num_turns: 2,
      tool_calls_total: 3,
      max_parallel_tool_calls: 2,
      num_candidate_tools: 2,
      num_selected_tools: 2,
      max_assistant_steps: 3,
      num_assistant_messages: 4,
    });
  });

  test('a single direct reply', () => {
    assert.deepEqual(computeStats(directReplyExample()), {
      num_turns: 1,
      tool_calls_total: 0,
      max_parallel_tool_calls: 0,
      num_candidate_tools: 1,
      num_selected_tools: 0,
      max_assistant_steps: 1,
      num_assistant_messages: 1,
    });
  });

  test('assistant messages before the first user count as messages but not as turn steps (reference)', () => {
    const stats = computeStats({ messages: [assistant('hi'), ...directReplyExample().messages], tools: [] });
    assert.equal(stats.num_assistant_messages, 2);
    assert.equal(stats.max_assistant_steps, 1);
    assert.equal(stats.num_turns, 1);
  });

  test('selected tools are distinct names; nameless calls are ignored', () => {
    const ex = goodExample();
    ex.messages[3] = assistant('<think>x</think>', [call('get_time', { city: 'A' }), { type: 'function', function: { name: '', arguments: '{}' } }]);
    assert.equal(computeStats(ex).num_selected_tools, 2);
  });

  test('STAT_NAMES lists every statistic', () => {
    assert.deepEqual([...STAT_NAMES].sort(), Object.keys(computeStats(goodExample())).sort());
  });
});
