import { test } from 'node:test';
import assert from 'node:assert/strict';
import { firstCallTarget, scoreToolCall } from '../../../../src/stages/sft/evaluate';
import { sparkline } from '../../../../src/cli/sftCommand';
import { generateDemoDataset } from '../../../../src/demo/generator';

test('the held-out target is the first user message and the tool its reference calls first', () => {
  const examples = generateDemoDataset({ seed: 2, count: 40, brokenRate: 0 });
  const targets = examples.map(firstCallTarget);
  assert.ok(targets.some((t) => t !== undefined));
  for (const [i, t] of targets.entries()) {
    if (!t) continue;
    assert.equal(t.prompt.length, 1);
    assert.equal(t.prompt[0]!.role, 'user');
    assert.equal(t.expectedTool, examples[i]!.messages[1]!.tool_calls![0]!.function.name);
  }
});

test('scoring follows the rollout parser (§8.1)', () => {
  const good = '<think>\nI will look it up.\n</think>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>';
  assert.deepEqual(scoreToolCall(good, 'get_weather'), { wellFormed: true, correctName: true, closedThink: true });
  assert.deepEqual(scoreToolCall(good, 'get_forecast'), { wellFormed: true, correctName: false, closedThink: true });
  // No newline before the tag: not a parsable call.
  assert.equal(scoreToolCall('<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>', 'get_weather').wellFormed, false);
  // Broken JSON.
  assert.equal(scoreToolCall('x\n<tool_call>\n{"name": "get_weather", "arguments": \n</tool_call>', 'get_weather').wellFormed, false);
  assert.equal(scoreToolCall('<think>\n<think>\n<think>', 'get_weather').closedThink, false);
});

test('sparkline spans min to max', () => {
  assert.equal(sparkline([3, 2, 1]), '█▅▁');
  assert.equal(sparkline([]), '');
  assert.equal(sparkline(Array.from({ length: 200 }, (_, i) => i), 50).length, 50);
});
