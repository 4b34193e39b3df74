import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { judgeViewAt, type JudgeView } from '../../../../src/stages/checklist/check';
import type { StoredItem } from '../../../../src/stages/checklist/schema';
import type { Message } from '../../../../src/kernel/schema';
import { LlmClient } from '../../../../src/llm/client';
import { LlmConfig, type LlmRoleConfigInput } from '../../../../src/llm/llmConfig';
import { JUDGE_PROMPT_VERSION, Judge, JudgeConfig, withJudgeDefaults, type VerdictCache } from '../../../../src/stages/rl/judge/judge';
import type { StepJudge } from '../../../../src/stages/rl/judge/phase';
import type { Verdict } from '../../../../src/stages/rl/rolloutSchema';
import { replies, startFakeOpenAI, type Behaviour, type FakeOpenAI, type RecordedRequest } from '../../../helpers/fakeOpenAI';
import { assistant, call, goodExample, tool, user } from '../../../fixtures/dialogues';
import { JUDGE_JSON_SCHEMA, judgeBatchJsonSchema, judgeBatchPrompt, judgePrompt, parseJudgeBatchAnswer, VERDICT_FIELDS } from '../../../../src/stages/rl/judge/judgePrompt';
import { renderJudgeMessages } from '../../../../src/stages/rl/judge/judgeView';
import { LlmFatalError, LlmRetryableError } from '../../../../src/llm/errors';
import { addCounts, zeroJudgeTotals } from '../../../../src/kernel/counts';

// ---------------------------------------------------------------------------------------------------------------
// Fixtures

const servers: FakeOpenAI[] = [];
after(async () => {
  await Promise.all(servers.map((s) => s.close()));
});

async function fake(behaviour: Behaviour): Promise<FakeOpenAI> {
  const s = await startFakeOpenAI({ behaviour });
  servers.push(s);
  return s;
}

/** A client whose judge role points at `server`, with the reference sampling and a short backoff. */
function clientFor(server: FakeOpenAI, role: Partial<LlmRoleConfigInput> = {}): LlmClient {
  const cfg = withJudgeDefaults(LlmConfig.parse({ roles: { judge: { baseUrl: server.url, model: 'fake-judge', ...role } } }));
  return new LlmClient(cfg, { backoff: { baseMs: 1, maxMs: 2, maxRetryAfterMs: 10 }, log: () => undefined, env: {} });
}

const memoryCache = (): VerdictCache & { map: Map<string, Verdict> } => {
  const map = new Map<string, Verdict>();
  return { map, get: async (k) => map.get(k), put: async (k, v) => void map.set(k, v) };
};

function item(id: string, over: Partial<StoredItem> = {}): StoredItem {
  return {
    id,
    evidence: [{ turn: 0, step: 1, from: 'assistant.tool_calls', snippet: `snippet of ${id}` }],
    focus_on: 'assistant.content.user_visible_reply',
    question: `Question ${id}?`,
    pass_condition: `Pass condition of ${id}.`,
    failure_examples: [`Failure of ${id}.`],
    required_for_next_turn: true,
    dependence: [],
    weight: 0.5,
    extra_info: { price_usd: 0 },
    ...over,
  };
}

const toolItem = (id: string) => item(id, { focus_on: 'assistant.tool_calls' });

/** The first turn of the good dialogue, judged at its final reply (step offset 6). */
const finalView = (): JudgeView => judgeViewAt(goodExample().messages, 0, 6);

/** A one-item verdict with the five fields. */
const verdict = (answer: unknown) => ({
  high_level_understanding_of_the_question: 'u',
  analysis_of_if_focus_on: 'f',
  analysis_of_pass_condition: 'p',
  analysis_of_failure_examples: 'e',
  answer,
});

const schemaName = (r: RecordedRequest) => r.body.response_format?.json_schema?.name;
/** The item ids a batch request asks about (the schema's enum). */
const batchIds = (r: RecordedRequest): string[] => {
  const schema = r.body.response_format?.json_schema?.schema as { properties: { verdicts: { items: { properties: { item_id: { enum: string[] } } } } } };
  return schema.properties.verdicts.items.properties.item_id.enum;
};
const promptOf = (r: RecordedRequest): string => String(r.body.messages?.[0]?.content);

// ---------------------------------------------------------------------------------------------------------------

describe('message rendering (reference get_messages_str_v2)', () => {
  test('exact text of a turn: structured calls as Python JSON, steps, tool messages', () => {
    const text = renderJudgeMessages(goodExample().messages.slice(0, 3));
    assert.equal(
      text,
      '# Turn: 0\nRole: user\ncontent: What is the weather in Paris, and the time there and in Rome?\n' +
        '## Step: 0\nRole: assistant\ncontent.thinking: \nFirst the weather in Paris.\n\ncontent.user_visible_reply: None\n' +
        'tool_call: [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]\n' +
        'Role: tool\ncontent: {"temperature": 18}\n',
    );
  });

  test('turn numbers count from 0 within the slice; steps restart at each user message', () => {
    const messages = goodExample().messages;
    const whole = renderJudgeMessages([{ role: 'system', content: 'Be brief.' }, ...messages]);
    assert.match(whole, /^Role: system\ncontent: Be brief\.\n# Turn: 0\n/);
    assert.deepEqual([...whole.matchAll(/# Turn: (\d+)/g)].map((m) => m[1]), ['0', '1']);
    assert.deepEqual([...whole.matchAll(/## Step: (\d+)/g)].map((m) => m[1]), ['0', '1', '2', '0']);
    // The second turn on its own is "Turn: 0" again (the current block of the judge).
    const view = judgeViewAt(messages, 1, 1);
    assert.match(renderJudgeMessages(view.current), /^# Turn: 0\nRole: user\ncontent: Thanks!\n## Step: 0\n/);
    assert.deepEqual([...renderJudgeMessages(view.previous).matchAll(/# Turn: (\d+)/g)].map((m) => m[1]), ['0']);
    assert.match(renderJudgeMessages(view.current, { firstTurn: 1 }), /^# Turn: 1\n/);
  });

  test('a message without a think block is all thinking, its reply "None"; an empty reply is "None"', () => {
    const text = renderJudgeMessages([
      assistant('Plain answer without thinking.\n<tool_call>\n{"name": "get_time", "arguments": {"city": "Rome"}}\n</tool_call>'),
      assistant('<think>only thinking</think>\n  \n'),
      assistant('<think>why</think>\n\nThe answer.'),
    ]);
    assert.equal(
      text,
      '## Step: 0\nRole: assistant\ncontent.thinking: Plain answer without thinking.\n<tool_call>\n{"name": "get_time", "arguments": {"city": "Rome"}}\n</tool_call>\n' +
        'content.user_visible_reply: None\ntool_call: None\n' +
        '## Step: 1\nRole: assistant\ncontent.thinking: only thinking\ncontent.user_visible_reply: None\ntool_call: None\n' +
        '## Step: 2\nRole: assistant\ncontent.thinking: why\ncontent.user_visible_reply: The answer.\ntool_call: None\n',
    );
  });

  test('raw <tool_call> text in the reply moves to tool_call with renamed tags; an empty structured list is "[]"', () => {
    const raw = '<think>\ncall it\n</think>\n\n<tool_call>\n{"name": "get_time", "arguments": {"city": "Rome"}}\n</tool_call>';
    assert.equal(
      renderJudgeMessages([assistant(raw)]),
      '## Step: 0\nRole: assistant\ncontent.thinking: \ncall it\n\ncontent.user_visible_reply: None\n' +
        'tool_call: <|tool_call_start|>\n{"name": "get_time", "arguments": {"city": "Rome"}}\n<|tool_call_end|>\n',
    );
    assert.match(renderJudgeMessages([{ role: 'assistant', content: '<think>x</think>hi', tool_calls: [] }]), /user_visible_reply: hi\ntool_call: \[\]\n$/);
    // Arguments keep Python's int/float distinction and are ASCII-escaped.
    assert.match(renderJudgeMessages([assistant('<think>x</think>', [call('f', '{"x": 1.0, "c": "café"}')])]), /"arguments": \{"x": 1\.0, "c": "caf\\u00e9"\}/);
  });
});

describe('prompts', () => {
  const it = item('C1', {
    question: 'Did the assistant quote the café price?',
    failure_examples: ['Says “cheap” without a number', 'Wrong price'],
    evidence: [
      { turn: 0, step: 3, from: 'tool.content', snippet: '{"price": 12.5}' },
      { turn: 0, step: 4, from: 'assistant.content.user_visible_reply', snippet: 'It costs 12.5' },
    ],
    dependence: ['C0zz'],
    weight: 0.31415,
    required_for_next_turn: false,
  });

  test('one-item prompt: criterion fields, ASCII-escaped JSON with indent 2, snippets, both message blocks, rule, output keys', () => {
    const view = judgeViewAt(goodExample().messages, 1, 1);
    const p = judgePrompt(it, view);
    assert.ok(p.includes('**Question:** Did the assistant quote the café price?'));
    assert.ok(p.includes('**Focus on:** assistant.content.user_visible_reply'));
    assert.ok(p.includes(`**Pass condition:** ${it.pass_condition}`));
    assert.ok(p.includes('**Failure examples:** [\n  "Says \\u201ccheap\\u201d without a number",\n  "Wrong price"\n]'));
    assert.ok(p.includes('[\n  "{\\"price\\": 12.5}",\n  "It costs 12.5"\n]'));
    const prev = p.indexOf('# Previous Messages\n# Turn: 0\nRole: user\ncontent: What is the weather');
    const cur = p.indexOf('# Current Messages to Evaluate\n# Turn: 0\nRole: user\ncontent: Thanks!');
    assert.ok(prev >= 0 && cur > prev, p);
    assert.match(p, /# Special rule for tool calls\n.*content\.thinking contains tool calls.*none of those calls counts/);
    assert.match(p, /tool response reports an error, the tool calls of the latest assistant step \(that step only\) are invalid/);
    for (const f of VERDICT_FIELDS) assert.ok(p.includes(`"${f}"`), f);
    assert.match(p, /1\. high_level_understanding_of_the_question[\s\S]*2\. analysis_of_if_focus_on[\s\S]*3\. analysis_of_pass_condition[\s\S]*4\. analysis_of_failure_examples[\s\S]*5\. answer/);
    // Never shown: weight, dependence, evidence pointers, required_for_next_turn.
    for (const hidden of ['0.31415', 'C0zz', 'required_for_next_turn', 'weight', 'depend', 'tool.content', '"step"']) assert.ok(!p.includes(hidden), hidden);
  });

  test('structured-output schemas are strict with exactly the verdict keys', () => {
    assert.equal(JUDGE_JSON_SCHEMA.strict, true);
    const s = JUDGE_JSON_SCHEMA.schema as { required: string[]; additionalProperties: boolean; properties: Record<string, { type: string }> };
    assert.deepEqual(s.required, [...VERDICT_FIELDS]);
    assert.deepEqual(Object.keys(s.properties), [...VERDICT_FIELDS]);
    assert.equal(s.properties['answer']!.type, 'boolean');
    assert.equal(s.additionalProperties, false);
    const b = judgeBatchJsonSchema([it, item('C2'), item('C2')]);
    assert.equal(b.strict, true);
    const entry = (b.schema as { properties: { verdicts: { items: { required: string[]; properties: { item_id: { enum: string[] } } } } } }).properties.verdicts.items;
    assert.deepEqual(entry.required, ['item_id', ...VERDICT_FIELDS]);
    assert.deepEqual(entry.properties.item_id.enum, ['C1', 'C2', 'C2#1']);
  });

  test('batch prompt lists every item with its id and asks for one verdict each', () => {
    const p = judgeBatchPrompt([it, item('C2')], finalView());
    assert.ok(p.includes('item_id: "C1"') && p.includes('item_id: "C2"'));
    assert.ok(p.includes('Question C2?') && p.includes('snippet of C2') && p.includes('Did the assistant quote'));
    assert.ok(p.includes('"verdicts"') && p.includes('"item_id"'));
    assert.ok(!p.includes('0.31415') && !p.includes('C0zz'));
  });

  test('batch answers: mapped by id, missing / non-boolean / contradictory entries left out', () => {
    const ids = ['A', 'B', 'C', 'D'];
    const text = JSON.stringify({
      verdicts: [
        { item_id: 'B', answer: false },
        { item_id: 'A', answer: true },
        { item_id: 'C', answer: 'yes' },
        { item_id: 'D', answer: true },
        { item_id: 'D', answer: false },
        { item_id: 'Z', answer: true },
      ],
    });
    assert.deepEqual([...parseJudgeBatchAnswer(text, ids)].sort(), [['A', true], ['B', false]]);
    assert.deepEqual(parseJudgeBatchAnswer('not json', ids).size, 0);
  });
});

describe('config and stats', () => {
  test('defaults and stats arithmetic', () => {
    assert.deepEqual(JudgeConfig.parse({}), { batchItems: 8, samples: 1, attempts: 2, offlineChecks: 'auto', promptVersion: JUDGE_PROMPT_VERSION });
    const a = { ...zeroJudgeTotals(), calls: 2, failed: 1 };
    const b = { ...zeroJudgeTotals(), calls: 1, shortcut: 3, promptTokens: 5 };
    assert.deepEqual(addCounts(a, b), { ...zeroJudgeTotals(), calls: 3, failed: 1, shortcut: 3, promptTokens: 5 });
    // The Judge is a StepJudge for the judge phase.
    const asStep: StepJudge = new Judge({}, {});
    assert.ok(asStep);
  });
});

describe('offline judge and shortcut', () => {
  const toolCalledParis = item('T', { focus_on: 'assistant.tool_calls', check: { kind: 'tool_called', name: 'get_weather', arguments: { city: 'paris' } } });
  const toolCalledRome = item('R', { focus_on: 'assistant.tool_calls', check: { kind: 'tool_called', name: 'get_weather', arguments: { city: 'Rome' } } });
  const states = item('S', { check: { kind: 'reply_states', value: '18 °C' } });

  test('without an LLM, items with a check are decided by it on the judge view', async () => {
    const judge = new Judge({}, {});
    const { verdicts, stats } = await judge.judgeStep(finalView(), [toolCalledParis, toolCalledRome, states], { salt: 's' });
    assert.deepEqual(verdicts, [
      { pass: true, ok: true },
      { pass: false, ok: true },
      { pass: true, ok: true },
    ]);
    assert.deepEqual(stats, { ...zeroJudgeTotals(), offline: 3 });
    // At the first step the reply does not exist yet.
    const early = await judge.judgeStep(judgeViewAt(goodExample().messages, 0, 1), [states], { salt: 's' });
    assert.deepEqual(early.verdicts, [{ pass: false, ok: true }]);
  });

  test('offline, an item without a check (or offlineChecks "never") is a non-retryable configuration error', async () => {
    await assert.rejects(new Judge({}, {}).judgeStep(finalView(), [states, item('X')], { salt: 's' }), (e: unknown) => e instanceof LlmFatalError && /item X has no machine-checkable/.test(e.message));
    await assert.rejects(new Judge({}, { offlineChecks: 'never' }).judgeStep(finalView(), [states], { salt: 's' }), LlmFatalError);
    // A client whose judge role has no endpoint is offline too.
    const offlineClient = new LlmClient(LlmConfig.parse({}), { log: () => undefined });
    assert.equal(new Judge({ llm: offlineClient }, {}).online, false);
    await assert.rejects(new Judge({ llm: offlineClient }, {}).judgeStep(finalView(), [item('X')], { salt: 's' }), LlmFatalError);
  });

  test('with an LLM: "auto" asks the LLM for every item, "always" uses checks where present', async () => {
    const s = await fake(() => replies.json(verdict(false)));
    const llm = clientFor(s);
    const auto = await new Judge({ llm }, { batchItems: 1 }).judgeStep(finalView(), [states, item('X')], { salt: 'a' });
    assert.deepEqual(auto.verdicts, [
      { pass: false, ok: true },
      { pass: false, ok: true },
    ]);
    assert.equal(s.requests.length, 2);
    const always = await new Judge({ llm }, { batchItems: 1, offlineChecks: 'always' }).judgeStep(finalView(), [states, item('X')], { salt: 'b' });
    assert.deepEqual(always.verdicts, [
      { pass: true, ok: true },
      { pass: false, ok: true },
    ]);
    assert.equal(always.stats.offline, 1);
    assert.equal(s.requests.length, 3);
  });

  test('an error_tool_call answer to the judged step: tool items are false without a call, others still judged', async () => {
    const messages: Message[] = [
      user('Weather in Paris?'),
      assistant('<think>x</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"town": "Paris"}}\n</tool_call>'),
      tool('{"error_tool_call": {"code": "SCHEMA_VALIDATION_FAILED", "message": "bad"}}'),
    ];
    const view = judgeViewAt(messages, 0, 1);
    const s = await fake(() => replies.json(verdict(true)));
    const judge = new Judge({ llm: clientFor(s) }, { batchItems: 1 });
    const { verdicts, stats } = await judge.judgeStep(view, [toolItem('A'), item('B', { focus_on: 'tool.content' }), item('C')], { salt: 's' });
    assert.deepEqual(verdicts, [
      { pass: false, ok: true },
      { pass: false, ok: true },
      { pass: true, ok: true },
    ]);
    assert.equal(stats.shortcut, 2);
    assert.equal(stats.calls, 1);
    assert.equal(s.requests.length, 1);
    // A domain error ({"error": …}) is not the shortcut.
    const domain = judgeViewAt([...messages.slice(0, 2), tool('{"error": "out of stock"}')], 0, 1);
    const again = await judge.judgeStep(domain, [toolItem('A')], { salt: 's2' });
    assert.equal(again.stats.shortcut, 0);
    assert.equal(s.requests.length, 2);
  });
});

describe('LLM judge', () => {
  test('request: one user message, strict schema, reference sampling (0.6 / 0.8 / 6000)', async () => {
    const s = await fake(() => replies.json(verdict(true)));
    const { verdicts, stats } = await new Judge({ llm: clientFor(s) }, { batchItems: 1 }).judgeStep(finalView(), [item('A')], { salt: 's' });
    assert.deepEqual(verdicts, [{ pass: true, ok: true }]);
    assert.equal(stats.calls, 1);
    assert.ok(stats.promptTokens > 0);
    const body = s.requests[0]!.body;
    assert.equal(body.messages?.length, 1);
    assert.equal(body.messages?.[0]?.role, 'user');
    assert.equal(body.temperature, 0.6);
    assert.equal(body.top_p, 0.8);
    assert.equal(body.max_tokens, 6000);
    assert.equal(body.response_format?.json_schema?.strict, true);
    assert.equal(schemaName(s.requests[0]!), 'evaluation_verdict');
    assert.equal(promptOf(s.requests[0]!), judgePrompt(item('A'), finalView()));
  });

  test('batching: one call for N items, verdicts mapped by item_id whatever the order', async () => {
    const s = await fake((r) => {
      const ids = batchIds(r);
      return replies.json({ verdicts: [...ids].reverse().map((id) => ({ item_id: id, ...verdict(id === 'B') })) });
    });
    const items = [item('A'), item('B'), item('C')];
    const { verdicts, stats } = await new Judge({ llm: clientFor(s) }, { batchItems: 8 }).judgeStep(finalView(), items, { salt: 's' });
    assert.deepEqual(verdicts, [
      { pass: false, ok: true },
      { pass: true, ok: true },
      { pass: false, ok: true },
    ]);
    assert.equal(s.requests.length, 1);
    assert.equal(stats.calls, 1);
    assert.equal(schemaName(s.requests[0]!), 'evaluation_verdicts');
    assert.deepEqual(batchIds(s.requests[0]!), ['A', 'B', 'C']);
    // batchItems 2 → two calls (2 + 1 items; the lone item gets the one-item prompt).
    const s2 = await fake((r) => (schemaName(r) === 'evaluation_verdicts' ? replies.json({ verdicts: batchIds(r).map((id) => ({ item_id: id, ...verdict(true) })) }) : replies.json(verdict(true))));
    const two = await new Judge({ llm: clientFor(s2) }, { batchItems: 2 }).judgeStep(finalView(), items, { salt: 's' });
    assert.deepEqual(two.verdicts.map((v) => v.pass), [true, true, true]);
    assert.deepEqual(s2.requests.map(schemaName).sort(), ['evaluation_verdict', 'evaluation_verdicts']);
  });

  test('a batch answer missing an item: only that item is asked again, on its own', async () => {
    const s = await fake((r) => {
      if (schemaName(r) === 'evaluation_verdicts') return replies.json({ verdicts: [{ item_id: 'A', ...verdict(true) }, { item_id: 'C', ...verdict(false) }] });
      return replies.json(verdict(promptOf(r).includes('Question B?')));
    });
    const { verdicts, stats } = await new Judge({ llm: clientFor(s) }, {}).judgeStep(finalView(), [item('A'), item('B'), item('C')], { salt: 's' });
    assert.deepEqual(verdicts, [
      { pass: true, ok: true },
      { pass: true, ok: true },
      { pass: false, ok: true },
    ]);
    assert.equal(stats.calls, 2);
    assert.equal(schemaName(s.requests[1]!), 'evaluation_verdict');
    assert.ok(promptOf(s.requests[1]!).includes('Question B?') && !promptOf(s.requests[1]!).includes('Question A?'));
    // Missing again on its last attempt → failed for that item only.
    const s2 = await fake((r) => (schemaName(r) === 'evaluation_verdicts' ? replies.json({ verdicts: [{ item_id: 'A', ...verdict(true) }] }) : replies.text('no idea')));
    const out = await new Judge({ llm: clientFor(s2) }, {}).judgeStep(finalView(), [item('A'), item('B')], { salt: 's' });
    assert.deepEqual(out.verdicts, [
      { pass: true, ok: true },
      { pass: false, ok: false },
    ]);
    assert.equal(out.stats.failed, 1);
  });

  test('verdict cache: the same item on the same judged text is never paid twice (other salt, other judge)', async () => {
    const s = await fake(() => replies.json(verdict(true)));
    const cache = memoryCache();
    const items = [item('A'), item('B')];
    const first = await new Judge({ llm: clientFor(s), cache }, { batchItems: 1 }).judgeStep(finalView(), items, { salt: 'r1' });
    assert.equal(s.requests.length, 2);
    assert.equal(cache.map.size, 2);
    const second = await new Judge({ llm: clientFor(s), cache }, { batchItems: 1 }).judgeStep(finalView(), items, { salt: 'r2' });
    assert.equal(s.requests.length, 2, 'no new HTTP request');
    assert.deepEqual(second.verdicts, first.verdicts);
    assert.deepEqual(second.stats, { ...zeroJudgeTotals(), cacheHits: 2 });
    // A change in judged text, item wording, or verdict-relevant settings misses.
    await new Judge({ llm: clientFor(s), cache }, { batchItems: 1 }).judgeStep(judgeViewAt(goodExample().messages, 0, 3), [items[0]!], { salt: 'r3' });
    await new Judge({ llm: clientFor(s), cache }, { batchItems: 1 }).judgeStep(finalView(), [item('A', { question: 'Other?' })], { salt: 'r3' });
    await new Judge({ llm: clientFor(s), cache }, { batchItems: 1, samples: 1, promptVersion: 'other' }).judgeStep(finalView(), [items[0]!], { salt: 'r3' });
    await new Judge({ llm: clientFor(s, { temperature: 0 }), cache }, { batchItems: 1 }).judgeStep(finalView(), [items[0]!], { salt: 'r3' });
    assert.equal(s.requests.length, 6);
    // The item id and weight are not judging fields.
    await new Judge({ llm: clientFor(s), cache }, { batchItems: 1 }).judgeStep(finalView(), [item('Z', { question: 'Question A?', pass_condition: 'Pass condition of A.', failure_examples: ['Failure of A.'], evidence: items[0]!.evidence, weight: 0.9 })], { salt: 'r4' });
    assert.equal(s.requests.length, 6);
  });

  test('identical work in flight is shared, not asked twice', async () => {
    const s = await fake(() => replies.json(verdict(true), { delayMs: 20 }));
    const judge = new Judge({ llm: clientFor(s) }, { batchItems: 1 });
    const [a, b] = await Promise.all([judge.judgeStep(finalView(), [item('A')], { salt: 'x' }), judge.judgeStep(finalView(), [item('A')], { salt: 'y' })]);
    assert.deepEqual(a.verdicts, b.verdicts);
    assert.equal(s.requests.length, 1);
    assert.equal(a.stats.calls + b.stats.calls, 1);
    assert.equal(a.stats.cacheHits + b.stats.cacheHits, 1);
  });

  test('majority vote over K samples: 2 of 3 true ⇒ true, 1 of 3 ⇒ false; each sample its own call', async () => {
    const answers = [true, false, true];
    const s = await fake((_r, ctx) => replies.json(verdict(answers[(ctx.total - 1) % 3])));
    const { verdicts, stats } = await new Judge({ llm: clientFor(s) }, { batchItems: 1, samples: 3 }).judgeStep(finalView(), [item('A')], { salt: 's' });
    assert.deepEqual(verdicts, [{ pass: true, ok: true }]);
    assert.equal(stats.calls, 3);
    assert.equal(s.requests.length, 3);
    answers.splice(0, 3, false, true, false);
    const minority = await new Judge({ llm: clientFor(s) }, { batchItems: 1, samples: 3 }).judgeStep(finalView(), [item('A')], { salt: 't' });
    assert.deepEqual(minority.verdicts, [{ pass: false, ok: true }]);
    // A tie (1 true, 1 false) ⇒ false; a failed sample does not vote.
    const tie = await fake((_r, ctx) => replies.json(verdict(ctx.total === 1)));
    assert.deepEqual((await new Judge({ llm: clientFor(tie) }, { batchItems: 1, samples: 2, attempts: 1 }).judgeStep(finalView(), [item('A')], { salt: 's' })).verdicts, [{ pass: false, ok: true }]);
    const oneFails = await fake((_r, ctx) => (ctx.total === 1 ? replies.text('garbage') : replies.json(verdict(true))));
    assert.deepEqual((await new Judge({ llm: clientFor(oneFails) }, { batchItems: 1, samples: 2, attempts: 1 }).judgeStep(finalView(), [item('A')], { salt: 's' })).verdicts, [{ pass: true, ok: true }]);
  });

  test('non-JSON twice ⇒ {pass: false, ok: false}, counted, not cached; a non-boolean answer is retried', async () => {
    const s = await fake(() => replies.text('I think it passes.'));
    const cache = memoryCache();
    const { verdicts, stats } = await new Judge({ llm: clientFor(s), cache }, { batchItems: 1 }).judgeStep(finalView(), [item('A')], { salt: 's' });
    assert.deepEqual(verdicts, [{ pass: false, ok: false }]);
    assert.equal(stats.failed, 1);
    assert.equal(stats.calls, 2);
    assert.equal(s.requests.length, 2);
    assert.equal(cache.map.size, 0);
    const s2 = await fake((_r, ctx) => (ctx.total === 1 ? replies.json(verdict('true')) : replies.text('```json\n' + JSON.stringify(verdict(true)) + '\n```')));
    const retried = await new Judge({ llm: clientFor(s2), cache }, { batchItems: 1 }).judgeStep(finalView(), [item('A')], { salt: 's' });
    assert.deepEqual(retried.verdicts, [{ pass: true, ok: true }]);
    assert.equal(s2.requests.length, 2);
    assert.equal(cache.map.size, 1);
  });

  test('HTTP 503 that persists is thrown (a judge outage), not a verdict', async () => {
    const s = await fake(() => replies.status(503, { message: 'overloaded' }));
    const cache = memoryCache();
    await assert.rejects(new Judge({ llm: clientFor(s, { maxTransportRetries: 1 }), cache }, {}).judgeStep(finalView(), [item('A'), item('B')], { salt: 's' }), LlmRetryableError);
    assert.equal(s.requests.length, 2);
    assert.equal(cache.map.size, 0);
  });
});
