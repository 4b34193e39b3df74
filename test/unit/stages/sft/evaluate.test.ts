import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { evaluateToolCalls, firstCallTarget, generateToolCalls, scoreToolCall, summarizeToolCalls, toolCallTargets } from '../../../../src/stages/sft/evaluate';
import { loadChatTokenizer } from '../../../../src/chat/tokenize';
import { selectBackend } from '../../../../src/model/net/backend';
import { parseQwenConfig } from '../../../../src/model/net/qwenConfig';
import { QwenModel } from '../../../../src/model/net/qwen';
import { TINY_POLICY } from '../../../helpers/rlFixture';
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

test('the check in chunks of a multiple of the batch size gives the samples and shares of one pass', async () => {
  await selectBackend('auto');
  const tok = loadChatTokenizer(path.join(__dirname, '..', '..', '..', '..', 'assets', 'demo-tokenizer'));
  const model = QwenModel.init(parseQwenConfig({ vocab_size: tok.vocabSize, eos_token_id: tok.special.imEnd, ...TINY_POLICY }), 7);
  try {
    const examples = generateDemoDataset({ seed: 3, count: 40, brokenRate: 0 });
    const opts = { maxNewTokens: 12 };
    const one = await evaluateToolCalls(model, tok, examples, { ...opts, limit: 20 });
    assert.equal(one.prompts, 20);
    const targets = toolCallTargets(examples, 20);
    const samples = [];
    for (let i = 0; i < targets.length; i += 8) samples.push(...(await generateToolCalls(model, tok, targets.slice(i, i + 8), opts)));
    assert.deepEqual(summarizeToolCalls(samples), one);
  } finally {
    model.dispose();
  }
});
