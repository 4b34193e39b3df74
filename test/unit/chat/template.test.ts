import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { CHAT_TEMPLATE, renderChat } from '../../../src/chat/template';
import type { Message } from '../../../src/kernel/schema';
import { REPO } from '../../helpers/paths';

const TOOL = {
  type: 'function',
  function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
};
const TOOL_LINE =
  '{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}';
const TOOLS_BLOCK =
  '\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' +
  'You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n' +
  TOOL_LINE +
  '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n' +
  '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n';

const call = (name: string, args: string | Record<string, unknown>) => ({ type: 'function', function: { name, arguments: args } });

test('assets/chat_template.jinja is the template constant', () => {
  const file = readFileSync(path.join(REPO, 'assets', 'chat_template.jinja'), 'utf8');
  assert.equal(file, CHAT_TEMPLATE);
});

test('no tools: plain system/user/assistant blocks, generation prompt', () => {
  const messages: Message[] = [
    { role: 'system', content: 'You are helpful.' },
    { role: 'user', content: 'Hi' },
    { role: 'assistant', content: '<think>\ngreet\n</think>\n\nHello!' },
    { role: 'user', content: 'Bye' },
  ];
  assert.equal(
    renderChat(messages, [], { addGenerationPrompt: true }),
    '<|im_start|>system\nYou are helpful.<|im_end|>\n' +
      '<|im_start|>user\nHi<|im_end|>\n' +
      '<|im_start|>assistant\n<think>\ngreet\n</think>\n\nHello!<|im_end|>\n' +
      '<|im_start|>user\nBye<|im_end|>\n' +
      '<|im_start|>assistant\n',
  );
  assert.equal(renderChat([{ role: 'user', content: 'Hi' }], []), '<|im_start|>user\nHi<|im_end|>\n');
  assert.equal(
    renderChat([{ role: 'user', content: 'Hi' }], [], { addGenerationPrompt: true, enableThinking: false }),
    '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n',
  );
});

test('tools without a system message: the system block starts with \\n\\n# Tools', () => {
  assert.equal(
    renderChat([{ role: 'user', content: 'Weather in Oslo?' }], [TOOL], { addGenerationPrompt: true }),
    '<|im_start|>system\n' + TOOLS_BLOCK + '<|im_start|>user\nWeather in Oslo?<|im_end|>\n<|im_start|>assistant\n',
  );
});

test('tools with a system message: its content comes first in the one system block', () => {
  assert.equal(
    renderChat([{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Weather in Oslo?' }], [TOOL]),
    '<|im_start|>system\nBe brief.' + TOOLS_BLOCK + '<|im_start|>user\nWeather in Oslo?<|im_end|>\n',
  );
});

test('parallel calls and consecutive tool results merged into one user block', () => {
  const messages: Message[] = [
    { role: 'user', content: 'Oslo and Rome?' },
    { role: 'assistant', content: '<think>\ntwo cities\n</think>', tool_calls: [call('get_weather', '{"city":"Oslo"}'), call('get_weather', { city: 'Rome', days: 2 })] },
    { role: 'tool', content: '{"temp":3}' },
    { role: 'tool', content: '{"temp":18}' },
    { role: 'assistant', content: '<think>\ndone\n</think>\n\nOslo 3, Rome 18.' },
  ];
  assert.equal(
    renderChat(messages, [TOOL]),
    '<|im_start|>system\n' +
      TOOLS_BLOCK +
      '<|im_start|>user\nOslo and Rome?<|im_end|>\n' +
      '<|im_start|>assistant\n<think>\ntwo cities\n</think>' +
      // string arguments verbatim, object arguments through tojson; "\n" before the first call (content non-empty) and between calls
      '\n<tool_call>\n{"name": "get_weather", "arguments": {"city":"Oslo"}}\n</tool_call>' +
      '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "days": 2}}\n</tool_call><|im_end|>\n' +
      '<|im_start|>user\n<tool_response>\n{"temp":3}\n</tool_response>\n<tool_response>\n{"temp":18}\n</tool_response><|im_end|>\n' +
      '<|im_start|>assistant\n<think>\ndone\n</think>\n\nOslo 3, Rome 18.<|im_end|>\n',
  );
});

test('a call with empty content gets no leading newline; leading newlines of content are stripped', () => {
  assert.equal(
    renderChat([{ role: 'user', content: 'x' }, { role: 'assistant', content: '', tool_calls: [call('f', '{}')] }, { role: 'tool', content: 'ok' }]),
    '<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call><|im_end|>\n' +
      '<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n',
  );
  assert.equal(
    renderChat([{ role: 'user', content: 'x' }, { role: 'assistant', content: '\n\nHi\n' }]),
    '<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\nHi\n<|im_end|>\n',
  );
});

test('multi-turn: every assistant think block is kept (no history stripping)', () => {
  const messages: Message[] = [
    { role: 'user', content: 'A' },
    { role: 'assistant', content: '<think>\nt1\n</think>\n\nr1' },
    { role: 'user', content: 'B' },
    { role: 'assistant', content: '<think>\nt2\n</think>', tool_calls: [call('f', '{"a":1}')] },
    { role: 'tool', content: 'R' },
    { role: 'assistant', content: '<think>\nt3\n</think>\n\nr2' },
    { role: 'user', content: 'C' },
  ];
  assert.equal(
    renderChat(messages, [], { addGenerationPrompt: true }),
    '<|im_start|>user\nA<|im_end|>\n' +
      '<|im_start|>assistant\n<think>\nt1\n</think>\n\nr1<|im_end|>\n' +
      '<|im_start|>user\nB<|im_end|>\n' +
      '<|im_start|>assistant\n<think>\nt2\n</think>\n<tool_call>\n{"name": "f", "arguments": {"a":1}}\n</tool_call><|im_end|>\n' +
      '<|im_start|>user\n<tool_response>\nR\n</tool_response><|im_end|>\n' +
      '<|im_start|>assistant\n<think>\nt3\n</think>\n\nr2<|im_end|>\n' +
      '<|im_start|>user\nC<|im_end|>\n' +
      '<|im_start|>assistant\n',
  );
});

test('RL-style assistant message with raw <tool_call> text and no structured calls renders verbatim', () => {
  const raw = '<think>\nneed weather\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>';
  assert.equal(
    renderChat([{ role: 'user', content: 'x' }, { role: 'assistant', content: raw }]),
    `<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n${raw}<|im_end|>\n`,
  );
});
