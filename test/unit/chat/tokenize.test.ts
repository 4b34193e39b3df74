import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { ASSISTANT_HEADER, CHAT_TEMPLATE, renderChat } from '../../../src/chat/template';
import { assistantContentFromIds, ChatTokenizer, chatSegments, completeAssistantIds, promptIds, tokenizeForTraining } from '../../../src/chat/tokenize';
import { parseToolCalls } from '../../../src/chat/toolCalls';
import type { Message } from '../../../src/kernel/schema';
import { generateDemoDataset } from '../../../src/demo/generator';
import { DEMO_ADDED_TOKENS, DEMO_TOKENIZER_DEFAULTS, DEMO_TOKENIZER_DIR, loadDemoTokenizer, trainDemoTokenizer } from '../../../src/demo/tokenizer';

const tok = loadDemoTokenizer();

test('demo tokenizer: size, special tokens are single ids, config carries the chat template', () => {
  assert.equal(tok.vocabSize, DEMO_TOKENIZER_DEFAULTS.vocabSize);
  assert.ok(tok.vocabSize >= 500 && tok.vocabSize <= 2000);
  for (const t of DEMO_ADDED_TOKENS) assert.deepEqual(tok.encode(t.content), [tok.tokenToId(t.content)], t.content);
  const s = tok.special;
  assert.deepEqual(tok.encode('<|im_start|>x<|im_end|><think></think><tool_call></tool_call>').filter((id) => id !== tok.encode('x')[0]), [
    s.imStart,
    s.imEnd,
    s.think,
    s.thinkEnd,
    s.toolCall,
    s.toolCallEnd,
  ]);
  assert.equal(s.eos, s.imEnd);
  assert.equal(s.pad, tok.tokenToId('<|endoftext|>'));
  assert.equal(tok.chatTemplate, CHAT_TEMPLATE);
  assert.equal(tok.unkId, undefined);
});

test('300 rendered demo dialogues: no unknown token, exact round trip; mean tokens per dialogue', () => {
  const examples = generateDemoDataset({ seed: 1, count: 300 });
  let total = 0;
  for (const ex of examples) {
    const text = renderChat(ex.messages, ex.tools, { addGenerationPrompt: true });
    const ids = tok.encode(text);
    for (const id of ids) assert.ok(Number.isInteger(id) && id >= 0 && id < tok.vocabSize, `bad id ${id} in ${ex.uuid}`);
    assert.equal(tok.decode(ids), text, ex.uuid);
    total += ids.length;
  }
  const mean = total / examples.length;
  console.log(`demo tokenizer: vocabulary ${tok.vocabSize}, mean ${mean.toFixed(1)} tokens per rendered dialogue (300 dialogues, seed 1)`);
  assert.ok(mean > 100 && mean < 3000);
});

test('byte-level: arbitrary text round-trips (unicode, whitespace runs, CRLF, emoji); lone surrogates are dropped', () => {
  for (const text of ['Grüße, 東京 😀  \t\r\n\n  x', '   ', '\n', 'ord-4971 at 13:00 → 513.54 EUR', '{"a": [1, 2.5, null]}', 'É\u0301']) {
    assert.equal(tok.decode(tok.encode(text)), text, JSON.stringify(text));
  }
  assert.equal(tok.decode(tok.encode('a\uD800b')), 'ab');
  assert.equal(tok.decode([]), '');
});

test('committed tokenizer files are what the build produces (deterministic training)', () => {
  const built = trainDemoTokenizer(
    generateDemoDataset({ seed: DEMO_TOKENIZER_DEFAULTS.corpusSeed, count: DEMO_TOKENIZER_DEFAULTS.corpusCount }).map((ex) => renderChat(ex.messages, ex.tools)),
    DEMO_TOKENIZER_DEFAULTS.vocabSize,
  );
  const read = (f: string) => JSON.parse(readFileSync(path.join(DEMO_TOKENIZER_DIR, f), 'utf8')) as unknown;
  assert.deepEqual(read('tokenizer.json'), built.tokenizerJson);
  assert.deepEqual(read('tokenizer_config.json'), built.tokenizerConfig);
});

const call = (name: string, args: string) => ({ type: 'function', function: { name, arguments: args } });
const DIALOGUE: { messages: Message[]; tools: unknown[] } = {
  tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
  messages: [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Oslo and Rome?' },
    { role: 'assistant', content: '<think>\ntwo cities\n</think>', tool_calls: [call('get_weather', '{"city":"Oslo"}'), call('get_weather', '{"city":"Rome"}')] },
    { role: 'tool', content: '{"temp":3}' },
    { role: 'tool', content: '{"temp":18}' },
    { role: 'assistant', content: '<think>\ndone\n</think>\n\nOslo 3, Rome 18.' },
    { role: 'user', content: 'Thanks' },
    { role: 'assistant', content: 'You are welcome.' },
  ],
};

test('segments: concatenation equals the whole render; trained segments are exactly the assistant bodies', () => {
  const segs = chatSegments(DIALOGUE);
  assert.equal(segs.map((s) => s.text).join(''), renderChat(DIALOGUE.messages, DIALOGUE.tools));
  const trained = segs.filter((s) => s.trained).map((s) => s.text);
  assert.deepEqual(trained, [
    '<think>\ntwo cities\n</think>\n<tool_call>\n{"name": "get_weather", "arguments": {"city":"Oslo"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city":"Rome"}}\n</tool_call><|im_end|>\n',
    '<think>\ndone\n</think>\n\nOslo 3, Rome 18.<|im_end|>\n',
    'You are welcome.<|im_end|>\n',
  ]);
  for (const s of segs.filter((x) => !x.trained)) assert.ok(s.text.endsWith(ASSISTANT_HEADER), JSON.stringify(s.text.slice(-40)));
});

test('loss mask: 1 exactly on assistant tokens (content + calls + <|im_end|> + \\n), ids equal the whole-text ids', () => {
  const { ids, lossMask, consistent } = tokenizeForTraining(DIALOGUE, tok);
  assert.equal(consistent, true);
  assert.equal(ids.length, lossMask.length);
  assert.deepEqual(ids, tok.encode(renderChat(DIALOGUE.messages, DIALOGUE.tools)));
  // Decode the trained runs: they are the assistant bodies; the untrained text ends with each assistant header.
  const runs: { trained: boolean; ids: number[] }[] = [];
  ids.forEach((id, k) => {
    const trained = lossMask[k] === 1;
    const last = runs[runs.length - 1];
    if (last && last.trained === trained) last.ids.push(id);
    else runs.push({ trained, ids: [id] });
  });
  const trainedText = runs.filter((r) => r.trained).map((r) => tok.decode(r.ids));
  assert.deepEqual(
    trainedText,
    chatSegments(DIALOGUE)
      .filter((s) => s.trained)
      .map((s) => s.text),
  );
  for (const r of runs.filter((x) => x.trained)) {
    assert.deepEqual(r.ids.slice(-2), [tok.special.imEnd, tok.newlineId]);
  }
  for (const r of runs.filter((x) => !x.trained)) {
    assert.ok(tok.decode(r.ids).endsWith(ASSISTANT_HEADER));
  }
});

test('segment-wise ids equal whole-text ids on 100 demo dialogues', () => {
  for (const ex of generateDemoDataset({ seed: 3, count: 100 })) {
    const { ids, lossMask, consistent } = tokenizeForTraining(ex, tok);
    assert.equal(consistent, true, ex.uuid);
    assert.deepEqual(ids, tok.encode(renderChat(ex.messages, ex.tools)), ex.uuid);
    const trained = lossMask.reduce((s, m) => s + m, 0);
    assert.ok(trained > 0 && trained < ids.length, ex.uuid);
  }
});

test('promptIds ends with the assistant header; a generated call round-trips into the stored sequence and parses', () => {
  const messages = DIALOGUE.messages.slice(0, 2);
  const prompt = promptIds(messages, DIALOGUE.tools, tok);
  assert.equal(tok.decode(prompt), renderChat(messages, DIALOGUE.tools, { addGenerationPrompt: true }));
  assert.ok(tok.decode(prompt).endsWith(ASSISTANT_HEADER));

  const generatedText = '<think>\nweather\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>';
  const generated = [...tok.encode(generatedText), tok.special.imEnd];
  const content = assistantContentFromIds(generated, tok);
  assert.equal(content, generatedText);
  assert.deepEqual(parseToolCalls(content).calls, [{ name: 'get_weather', arguments: { city: 'Oslo' } }]);
  const stored = completeAssistantIds(generated, tok);
  assert.deepEqual(stored.slice(-2), [tok.special.imEnd, tok.newlineId]);
  assert.equal(stored.length, generated.length + 1);
  assert.deepEqual(completeAssistantIds(tok.encode('hi'), tok).slice(-2), [tok.special.imEnd, tok.newlineId]);
  // The stored sequence is what the template renders for that message (prompt + stored = render with the message).
  const withMsg = [...messages, { role: 'assistant', content }];
  assert.equal(tok.decode([...prompt, ...stored]), renderChat(withMsg, DIALOGUE.tools));
});

test('stop ids: <|im_end|>, the eos, generation_config\'s eos ids and <|endoftext|>; a generation ended by any of them keeps it as a sampled token, and its content drops it', () => {
  const endOfText = tok.tokenToId('<|endoftext|>')!;
  assert.deepEqual([...tok.stopIds].sort((a, b) => a - b), [tok.special.imEnd, endOfText].sort((a, b) => a - b));
  const tj = JSON.parse(readFileSync(path.join(DEMO_TOKENIZER_DIR, 'tokenizer.json'), 'utf8')) as object;
  const cfg = JSON.parse(readFileSync(path.join(DEMO_TOKENIZER_DIR, 'tokenizer_config.json'), 'utf8')) as Record<string, unknown>;
  const other = tok.tokenToId('<tool_call>')!;
  const withGeneration = new ChatTokenizer(tj, cfg, { eos_token_id: [other, 10 ** 9, 'x'] });
  assert.ok(withGeneration.stopIds.includes(other), 'generation_config eos ids are stops');
  assert.ok(!withGeneration.stopIds.includes(10 ** 9), 'ids outside the vocabulary are not');
  const said = tok.encode('All done.');
  for (const stop of tok.stopIds) {
    const generated = [...said, stop];
    assert.equal(assistantContentFromIds(generated, tok), 'All done.');
    const stored = completeAssistantIds(generated, tok);
    assert.deepEqual(stored, stop === tok.special.imEnd ? [...generated, tok.newlineId] : [...generated, tok.special.imEnd, tok.newlineId]);
  }
  assert.deepEqual(tok.withoutStop(said), said);
});
