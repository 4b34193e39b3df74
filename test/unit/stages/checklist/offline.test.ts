import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Example, Message } from '../../../../src/kernel/schema';
import { assistantSteps, evaluateCheck, itemSatisfiedInTurn, judgeViewAt, type JudgeView } from '../../../../src/stages/checklist/check';
import { ChecklistOutput, WEIGHT_TOLERANCE, type ChecklistItem, type ItemCheck, type TurnBlock } from '../../../../src/stages/checklist/schema';
import { messageAt, turnSpans } from '../../../../src/stages/checklist/steps';
import { validateChecklist } from '../../../../src/stages/checklist/validate';
import { offlineChecklist, OFFLINE_ANNOTATOR } from '../../../../src/demo/checklist';
import { generateDemoDataset, worldMetaOf } from '../../../../src/demo/generator';
import { GroundingContext } from '../../../../src/kernel/grounding';

const dataset = generateDemoDataset({ seed: 23, count: 320, brokenRate: 0 });
const annotated = dataset.map((example) => ({ example, blocks: offlineChecklist(example) }));

/** Every (example, block, item) of the dataset. */
const allItems = annotated.flatMap(({ example, blocks }) => blocks.flatMap((block) => block.checklist.map((item) => ({ example, block, item }))));
const checkOf = (item: ChecklistItem): ItemCheck => {
  assert.ok(item.check, `item ${item.id} has a check`);
  return item.check;
};

/** Index in `messages` of the turn's final reply (its last message). */
const finalReplyIndex = (messages: readonly Message[], turn: number): number => turnSpans(messages)[turn]!.end;

describe('offline checklist of the demo world', () => {
  test('annotator name and a clear error without meta.world', () => {
    assert.equal(OFFLINE_ANNOTATOR, 'offline:demo-world');
    const bare: Example = { ...dataset[0]!, uuid: 'no-world-uuid', meta: {} };
    assert.throws(() => offlineChecklist(bare), /no-world-uuid.*meta\.world/);
  });

  test('is deterministic and covers every kind of check', () => {
    assert.deepEqual(offlineChecklist(dataset[5]!), annotated[5]!.blocks);
    const kinds = new Set(allItems.map(({ item }) => checkOf(item).kind));
    assert.deepEqual([...kinds].sort(), ['no_tool_call', 'reply_asks', 'reply_grounded', 'reply_states', 'tool_called', 'tool_succeeded']);
  });

  test('every checklist validates, without errors or warnings', () => {
    for (const { example, blocks } of annotated) {
      const result = validateChecklist(blocks, example);
      assert.ok(result.ok, `${example.uuid}: ${JSON.stringify(result.violations.slice(0, 3))}`);
      assert.deepEqual(result.violations, [], example.uuid);
      ChecklistOutput.parse(blocks);
    }
  });

  test('weights, dependence keys, evidence pointers and wording (checked here as well as by the validator)', () => {
    for (const { example, blocks } of annotated) {
      assert.equal(blocks.length, worldMetaOf(example).turns.length);
      blocks.forEach((block: TurnBlock, t) => {
        assert.equal(block.turn, t);
        const ids = block.checklist.map((i) => i.id);
        assert.deepEqual(ids, ids.map((_, k) => `C${k}`));
        assert.deepEqual(Object.keys(block.dependence).sort(), [...ids].sort());
        assert.deepEqual(Object.keys(block.weight).sort(), [...ids].sort());
        const sum = Object.values(block.weight).reduce((a, b) => a + b, 0);
        assert.ok(Math.abs(sum - 1) <= 1e-9 && WEIGHT_TOLERANCE >= 1e-9, `${example.uuid} turn ${t}: weights sum to ${sum}`);
        const required = block.checklist.filter((i) => i.required_for_next_turn).map((i) => block.weight[i.id]!);
        const optional = block.checklist.filter((i) => !i.required_for_next_turn).map((i) => block.weight[i.id]!);
        for (const w of [...required, ...optional]) assert.ok(w >= 0 && w <= 1);
        if (optional.length > 0) assert.ok(Math.min(...required) > Math.max(...optional), `${example.uuid} turn ${t}: required items weigh more`);
        for (const item of block.checklist) {
          for (const dep of block.dependence[item.id]!) {
            assert.equal(block.checklist.find((i) => i.id === dep)?.focus_on, 'tool.content', `${item.id} depends on ${dep}`);
          }
          assert.ok(item.failure_examples.length >= 1 && item.failure_examples.length <= 3);
          for (const text of [item.question, item.pass_condition, ...item.failure_examples]) {
            assert.doesNotMatch(text, /\b(turn|step)s?\b\s*\d/i, text);
          }
          assert.ok(item.evidence.length > 0);
          for (const ev of item.evidence) {
            const at = messageAt(example.messages, ev.turn, ev.step);
            assert.ok(at && ev.turn === t && ev.step > 0, `${example.uuid} ${item.id}: evidence points at a message of its turn`);
            assert.equal(at.message.role, ev.from === 'tool.content' ? 'tool' : 'assistant');
          }
        }
      });
    }
  });

  test('the reference dialogue passes its own checklist: every item is satisfied in its turn', () => {
    for (const { example, block, item } of allItems) {
      const r = itemSatisfiedInTurn(checkOf(item), example.messages, block.turn);
      assert.ok(r.satisfied, `${example.uuid} turn ${block.turn} ${item.id}: ${item.question}`);
      // ... exactly at the step its evidence points at (a tool message's step: the assistant step it answers).
      const ev = item.evidence[0]!;
      const judged = Math.max(...assistantSteps(example.messages, block.turn).filter((s) => s <= ev.step));
      assert.equal(r.firstStep, judged, `${example.uuid} turn ${block.turn} ${item.id}`);
    }
  });

  test('changing a call argument fails its tool_called and tool_succeeded items', () => {
    let checked = 0;
    for (const { example, block, item } of allItems) {
      const check = checkOf(item);
      if (check.kind !== 'tool_called') continue;
      const key = Object.keys(check.arguments)[0];
      if (key === undefined) continue;
      const messages = structuredClone(example.messages);
      const at = messageAt(messages, block.turn, item.evidence[0]!.step)!;
      for (const call of at.message.tool_calls ?? []) {
        const args = JSON.parse(call.function.arguments as string) as Record<string, unknown>;
        if (call.function.name !== check.name || JSON.stringify(args[key]) !== JSON.stringify(check.arguments[key])) continue;
        const v = args[key];
        args[key] = typeof v === 'number' ? v + 7 : `${String(v)}zz`;
        call.function.arguments = JSON.stringify(args);
      }
      assert.equal(itemSatisfiedInTurn(check, messages, block.turn).satisfied, false, `${example.uuid} ${item.id}`);
      const succeeded = block.checklist.map((i) => i.check).find((c) => c?.kind === 'tool_succeeded' && c.name === check.name && JSON.stringify(c.arguments) === JSON.stringify(check.arguments));
      if (succeeded) assert.equal(itemSatisfiedInTurn(succeeded, messages, block.turn).satisfied, false);
      checked++;
    }
    assert.ok(checked > 300, `${checked} calls perturbed`);
  });

  test('a final reply without the facts fails the reply_states items (and reply_asks)', () => {
    let checked = 0;
    for (const { example, block } of annotated.flatMap(({ example, blocks }) => blocks.map((block) => ({ example, block })))) {
      const messages = structuredClone(example.messages);
      messages[finalReplyIndex(messages, block.turn)]!.content = '<think>\nI will answer briefly.\n</think>\n\nSorry, I cannot help with that right now.';
      for (const item of block.checklist) {
        const check = checkOf(item);
        const satisfied = itemSatisfiedInTurn(check, messages, block.turn).satisfied;
        if (check.kind === 'reply_states' || check.kind === 'reply_asks') {
          assert.equal(satisfied, false, `${example.uuid} ${item.id}: ${item.question}`);
          checked++;
        }
        // The replacement invents nothing and calls nothing: grounded and tool items are unaffected.
        if (check.kind === 'reply_grounded' || check.kind === 'tool_called' || check.kind === 'no_tool_call') assert.equal(satisfied, true);
      }
    }
    assert.ok(checked > 500, `${checked} reply items checked`);
  });

  test('a reply with an invented number fails reply_grounded', () => {
    for (const { example, block, item } of allItems) {
      const check = checkOf(item);
      if (check.kind !== 'reply_grounded') continue;
      const messages = structuredClone(example.messages);
      const ctx = new GroundingContext();
      for (const m of messages) if (m.role === 'user' || m.role === 'tool') ctx.add(m.content);
      const invented = '8675309.25';
      assert.equal(ctx.hasFactToken(invented), false);
      messages[finalReplyIndex(messages, block.turn)]!.content += ` Your reference number is ${invented}.`;
      assert.equal(itemSatisfiedInTurn(check, messages, block.turn).satisfied, false, `${example.uuid} ${item.id}`);
    }
  });

  test('a tool error result fails tool_succeeded; an error_tool_call also voids the call', () => {
    let checked = 0;
    for (const { example, block, item } of allItems) {
      const check = checkOf(item);
      if (check.kind !== 'tool_succeeded') continue;
      const ev = item.evidence[0]!;
      const called: ItemCheck = { kind: 'tool_called', name: check.name, arguments: check.arguments };
      for (const [content, voidsCall] of [
        ['{"error":{"code":"not_found","message":"unknown city"}}', false],
        ['{"error_tool_call":{"code":"SCHEMA_VALIDATION_FAILED","message":"bad arguments"}}', true],
        ['{"error": simulator timed out}', false],
      ] as const) {
        const messages = structuredClone(example.messages);
        messageAt(messages, block.turn, ev.step)!.message.content = content;
        assert.equal(itemSatisfiedInTurn(check, messages, block.turn).satisfied, false, `${example.uuid} ${item.id} with ${content}`);
        assert.equal(itemSatisfiedInTurn(called, messages, block.turn).satisfied, !voidsCall);
      }
      checked++;
    }
    assert.ok(checked > 300, `${checked} tool results perturbed`);
  });

  test('no-tool turns: calling a tool fails no_tool_call', () => {
    let checked = 0;
    for (const { example, block, item } of allItems) {
      const check = checkOf(item);
      if (check.kind !== 'no_tool_call') continue;
      const messages = structuredClone(example.messages);
      const end = finalReplyIndex(messages, block.turn);
      messages.splice(
        end,
        0,
        { role: 'assistant', content: '<think>\nI will guess.\n</think>', tool_calls: [{ type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
        { role: 'tool', content: '{"city":"Paris","temperature":12}' },
      );
      assert.equal(itemSatisfiedInTurn(check, messages, block.turn).satisfied, false);
      checked++;
    }
    assert.ok(checked > 10, `${checked} no-tool turns`);
  });
});

// ---------------------------------------------------------------------------------------------------------------

const user = (content: string): Message => ({ role: 'user', content });
const call = (name: string, args: string | Record<string, unknown>, content = '<think>\nI will call a tool.\n</think>'): Message => ({
  role: 'assistant',
  content,
  tool_calls: [{ type: 'function', function: { name, arguments: args } }],
});
const tool = (content: string): Message => ({ role: 'tool', content });
const reply = (text: string, think = 'I can answer now.'): Message => ({ role: 'assistant', content: `<think>\n${think}\n</think>\n\n${text}` });
const viewOf = (...current: Message[]): JudgeView => ({ previous: [], current: [user('question'), ...current] });

describe('evaluateCheck', () => {
  const called = (args: Record<string, unknown>): ItemCheck => ({ kind: 'tool_called', name: 'get_forecast', arguments: args as Record<string, string> });

  test('arguments: strings trimmed and case-insensitive, numbers by value, others canonical JSON, extra keys allowed', () => {
    const v = viewOf(call('get_forecast', '{"city":"  paris ","days":1.0,"opts":{"b":2,"a":[1,"X"]},"extra":true}'), tool('{"ok":1}'));
    assert.equal(evaluateCheck(called({ city: 'Paris', days: 1 }), v), true);
    assert.equal(evaluateCheck(called({ opts: { a: [1, 'X'], b: 2 } }), v), true);
    assert.equal(evaluateCheck(called({ opts: { a: [1, 'x'], b: 2 } }), v), false, 'nested strings compare exactly');
    assert.equal(evaluateCheck(called({ days: 2 }), v), false);
    assert.equal(evaluateCheck(called({ days: '1' }), v), false, 'a string is not a number');
    assert.equal(evaluateCheck(called({ unit: 'celsius' }), v), false, 'a missing key fails');
    assert.equal(evaluateCheck({ kind: 'tool_called', name: 'get_weather', arguments: { city: 'Paris' } }, v), false, 'another tool');
    // Object arguments (OpenAI style) decode the same way; undecodable arguments never match.
    assert.equal(evaluateCheck(called({ city: 'PARIS', days: 1 }), viewOf(call('get_forecast', { city: 'Paris', days: 1 }))), true);
    assert.equal(evaluateCheck(called({}), viewOf(call('get_forecast', '{not json'))), false);
  });

  test('raw <tool_call> blocks count outside the thinking, not inside it', () => {
    const raw = '<think>\nok\n</think>\n\n<tool_call>\n{"name": "get_forecast", "arguments": {"city": "Rome"}}\n</tool_call>';
    assert.equal(evaluateCheck(called({ city: 'Rome' }), viewOf({ role: 'assistant', content: raw })), true);
    const inThinking = '<think>\n<tool_call>\n{"name": "get_forecast", "arguments": {"city": "Rome"}}\n</tool_call>\n</think>\n\nLet me check.';
    assert.equal(evaluateCheck(called({ city: 'Rome' }), viewOf({ role: 'assistant', content: inThinking })), false);
  });

  test('tool_succeeded: the answering tool message must exist and not be an error', () => {
    const ok: ItemCheck = { kind: 'tool_succeeded', name: 'get_forecast', arguments: { city: 'Paris' } };
    assert.equal(evaluateCheck(ok, viewOf(call('get_forecast', '{"city":"Paris"}'), tool('{"forecast":[]}'))), true);
    assert.equal(evaluateCheck(ok, viewOf(call('get_forecast', '{"city":"Paris"}'))), false, 'no result in view yet');
    assert.equal(evaluateCheck(ok, viewOf(call('get_forecast', '{"city":"Paris"}'), tool('{"error":{"code":"not_found","message":"x"}}'))), false);
    assert.equal(evaluateCheck(ok, viewOf(call('get_forecast', '{"city":"Paris"}'), tool('{"error_tool_call":"tool name not found"}'))), false);
    assert.equal(evaluateCheck(ok, viewOf(call('get_forecast', '{"city":"Paris"}'), tool('{"error": boom}'))), false, 'invalid JSON error text');
    // Parallel calls pair with tool messages in call order.
    const parallel: Message = {
      role: 'assistant',
      content: '<think>\nboth\n</think>',
      tool_calls: [
        { type: 'function', function: { name: 'get_forecast', arguments: '{"city":"Rome"}' } },
        { type: 'function', function: { name: 'get_forecast', arguments: '{"city":"Paris"}' } },
      ],
    };
    assert.equal(evaluateCheck(ok, viewOf(parallel, tool('{"forecast":[]}'), tool('{"error":{"code":"x","message":"y"}}'))), false);
    assert.equal(evaluateCheck(ok, viewOf(parallel, tool('{"error":{"code":"x","message":"y"}}'), tool('{"forecast":[]}'))), true);
  });

  test('reply_states: case-insensitive, whitespace-normalised, on word boundaries; numbers stay whole', () => {
    const states = (value: string, text: string): boolean => evaluateCheck({ kind: 'reply_states', value }, viewOf(reply(text)));
    assert.equal(states('Sunny', 'It is SUNNY today.'), true);
    assert.equal(states('on time', 'The flight is on\n   time.'), true);
    assert.equal(states('rain', 'It is rainy.'), false);
    assert.equal(states('12.5', 'It costs 112.5 EUR.'), false);
    assert.equal(states('12.5', 'It costs 12.55 EUR.'), false);
    assert.equal(states('12', 'It costs 12.5 EUR.'), false);
    assert.equal(states('12.5', 'It costs 12.5.'), true);
    assert.equal(states('5', 'Gate 5, delayed.'), true);
    assert.equal(states('14:00', 'At 14:00.'), true);
    assert.equal(states('4:00', 'At 14:00.'), false);
    assert.equal(states('-24.36', 'taxi for -24.36 EUR'), true);
    assert.equal(states('ord-512', 'order ord-5123'), false);
  });

  test('reply_states reads the visible reply: thinking does not count; no complete think block = no reply (as the reference judge)', () => {
    const only = (content: string): JudgeView => viewOf({ role: 'assistant', content });
    assert.equal(evaluateCheck({ kind: 'reply_states', value: '21' }, only('<think>\nIt is 21 degrees.\n</think>\n\nIt is warm.')), false);
    assert.equal(evaluateCheck({ kind: 'reply_states', value: '21' }, only('<think>\nok\n</think>\n\nIt is 21 degrees.')), true);
    assert.equal(evaluateCheck({ kind: 'reply_states', value: '21' }, only('It is 21 degrees.')), false);
    assert.equal(evaluateCheck({ kind: 'reply_states', value: '21' }, only('I thought.</think>It is 21 degrees.')), false);
    // A broken call (its opening tag lost) is neither a reply nor a call: it passes no reply item.
    const broken = only('I will search.\n</think>\n{"name": {"origin":"Lyon"}}\n</tool_call>');
    assert.equal(evaluateCheck({ kind: 'no_tool_call' }, broken), false);
    assert.equal(evaluateCheck({ kind: 'reply_grounded' }, broken), false);
    assert.equal(evaluateCheck({ kind: 'reply_states', value: 'Lyon' }, broken), false);
    // An unclosed thought is all thinking.
    const unclosed = only('<think>\nget_weather with city,');
    assert.equal(evaluateCheck({ kind: 'no_tool_call' }, unclosed), false);
    assert.equal(evaluateCheck({ kind: 'reply_grounded' }, unclosed), false);
  });

  test('no_tool_call, reply_asks and reply_grounded', () => {
    assert.equal(evaluateCheck({ kind: 'no_tool_call' }, viewOf(reply('Which city?'))), true);
    assert.equal(evaluateCheck({ kind: 'no_tool_call' }, viewOf(call('get_weather', '{"city":"Paris"}'), tool('{}'), reply('It is 12.'))), false);
    assert.equal(evaluateCheck({ kind: 'no_tool_call' }, viewOf(call('get_weather', '{"city":"Paris"}'))), false, 'no reply yet');
    assert.equal(evaluateCheck({ kind: 'reply_asks' }, viewOf(reply('Which city would you like?'))), true);
    assert.equal(evaluateCheck({ kind: 'reply_asks' }, viewOf(reply('I will check Paris.'))), false);
    assert.equal(evaluateCheck({ kind: 'reply_asks' }, viewOf(reply('Done.', 'Which city? I will not ask.'))), false, 'a question in the thinking is not asked');

    const grounded: ItemCheck = { kind: 'reply_grounded' };
    assert.equal(evaluateCheck(grounded, viewOf(call('get_weather', '{"city":"Paris"}'), tool('{"temperature":21.5}'), reply('It is 21.5 degrees.'))), true);
    assert.equal(evaluateCheck(grounded, viewOf(call('get_weather', '{"city":"Paris"}'), tool('{"temperature":21.5}'), reply('It is 22 degrees.'))), false);
    assert.equal(evaluateCheck(grounded, viewOf(call('get_weather', '{"city":"Paris"}'), tool('{"temperature":21.5}'))), false, 'no reply yet');
    // Earlier turns' tool results and user messages ground later replies.
    const previous = [user('What is the balance of acc-101?'), call('get_balance', '{"account_id":"acc-101"}'), tool('{"balance":99.5}'), reply('It is 99.5 EUR.')];
    assert.equal(evaluateCheck(grounded, { previous, current: [user('Say it again.'), reply('acc-101 holds 99.5 EUR.')] }), true);
    assert.equal(evaluateCheck(grounded, { previous: [], current: [user('Say it again.'), reply('acc-101 holds 99.5 EUR.')] }), false);
  });
});

describe('judge views and turn satisfaction', () => {
  const messages: Message[] = [
    { role: 'system', content: 'You are helpful.' },
    user('Weather in Paris?'),
    call('get_weather', '{"city":"Paris"}'),
    tool('{"temperature":21}'),
    reply('It is 21 degrees in Paris.'),
    user('And Rome?'),
    call('get_weather', '{"city":"Rome"}'),
    tool('{"temperature":25}'),
    call('get_forecast', '{"city":"Rome","days":2}'),
    tool('{"forecast":[]}'),
    reply('It is 25 degrees in Rome.'),
  ];

  test('assistantSteps and judgeViewAt: previous = before the user message, current = through the step and its tool messages', () => {
    assert.deepEqual(assistantSteps(messages, 0), [1, 3]);
    assert.deepEqual(assistantSteps(messages, 1), [1, 3, 5]);
    assert.deepEqual(assistantSteps(messages, 2), []);
    const view = judgeViewAt(messages, 1, 1);
    assert.deepEqual(view.previous, messages.slice(0, 5));
    assert.deepEqual(view.current, messages.slice(5, 8));
    assert.equal(judgeViewAt(messages, 1, 5).current.length, 6);
    assert.throws(() => judgeViewAt(messages, 1, 0), RangeError);
    assert.throws(() => judgeViewAt(messages, 1, 2), RangeError);
    assert.throws(() => judgeViewAt(messages, 3, 1), RangeError);
  });

  test('the prefix view excludes later steps; a turn is satisfied at its first passing step', () => {
    const states: ItemCheck = { kind: 'reply_states', value: '25' };
    assert.equal(evaluateCheck(states, judgeViewAt(messages, 1, 1)), false);
    assert.equal(evaluateCheck(states, judgeViewAt(messages, 1, 5)), true);
    assert.deepEqual(itemSatisfiedInTurn(states, messages, 1), { satisfied: true, firstStep: 5 });
    const forecast: ItemCheck = { kind: 'tool_called', name: 'get_forecast', arguments: { city: 'rome' } };
    assert.equal(evaluateCheck(forecast, judgeViewAt(messages, 1, 1)), false);
    assert.deepEqual(itemSatisfiedInTurn(forecast, messages, 1), { satisfied: true, firstStep: 3 });
    // Another turn's calls and replies are not part of the current turn.
    assert.deepEqual(itemSatisfiedInTurn({ kind: 'tool_called', name: 'get_weather', arguments: { city: 'Paris' } }, messages, 1), { satisfied: false });
    assert.deepEqual(itemSatisfiedInTurn({ kind: 'reply_states', value: '21' }, messages, 1), { satisfied: false });
  });
});
