/*
 * Real-format inputs (issue 13, item 6): dialogues shaped like the reference's data (Nemotron rows: `tool_calls: []`
 * on every message, tool messages without `tool_call_id`, arguments as JSON strings, tool results that are error
 * objects) and like OpenAI-style exports (`content: null`, `tool_call_id` on some tool messages), and checklist
 * evidence quoted the way a real labeller quotes it: the reference shows the labeller `json.dumps(messages,
 * indent=4)`, so snippets arrive in that serialized, escaped form. Every example here is written by hand.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { LlmChecklistAnnotator, type Ask } from '../../../../src/stages/checklist/annotate';
import { evaluateCheck, itemSatisfiedInTurn, judgeViewAt } from '../../../../src/stages/checklist/check';
import { toStoredVariant, type ChecklistItem, type Evidence, type TurnBlock } from '../../../../src/stages/checklist/schema';
import { partTexts } from '../../../../src/stages/checklist/steps';
import { validateAnnotatedExample, validateChecklist, type Violation } from '../../../../src/stages/checklist/validate';
import { applyRuleFilters, RULE_FILTER_NAMES } from '../../../../src/stages/prepare/filters';
import { parseFileBytes, parseJsonlText } from '../../../../src/stages/prepare/import';
import { zeroUsage } from '../../../../src/kernel/roleContracts';
import type { Example } from '../../../../src/kernel/schema';
import { judgedStepHasToolCallError } from '../../../../src/stages/rl/judge/judge';
import { judgeAssistantFields, renderJudgeMessages } from '../../../../src/stages/rl/judge/judgeView';
import { snippetOccurs } from '../../../../src/stages/checklist/evidence';

// ---------------------------------------------------------------------------------------------------------------
// Inputs, written by hand.

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Forecast for a city and day.',
      parameters: { type: 'object', properties: { city: { type: 'string' }, date: { type: 'string' } }, required: ['city'] },
    },
  },
  {
    type: 'function',
    function: {
      name: 'book_table',
      description: 'Book a restaurant table.',
      parameters: {
        type: 'object',
        properties: { restaurant: { type: 'string' }, city: { type: 'string' }, time: { type: 'string' }, party_size: { type: 'integer' }, seating: { type: 'string' } },
        required: ['restaurant', 'time', 'party_size'],
      },
    },
  },
];

/**
 * A Nemotron-layout row as the reference stores it (messages with `tool_calls: []`, no `tool_call_id`, arguments
 * as JSON strings, ASCII-escaped text), the tools in a `metadata` JSON string. Two turns:
 * turn 0: 0 user, 1 get_weather(Zürich), 2 forecast, 3 book_table 19:00, 4 {"error": …}, 5 reply;
 * turn 1: 0 user, 1 book_table 19:30, 2 confirmation, 3 reply.
 */
const REFERENCE_MESSAGES = String.raw`[
    {
        "role": "user",
        "content": "Will it rain in Z\u00fcrich tomorrow evening? If it stays dry, book us a terrace table for two at Caf\u00e9 Ros\u00e9 at 19:00.",
        "tool_calls": []
    },
    {
        "role": "assistant",
        "content": "<think>\nThe user wants tomorrow evening's forecast for Z\u00fcrich first; I'll call get_weather.\n</think>",
        "tool_calls": [
            {
                "id": "call_w1",
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "arguments": "{\"city\": \"Z\u00fcrich\", \"date\": \"tomorrow\"}"
                }
            }
        ]
    },
    {
        "role": "tool",
        "content": "{\"city\": \"Z\u00fcrich\", \"date\": \"tomorrow\", \"evening\": {\"condition\": \"dry\", \"temp_c\": 17.5}}",
        "tool_calls": []
    },
    {
        "role": "assistant",
        "content": "<think>\nDry evening, so I'll book the terrace.\n</think>",
        "tool_calls": [
            {
                "id": "call_b1",
                "type": "function",
                "function": {
                    "name": "book_table",
                    "arguments": "{\"restaurant\": \"Caf\u00e9 Ros\u00e9\", \"city\": \"Z\u00fcrich\", \"time\": \"19:00\", \"party_size\": 2, \"seating\": \"terrace\"}"
                }
            }
        ]
    },
    {
        "role": "tool",
        "content": "{\"error\": \"Terrace fully booked at 19:00\", \"alternatives\": [\"19:30\", \"20:15\"]}",
        "tool_calls": []
    },
    {
        "role": "assistant",
        "content": "<think>\nThe booking failed; offer the alternatives.\n</think>\n\nGood news: tomorrow evening in Z\u00fcrich stays dry (17.5 \u00b0C).\nThe terrace at Caf\u00e9 Ros\u00e9 is fully booked at 19:00, but 19:30 or 20:15 are free.\nShall I book one of those?",
        "tool_calls": []
    },
    {
        "role": "user",
        "content": "19:30 works, please book it.",
        "tool_calls": []
    },
    {
        "role": "assistant",
        "content": "<think>\nBook 19:30.\n</think>",
        "tool_calls": [
            {
                "id": "call_b2",
                "type": "function",
                "function": {
                    "name": "book_table",
                    "arguments": "{\"restaurant\": \"Caf\u00e9 Ros\u00e9\", \"city\": \"Z\u00fcrich\", \"time\": \"19:30\", \"party_size\": 2, \"seating\": \"terrace\"}"
                }
            }
        ]
    },
    {
        "role": "tool",
        "content": "{\"confirmation\": \"CR-4821\", \"time\": \"19:30\", \"seating\": \"terrace\"}",
        "tool_calls": []
    },
    {
        "role": "assistant",
        "content": "<think>\nConfirmed.\n</think>\n\nDone! Your terrace table for two at Caf\u00e9 Ros\u00e9 is booked for 19:30 (confirmation CR-4821).",
        "tool_calls": []
    }
]`;

/** The reference row as one JSONL line (the parquet layout: `metadata` is a JSON string holding `tools`). */
const referenceLine = (): string =>
  JSON.stringify({ uuid: 'ref-zurich-1', messages: JSON.parse(REFERENCE_MESSAGES), metadata: JSON.stringify({ tools: TOOLS }), category: 'multi_turn' });

/**
 * An OpenAI-style export of a shorter dialogue: tool-call messages with `content: null`, the first call answered by
 * the reference environment's `error_tool_call` object without a `tool_call_id`, the second by a tool message with
 * one, the final reply with `tool_calls: []`. Indices: 0 user, 1 call (content null), 2 error_tool_call,
 * 3 call (content null), 4 result, 5 reply.
 */
const OPENAI_LINE = String.raw`{"id": "oa-7", "messages": [{"role": "user", "content": "Is it dry in Z\u00fcrich on 2025-06-01?"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"town\": \"Z\u00fcrich\"}"}}]}, {"role": "tool", "content": "{\"error_tool_call\": {\"code\": \"SCHEMA_VALIDATION_FAILED\", \"message\": \"Arguments do not match the schema\", \"details\": {\"errors\": [\"missing required parameter 'city'\"]}}}"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Z\u00fcrich\", \"date\": \"2025-06-01\"}"}}]}, {"role": "tool", "tool_call_id": "call_2", "content": "{\"city\": \"Z\u00fcrich\", \"condition\": \"dry\"}"}, {"role": "assistant", "content": "<think>\nDry.\n</think>\n\nYes, it will be dry in Z\u00fcrich.", "tool_calls": []}], "tools": TOOLS_JSON}`.replace(
  'TOOLS_JSON',
  JSON.stringify(TOOLS),
);

function importOne(line: string, file = 'real.jsonl'): Example {
  const { examples, errors } = parseJsonlText(line, file);
  assert.deepEqual(errors, []);
  assert.equal(examples.length, 1);
  return examples[0]!;
}

const referenceExample = (): Example => importOne(referenceLine());
const openAiExample = (): Example => importOne(OPENAI_LINE);

// ---------------------------------------------------------------------------------------------------------------
// Importers

describe('real-format inputs: importers', () => {
  test('a reference row is imported as it comes: tool_calls [] kept, no tool_call_id needed, \\u escapes decoded', () => {
    const ex = referenceExample();
    assert.equal(ex.uuid, 'ref-zurich-1');
    assert.equal(ex.messages.length, 10);
    assert.equal(ex.tools.length, 2);
    assert.equal(ex.meta?.['category'], 'multi_turn');
    const [u, a1, t1] = ex.messages;
    assert.deepEqual(u?.tool_calls, []);
    assert.match(u!.content, /Zürich .* Café Rosé/);
    assert.equal(a1?.tool_calls?.[0]?.function.arguments, '{"city": "Zürich", "date": "tomorrow"}');
    assert.equal(t1?.tool_call_id, undefined);
    assert.equal(ex.messages[4]?.content, '{"error": "Terrace fully booked at 19:00", "alternatives": ["19:30", "20:15"]}');
    assert.deepEqual(ex.messages[5]?.tool_calls, []);
  });

  test('the same messages as a .json array file (the reference intermediate format) import alike', async () => {
    const file = JSON.stringify([{ uuid: 'ref-zurich-1', messages: JSON.parse(REFERENCE_MESSAGES), tools: TOOLS }]);
    const { examples, errors } = await parseFileBytes('checklist_rl.json', new TextEncoder().encode(file));
    assert.deepEqual(errors, []);
    assert.deepEqual(examples[0]?.messages, referenceExample().messages);
  });

  test('an OpenAI-style row: content null becomes "", tool_call_id optional, tool_calls [] on the reply kept', () => {
    const ex = openAiExample();
    assert.equal(ex.messages.length, 6);
    assert.equal(ex.messages[1]?.content, '');
    assert.equal(ex.messages[3]?.content, '');
    assert.equal(ex.messages[2]?.tool_call_id, undefined);
    assert.equal(ex.messages[4]?.tool_call_id, 'call_2');
    assert.deepEqual(ex.messages[5]?.tool_calls, []);
    assert.match(ex.messages[2]!.content, /^\{"error_tool_call": \{"code": "SCHEMA_VALIDATION_FAILED"/);
  });

  test('really invalid input still fails with file, line and field', () => {
    const good = referenceLine();
    const noArguments = good.replace('"arguments":"{\\"city\\": \\"Zürich\\", \\"date\\": \\"tomorrow\\"}"', '"argumentz":"{}"');
    assert.notEqual(noArguments, good);
    const numericContent = OPENAI_LINE.replace('"content": "{\\"city\\": \\"Z\\u00fcrich\\", \\"condition\\": \\"dry\\"}"', '"content": 42');
    assert.notEqual(numericContent, OPENAI_LINE);
    const noRole = OPENAI_LINE.replace('{"role": "user", ', '{');
    const { examples, errors } = parseJsonlText([good, noArguments, numericContent, noRole, '{"messages": [}'].join('\n'), 'data/real.jsonl');
    assert.equal(examples.length, 1);
    assert.deepEqual(
      errors.map((e) => [e.file, e.line, e.kind, e.field]),
      [
        ['data/real.jsonl', 2, 'line', 'messages[1].tool_calls[0].function.arguments'],
        ['data/real.jsonl', 3, 'line', 'messages[4].content'],
        ['data/real.jsonl', 4, 'line', 'messages[0].role'],
        ['data/real.jsonl', 5, 'line', '$'],
      ],
    );
    for (const e of errors) assert.ok(e.message.length > 0);
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Rule filters

describe('real-format inputs: rule filters', () => {
  test('the reference row passes every default filter: a JSON error object is a real tool outcome', () => {
    const { kept, reasons } = applyRuleFilters(referenceExample());
    assert.deepEqual(reasons, []);
    assert.equal(kept, true);
  });

  test('every filter (opt-in ones too) runs on both rows without a crash reason', () => {
    for (const ex of [referenceExample(), openAiExample()]) {
      const { reasons } = applyRuleFilters(ex, RULE_FILTER_NAMES);
      for (const r of reasons) assert.doesNotMatch(r.detail, /could not evaluate/);
    }
  });

  test('content null (normalised to "") fails non_empty_content and think_tags as in the reference, naming the messages (the bad first call fails tool_schema)', () => {
    const { kept, reasons } = applyRuleFilters(openAiExample());
    assert.equal(kept, false);
    assert.deepEqual(
      reasons.map((r) => [r.code, r.messageIndex]),
      [
        ['tool_schema', 1],
        ['non_empty_content', 1],
        ['non_empty_content', 3],
        ['think_tags', 1],
        ['think_tags', 3],
      ],
    );
  });

  test('tool_calls [] on a final reply is no tool call (role order and call/response count stay valid)', () => {
    const ex = openAiExample();
    ex.messages[1]!.content = '<think>\nCheck the forecast.\n</think>';
    ex.messages[3]!.content = '<think>\nRetry with city.\n</think>';
    ex.messages[1]!.tool_calls![0]!.function.arguments = '{"city": "Zürich"}';
    assert.deepEqual(applyRuleFilters(ex).reasons, []);
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Checklist evidence

function item(id: string, focus_on: ChecklistItem['focus_on'], evidence: Evidence[]): ChecklistItem {
  return {
    id,
    evidence,
    focus_on,
    question: `Question ${id}?`,
    pass_condition: `Pass ${id}.`,
    failure_examples: [],
    required_for_next_turn: false,
  };
}

/** A turn block whose items share the weight equally and depend on nothing. */
function block(turn: number, items: ChecklistItem[]): TurnBlock {
  const weight = Object.fromEntries(items.map((it, k) => [it.id, k === 0 ? 1 - (items.length - 1) / items.length : 1 / items.length]));
  return { turn, checklist: items, dependence: Object.fromEntries(items.map((it) => [it.id, []])), weight };
}

const ev = (turn: number, step: number, from: Evidence['from'], snippet: string): Evidence => ({ turn, step, from, snippet });

/** A one-item checklist for the reference dialogue holding one evidence pointer in turn `turn` (the other turn trivially valid). */
function oneEvidence(e: Evidence, focus: ChecklistItem['focus_on'] = 'assistant.tool_calls', turn = e.turn): TurnBlock[] {
  const filler = (t: number): TurnBlock => block(t, [item('C0', 'assistant.content.user_visible_reply', [])]);
  const mine = block(turn, [item('C0', focus, [e])]);
  return [turn === 0 ? mine : filler(0), turn === 1 ? mine : filler(1)];
}

const errorsOf = (violations: readonly Violation[]): Violation[] => violations.filter((v) => v.severity === 'error');

/** Snippets as a labeller shown `json.dumps(messages, indent=4)` (ASCII-escaped or not), or the raw text, quotes them. */
const ACCEPTED: [string, Evidence][] = [
  // Tool calls in the serialized form, as the reference's own example annotation quotes them.
  ['call, json.dumps form (ensure_ascii)', ev(0, 1, 'assistant.tool_calls', String.raw`"name": "get_weather", "arguments": "{\"city\": \"Z\u00fcrich\", \"date\": \"tomorrow\"}"`)],
  ['call, json.dumps form (non-ASCII kept)', ev(0, 1, 'assistant.tool_calls', String.raw`"name": "get_weather", "arguments": "{\"city\": \"Zürich\", \"date\": \"tomorrow\"}"`)],
  [
    'call, copied across lines with the indentation',
    ev(
      0,
      3,
      'assistant.tool_calls',
      String.raw`"function": {
                    "name": "book_table",
                    "arguments": "{\"restaurant\": \"Caf\u00e9 Ros\u00e9\", \"city\": \"Z\u00fcrich\", \"time\": \"19:00\", \"party_size\": 2, \"seating\": \"terrace\"}"
                }`,
    ),
  ],
  ['call, whole object on one line', ev(0, 1, 'assistant.tool_calls', String.raw`{"id": "call_w1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Z\u00fcrich\", \"date\": \"tomorrow\"}"}}`)],
  ['call, the compact JSON our prompt shows', ev(0, 1, 'assistant.tool_calls', String.raw`{"name":"get_weather","arguments":"{\"city\": \"Zürich\", \"date\": \"tomorrow\"}"}`)],
  ['call, only the escaped arguments', ev(0, 3, 'assistant.tool_calls', String.raw`\"time\": \"19:00\", \"party_size\": 2`)],
  ['call, raw arguments', ev(0, 1, 'assistant.tool_calls', '{"city": "Zürich", "date": "tomorrow"}')],
  ['call, arguments pretty-printed (indent 4, ASCII-escaped)', ev(0, 3, 'assistant.tool_calls', '{\n    "restaurant": "Caf\\u00e9 Ros\\u00e9",\n    "city": "Z\\u00fcrich",\n    "time": "19:00"')],
  ['call, arguments pretty-printed (non-ASCII kept)', ev(0, 3, 'assistant.tool_calls', '"restaurant": "Café Rosé",\n    "city": "Zürich"')],
  ['call, name(arguments)', ev(1, 1, 'assistant.tool_calls', 'book_table({"restaurant": "Café Rosé", "city": "Zürich", "time": "19:30"')],
  // Tool contents.
  ['error result, raw (as the reference example quotes it)', ev(0, 4, 'tool.content', '{"error": "Terrace fully booked at 19:00", "alternatives": ["19:30", "20:15"]}')],
  ['error result, escaped', ev(0, 4, 'tool.content', String.raw`{\"error\": \"Terrace fully booked at 19:00\", \"alternatives\": [\"19:30\", \"20:15\"]}`)],
  ['result, escaped with the "content" key', ev(0, 2, 'tool.content', String.raw`"content": "{\"city\": \"Z\u00fcrich\", \"date\": \"tomorrow\"`)],
  ['result, escaped non-ASCII', ev(0, 2, 'tool.content', String.raw`\"city\": \"Z\u00fcrich\"`)],
  ['result, pretty-printed nested object', ev(0, 2, 'tool.content', '"evening": {\n        "condition": "dry",\n        "temp_c": 17.5\n    }')],
  ['result, pretty-printed without the inner spaces', ev(0, 2, 'tool.content', '"evening": {"condition": "dry", "temp_c": 17.5}')],
  ['result, compact JSON', ev(1, 2, 'tool.content', '{"confirmation":"CR-4821","time":"19:30"')],
  // Replies and thinking.
  ['reply, raw across a line break', ev(0, 5, 'assistant.content.user_visible_reply', 'stays dry (17.5 °C). The terrace at Café Rosé is fully booked')],
  ['reply, escaped (\\n and \\u00b0)', ev(0, 5, 'assistant.content.user_visible_reply', String.raw`stays dry (17.5 \u00b0C).\nThe terrace at Caf\u00e9 Ros\u00e9 is fully booked`)],
  ['reply, escaped with non-ASCII kept', ev(0, 5, 'assistant.content.user_visible_reply', String.raw`free.\nShall I book one of those?`)],
  ['reply, elided', ev(1, 3, 'assistant.content.user_visible_reply', 'Done! ... booked for 19:30 (confirmation CR-4821).')],
  ['thinking, escaped', ev(0, 1, 'assistant.content.thinking', String.raw`forecast for Z\u00fcrich first; I'll call get_weather.`)],
];

/** Snippets that must be rejected, with the violation code and the field it is reported on. */
const REJECTED: [string, Evidence, string, string][] = [
  ['a call that occurs nowhere', ev(0, 1, 'assistant.tool_calls', String.raw`"name": "get_weather", "arguments": "{\"city\": \"Bern\"}"`), 'evidence_snippet', 'snippet'],
  ['a wrong value in the serialized call', ev(0, 3, 'assistant.tool_calls', String.raw`"arguments": "{\"restaurant\": \"Caf\u00e9 Ros\u00e9\", \"city\": \"Z\u00fcrich\", \"time\": \"20:00\"`), 'evidence_snippet', 'snippet'],
  ['the other step\'s call', ev(0, 1, 'assistant.tool_calls', String.raw`"name": "book_table", "arguments": "{\"restaurant\": \"Caf\u00e9 Ros\u00e9\"`), 'evidence_snippet', 'snippet'],
  ['a call of the other turn', ev(0, 3, 'assistant.tool_calls', String.raw`\"time\": \"19:30\"`), 'evidence_snippet', 'snippet'],
  ['the reply quoted as thinking', ev(0, 5, 'assistant.content.thinking', 'Shall I book one of those?'), 'evidence_snippet', 'snippet'],
  ['the thinking quoted as the reply', ev(0, 5, 'assistant.content.user_visible_reply', 'The booking failed; offer the alternatives.'), 'evidence_snippet', 'snippet'],
  ['a call quoted from a message with tool_calls []', ev(0, 5, 'assistant.tool_calls', '"name": "book_table"'), 'evidence_snippet', 'snippet'],
  ['a result quoted from the other tool step', ev(0, 2, 'tool.content', String.raw`{\"error\": \"Terrace fully booked at 19:00\"`), 'evidence_snippet', 'snippet'],
  ['a tool result named as a call', ev(0, 4, 'assistant.tool_calls', '"error": "Terrace fully booked at 19:00"'), 'evidence_from', 'from'],
  ['the user message', ev(0, 0, 'user.content', String.raw`Z\u00fcrich`), 'evidence_user_step', 'step'],
  ['a snippet across two parts (thinking into reply)', ev(0, 5, 'assistant.content.user_visible_reply', String.raw`alternatives.\n</think>\n\nGood news`), 'evidence_snippet', 'snippet'],
];

describe('real-format inputs: checklist evidence', () => {
  const example = referenceExample();

  for (const [name, e] of ACCEPTED) {
    test(`accepted: ${name}`, () => {
      const focus = e.from === 'assistant.content.thinking' || e.from === 'user.content' ? 'assistant.content.user_visible_reply' : e.from;
      const result = validateChecklist(oneEvidence(e, focus), example);
      assert.deepEqual(errorsOf(result.violations), []);
      assert.equal(result.ok, true);
    });
  }

  for (const [name, e, code, field] of REJECTED) {
    test(`rejected: ${name} (${code})`, () => {
      const result = validateChecklist(oneEvidence(e, 'assistant.tool_calls'), example);
      assert.equal(result.ok, false);
      assert.deepEqual(
        errorsOf(result.violations).map((v) => [v.code, v.turn, v.item, v.field]),
        [[code, e.turn, 'C0', `evidence[0].${field}`]],
      );
    });
  }

  test('evidence pointing into another turn is evidence_turn', () => {
    const blocks = oneEvidence(ev(0, 4, 'tool.content', '"error": "Terrace fully booked at 19:00"'), 'tool.content', 1);
    assert.deepEqual(errorsOf(validateChecklist(blocks, example).violations).map((v) => v.code), ['evidence_turn']);
  });

  test('a rejected serialized snippet points the repair at the step where it does occur', () => {
    const e = ev(0, 1, 'assistant.tool_calls', String.raw`"name": "book_table", "arguments": "{\"restaurant\": \"Caf\u00e9 Ros\u00e9\"`);
    const [v] = errorsOf(validateChecklist(oneEvidence(e), example).violations);
    assert.match(v?.message ?? '', /turn 0 step 3 \(assistant\.tool_calls\)/);
  });

  test('a tool-call snippet against a message without calls says so', () => {
    const [v] = errorsOf(validateChecklist(oneEvidence(ev(0, 5, 'assistant.tool_calls', 'get_weather')), example).violations);
    assert.match(v?.message ?? '', /that message makes no tool calls/);
  });

  test('partTexts offers the json.dumps(indent=4) rendering of a call', () => {
    const texts = partTexts(example.messages[1]!, 'assistant.tool_calls');
    const dumped = String.raw`{
    "id": "call_w1",
    "type": "function",
    "function": {
        "name": "get_weather",
        "arguments": "{\"city\": \"Z\u00fcrich\", \"date\": \"tomorrow\"}"
    }
}`;
    assert.ok(texts.includes(dumped), texts.join('\n---\n'));
  });

  test('snippetOccurs: mixed escape levels, ensure_ascii escapes, whitespace; unrelated text still fails', () => {
    const args = '{"city": "Zürich", "date": "tomorrow"}';
    assert.equal(snippetOccurs(args, String.raw`{"city": "Z\u00fcrich"`), true);
    assert.equal(snippetOccurs('line one\nline two', String.raw`line one\nline two`), true);
    assert.equal(snippetOccurs('{"a": {"b": 1}}', '{"a": {\n    "b": 1\n}}'), true);
    assert.equal(snippetOccurs(args, String.raw`{"city": "Z\u00fcrich", "date": "today"`), false);
    assert.equal(snippetOccurs(args, 'Bern'), false);
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Annotation: a labeller answering in the reference form (a bare array) with serialized snippets

/** A whole labeller answer for the reference dialogue, as a real annotator would write it (bare array, reference form). */
const LABELLER_ANSWER = String.raw`[
  {"turn": 0,
   "checklist": [
     {"id": "C0", "evidence": [{"turn": 0, "step": 1, "from": "assistant.tool_calls", "snippet": "\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Z\\u00fcrich\\\", \\\"date\\\": \\\"tomorrow\\\"}\""}],
      "focus_on": "assistant.tool_calls", "question": "Does the assistant request the forecast for Zürich for tomorrow?",
      "pass_condition": "A get_weather call has city Zürich (case-insensitive) and date tomorrow.", "failure_examples": ["Calls get_weather for Zurich airport."], "required_for_next_turn": true},
     {"id": "C1", "evidence": [{"turn": 0, "step": 4, "from": "tool.content", "snippet": "{\"error\": \"Terrace fully booked at 19:00\", \"alternatives\": [\"19:30\", \"20:15\"]}"}],
      "focus_on": "tool.content", "question": "Does a tool response report whether the 19:00 terrace booking is possible?",
      "pass_condition": "A book_table response states the terrace at 19:00 is unavailable and lists alternatives.", "failure_examples": [], "required_for_next_turn": true},
     {"id": "C2", "evidence": [{"turn": 0, "step": 5, "from": "assistant.content.user_visible_reply", "snippet": "The terrace at Caf\\u00e9 Ros\\u00e9 is fully booked at 19:00, but 19:30 or 20:15 are free.\\nShall I book one of those?"}],
      "focus_on": "assistant.content.user_visible_reply", "question": "Does the reply offer 19:30 and 20:15 as alternatives?",
      "pass_condition": "Both times are offered.", "failure_examples": ["Claims the 19:00 table is booked."], "required_for_next_turn": true}
   ],
   "dependence": {"C0": [], "C1": [], "C2": ["C1"]},
   "weight": {"C0": 0.3, "C1": 0.3, "C2": 0.4}},
  {"turn": 1,
   "checklist": [
     {"id": "C0", "evidence": [{"turn": 1, "step": 1, "from": "assistant.tool_calls", "snippet": "\"arguments\": \"{\\\"restaurant\\\": \\\"Caf\\u00e9 Ros\\u00e9\\\", \\\"city\\\": \\\"Z\\u00fcrich\\\", \\\"time\\\": \\\"19:30\\\", \\\"party_size\\\": 2"}],
      "focus_on": "assistant.tool_calls", "question": "Does the assistant book Café Rosé for two at 19:30?",
      "pass_condition": "A book_table call has restaurant Café Rosé, time 19:30 and party_size 2.", "failure_examples": [], "required_for_next_turn": true},
     {"id": "C1", "evidence": [{"turn": 1, "step": 3, "from": "assistant.content.user_visible_reply", "snippet": "booked for 19:30 (confirmation CR-4821)"}],
      "focus_on": "assistant.content.user_visible_reply", "question": "Does the reply give the confirmation code?",
      "pass_condition": "The reply states CR-4821.", "failure_examples": [], "required_for_next_turn": false}
   ],
   "dependence": {"C0": [], "C1": []},
   "weight": {"C0": 0.6, "C1": 0.4}}
]`;

describe('real-format inputs: annotation', () => {
  test('a labeller answer quoting the serialized dialogue is accepted at the first attempt and stored', async () => {
    const example = referenceExample();
    const asked: number[] = [];
    const ask: Ask = async (messages) => {
      asked.push(messages.length);
      return { text: LABELLER_ANSWER, usage: zeroUsage() };
    };
    const result = await new LlmChecklistAnnotator('labeller', ask).annotate(example, { variants: 1, maxAttempts: 3 });
    assert.equal(result.ok, true, result.ok ? '' : `${result.reason}`);
    assert.deepEqual(asked, [2]);
    if (!result.ok) return;
    assert.deepEqual(result.warnings, []);
    assert.deepEqual(validateAnnotatedExample(result.annotated).violations, []);
  });

  test('the same answer with one snippet from another step is sent back for repair with evidence_snippet', () => {
    const answer = JSON.parse(LABELLER_ANSWER) as TurnBlock[];
    answer[1]!.checklist[0]!.evidence[0]!.snippet = String.raw`\"time\": \"19:00\"`;
    const errors = errorsOf(validateChecklist(answer, referenceExample()).violations);
    assert.deepEqual(
      errors.map((v) => [v.code, v.turn, v.item, v.field]),
      [['evidence_snippet', 1, 'C0', 'evidence[0].snippet']],
    );
  });

  test('a stored checklist on the OpenAI-style row (content null, error_tool_call, missing tool_call_id) validates', () => {
    const example = openAiExample();
    const blocks: TurnBlock[] = [
      block(0, [
        item('C0', 'assistant.tool_calls', [ev(0, 3, 'assistant.tool_calls', String.raw`"arguments": "{\"city\": \"Z\u00fcrich\", \"date\": \"2025-06-01\"}"`)]),
        item('C1', 'tool.content', [ev(0, 4, 'tool.content', String.raw`{\"city\": \"Z\u00fcrich\", \"condition\": \"dry\"}`)]),
        item('C2', 'assistant.content.user_visible_reply', [ev(0, 5, 'assistant.content.user_visible_reply', 'it will be dry in Zürich')]),
      ]),
    ];
    assert.deepEqual(errorsOf(validateChecklist(blocks, example).violations), []);
    const stored = { ...example, checklists: [toStoredVariant(blocks, 0)] };
    assert.equal(validateAnnotatedExample(stored).ok, true);
    // Evidence into the error_tool_call answer or the content-null call message's thinking.
    const bad: TurnBlock[] = [block(0, [item('C0', 'assistant.tool_calls', [ev(0, 1, 'assistant.content.thinking', 'get_weather')])])];
    assert.deepEqual(errorsOf(validateChecklist(bad, example).violations).map((v) => v.code), ['evidence_snippet']);
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Offline checks and the judge's view

describe('real-format inputs: offline checks and judge view', () => {
  test('reference row: a call answered by {"error": …} was made but did not succeed; positional pairing without ids', () => {
    const ex = referenceExample();
    const at1900 = { restaurant: 'Café Rosé', time: '19:00' };
    assert.deepEqual(itemSatisfiedInTurn({ kind: 'tool_called', name: 'book_table', arguments: at1900 }, ex.messages, 0), { satisfied: true, firstStep: 3 });
    assert.deepEqual(itemSatisfiedInTurn({ kind: 'tool_succeeded', name: 'book_table', arguments: at1900 }, ex.messages, 0), { satisfied: false });
    assert.deepEqual(itemSatisfiedInTurn({ kind: 'tool_succeeded', name: 'get_weather', arguments: { city: 'zürich' } }, ex.messages, 0), { satisfied: true, firstStep: 1 });
    assert.deepEqual(itemSatisfiedInTurn({ kind: 'tool_succeeded', name: 'book_table', arguments: { time: '19:30', party_size: 2 } }, ex.messages, 1), { satisfied: true, firstStep: 1 });
    assert.deepEqual(itemSatisfiedInTurn({ kind: 'reply_states', value: '17.5 °C' }, ex.messages, 0), { satisfied: true, firstStep: 5 });
  });

  test('OpenAI row: an error_tool_call answer invalidates the call; content null has no reply; tool_call_id on one message only', () => {
    const ex = openAiExample();
    const view1 = judgeViewAt(ex.messages, 0, 1);
    assert.equal(evaluateCheck({ kind: 'tool_called', name: 'get_weather', arguments: {} }, view1), false);
    assert.equal(evaluateCheck({ kind: 'reply_asks' }, view1), false);
    const view3 = judgeViewAt(ex.messages, 0, 3);
    assert.equal(evaluateCheck({ kind: 'tool_succeeded', name: 'get_weather', arguments: { city: 'Zürich', date: '2025-06-01' } }, view3), true);
    assert.equal(evaluateCheck({ kind: 'reply_states', value: 'dry' }, judgeViewAt(ex.messages, 0, 5)), true);
  });

  test('the judge shortcut fires on error_tool_call, not on a domain {"error": …}', () => {
    const oa = openAiExample();
    assert.equal(judgedStepHasToolCallError(judgeViewAt(oa.messages, 0, 1)), true);
    assert.equal(judgedStepHasToolCallError(judgeViewAt(oa.messages, 0, 3)), false);
    const ref = referenceExample();
    assert.equal(judgedStepHasToolCallError(judgeViewAt(ref.messages, 0, 3)), false);
  });

  test('judge rendering of content "" and tool_calls [] follows the reference (thinking "", reply None, tool_call [])', () => {
    const oa = openAiExample();
    assert.deepEqual(judgeAssistantFields(oa.messages[1]!), {
      thinking: '',
      reply: 'None',
      toolCall: String.raw`[{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"town": "Z\u00fcrich"}}}]`,
    });
    assert.deepEqual(judgeAssistantFields(oa.messages[5]!), { thinking: '\nDry.\n', reply: 'Yes, it will be dry in Zürich.', toolCall: '[]' });
    const text = renderJudgeMessages(judgeViewAt(oa.messages, 0, 1).current);
    assert.equal(
      text,
      '# Turn: 0\nRole: user\ncontent: Is it dry in Zürich on 2025-06-01?\n' +
        '## Step: 0\nRole: assistant\ncontent.thinking: \ncontent.user_visible_reply: None\n' +
        String.raw`tool_call: [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"town": "Z\u00fcrich"}}}]` +
        '\nRole: tool\ncontent: {"error_tool_call": {"code": "SCHEMA_VALIDATION_FAILED", "message": "Arguments do not match the schema", "details": {"errors": ["missing required parameter \'city\'"]}}}\n',
    );
  });
});
