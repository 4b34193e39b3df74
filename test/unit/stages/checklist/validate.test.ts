import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { renderChecklist, renderViolations, wrapText } from '../../../../src/stages/checklist/showChecklist';
import { toStoredVariant, type AnnotatedExample, type ChecklistItem, type ChecklistOutput } from '../../../../src/stages/checklist/schema';
import { formatViolation, validateAnnotatedExample, validateChecklist, violationsForRepair, type Violation } from '../../../../src/stages/checklist/validate';
import { goodExample } from '../../../fixtures/dialogues';
import { snippetOccurs } from '../../../../src/stages/checklist/evidence';

/*
 * goodExample(): turn 0 = steps 0 user, 1 assistant (get_weather Paris), 2 tool {"temperature": 18},
 * 3 assistant (get_time Paris + Rome), 4 tool, 5 tool, 6 assistant reply; turn 1 = 0 user, 1 assistant reply.
 */
const example = goodExample();

function item(id: string, fields: Partial<ChecklistItem>): ChecklistItem {
  return {
    id,
    evidence: [],
    focus_on: 'assistant.content.user_visible_reply',
    question: `Question ${id}?`,
    pass_condition: `Pass ${id}.`,
    failure_examples: [],
    required_for_next_turn: false,
    ...fields,
  };
}

/** A valid checklist for goodExample(). */
function validChecklist(): ChecklistOutput {
  return [
    {
      turn: 0,
      checklist: [
        item('C0', {
          focus_on: 'assistant.tool_calls',
          question: 'Does the assistant call get_weather for Paris?',
          pass_condition: 'A get_weather call has city equal to "Paris" (case-insensitive).',
          failure_examples: ['Calls get_weather for Rome only.'],
          required_for_next_turn: true,
          evidence: [{ turn: 0, step: 1, from: 'assistant.tool_calls', snippet: '{"city":"Paris"}' }],
          check: { kind: 'tool_called', name: 'get_weather', arguments: { city: 'Paris' } },
        }),
        item('C1', {
          focus_on: 'tool.content',
          question: 'Does a tool response give the Paris temperature?',
          evidence: [{ turn: 0, step: 2, from: 'tool.content', snippet: '"temperature": 18' }],
        }),
        item('C2', {
          focus_on: 'assistant.tool_calls',
          question: 'Does the assistant request the local time of both cities?',
          evidence: [
            { turn: 0, step: 3, from: 'assistant.tool_calls', snippet: 'get_time' },
            { turn: 0, step: 3, from: 'assistant.content.thinking', snippet: 'Now both times, in parallel.' },
          ],
        }),
        item('C3', {
          question: 'Does the reply state the temperature and both times?',
          evidence: [{ turn: 0, step: 6, from: 'assistant.content.user_visible_reply', snippet: 'Paris: 18 °C; it is 14:00 in both cities.' }],
        }),
      ],
      dependence: { C0: [], C1: [], C2: [], C3: ['C1'] },
      weight: { C0: 0.3, C1: 0.2, C2: 0.2, C3: 0.3 },
    },
    {
      turn: 1,
      checklist: [item('C0', { evidence: [{ turn: 1, step: 1, from: 'assistant.content.user_visible_reply', snippet: 'You are welcome.' }] })],
      dependence: { C0: [] },
      weight: { C0: 1 },
    },
  ];
}

/** A fresh valid checklist changed by `edit`. */
function edited(edit: (c: ChecklistOutput) => void): ChecklistOutput {
  const c = validChecklist();
  edit(c);
  return c;
}

/** Block `t`, item `k` of a checklist (fails the test when absent). */
function itemOf(c: ChecklistOutput, t: number, k: number): ChecklistItem {
  const found = c[t]?.checklist[k];
  assert.ok(found, `no item ${k} in turn ${t}`);
  return found;
}

function blockOf(c: ChecklistOutput, t: number): ChecklistOutput[number] {
  const found = c[t];
  assert.ok(found, `no block ${t}`);
  return found;
}

/** Assert a violation with exactly these path fields exists; returns it. */
function expectViolation(violations: readonly Violation[], want: Partial<Violation> & { code: string }): Violation {
  const hit = violations.find((v) => v.code === want.code && (Object.keys(want) as (keyof Violation)[]).every((k) => v[k] === want[k]));
  assert.ok(hit, `expected ${JSON.stringify(want)} in:\n${violations.map(formatViolation).join('\n')}`);
  return hit;
}

/** Validate; assert not ok, and that `want` is among the violations. */
function expectError(raw: unknown, want: Partial<Violation> & { code: string }): Violation {
  const r = validateChecklist(raw, example);
  assert.equal(r.ok, false, 'expected the checklist to be invalid');
  return expectViolation(r.violations, { severity: 'error', ...want });
}

const codes = (violations: readonly Violation[]): string[] => [...new Set(violations.map((v) => v.code))].sort();

describe('validateChecklist: a valid checklist', () => {
  test('passes with zero violations and returns the parsed value', () => {
    const r = validateChecklist(validChecklist(), example);
    assert.deepEqual(r.violations, []);
    assert.equal(r.ok, true);
    assert.deepEqual(r.value, validChecklist());
  });

  test('unknown keys are stripped from the value', () => {
    const raw = edited((c) => Object.assign(blockOf(c, 0), { note: 'extra' }));
    const r = validateChecklist(raw, example);
    assert.equal(r.ok, true);
    assert.equal('note' in (r.value?.[0] ?? {}), false);
  });
});

describe('validateChecklist: structure', () => {
  test('a bad focus_on names the item and lists the allowed values', () => {
    const raw = edited((c) => Object.assign(itemOf(c, 0, 1), { focus_on: 'assistant.final_reply' }));
    const v = expectError(raw, { code: 'structure', turn: 0, item: 'C1', field: 'focus_on' });
    for (const allowed of ['assistant.tool_calls', 'assistant.content.thinking', 'assistant.content.user_visible_reply', 'tool.content']) {
      assert.match(v.message, new RegExp(allowed.replace(/\./g, '\\.')));
    }
    assert.equal(validateChecklist(raw, example).value, undefined);
  });

  test('a bad evidence from lists the allowed values', () => {
    const raw = edited((c) => Object.assign(itemOf(c, 0, 3).evidence[0]!, { from: 'assistant.final_reply' }));
    const v = expectError(raw, { code: 'structure', turn: 0, item: 'C3', field: 'evidence[0].from' });
    assert.match(v.message, /user\.content/);
    assert.match(v.message, /assistant\.final_reply/);
  });

  test('missing fields, negative steps and id-less items are located', () => {
    const raw = edited((c) => {
      delete (itemOf(c, 1, 0) as Partial<ChecklistItem>).question;
      Object.assign(itemOf(c, 0, 2).evidence[1]!, { step: -1 });
      Object.assign(itemOf(c, 0, 0), { id: 7 });
    });
    expectError(raw, { code: 'structure', turn: 1, item: 'C0', field: 'question' });
    expectError(raw, { code: 'structure', turn: 0, item: 'C2', field: 'evidence[1].step' });
    expectError(raw, { code: 'structure', turn: 0, field: 'checklist[0].id' });
    const missing = expectError(raw, { code: 'structure', turn: 1, item: 'C0', field: 'question' });
    assert.match(missing.message, /missing/);
  });

  test('a bad block turn is located by position; other blocks are still checked', () => {
    const raw = edited((c) => {
      Object.assign(blockOf(c, 1), { turn: 'one' });
      blockOf(c, 0).weight.C3 = 0.25;
    });
    expectError(raw, { code: 'structure', turn: 1, field: 'turn' });
    expectError(raw, { code: 'weight_sum', turn: 0, field: 'weight' });
  });

  test('garbage never throws and gives errors', () => {
    const garbage: unknown[] = [null, undefined, 42, 'x', {}, { turns: [] }, [{}], [null], [[]], [{ turn: 0, checklist: [null], dependence: null, weight: 'x' }], [{ turn: 0, checklist: [{ evidence: 'x' }], dependence: [], weight: [] }]];
    for (const raw of garbage) {
      const r = validateChecklist(raw, example);
      assert.equal(r.ok, false, `ok for ${JSON.stringify(raw)}`);
      assert.ok(r.violations.some((v) => v.severity === 'error' && v.code === 'structure'), `no structure error for ${JSON.stringify(raw)}`);
      assert.equal(r.value, undefined);
      for (const v of r.violations) assert.equal(typeof formatViolation(v), 'string');
    }
    assert.equal(validateChecklist(null, example).violations.length, 1);
  });

  test('a malformed dialogue does not throw either', () => {
    for (const messages of [[null], [{ role: 'user' }], 'x', [{ role: 'assistant', content: 'a', tool_calls: [null] }]]) {
      const r = validateChecklist(validChecklist(), { messages } as unknown as Parameters<typeof validateChecklist>[1]);
      assert.equal(r.ok, false);
    }
  });
});

describe('validateChecklist: blocks and turns', () => {
  test('block_count: one block per user message', () => {
    const v = expectError(validChecklist().slice(0, 1), { code: 'block_count' });
    assert.match(v.message, /expected 2 .* got 1/);
  });

  test('turn_order: blocks out of order', () => {
    const raw = validChecklist().reverse();
    expectError(raw, { code: 'turn_order', turn: 1, field: 'turn' });
    expectError(raw, { code: 'turn_order', turn: 0, field: 'turn' });
  });

  test('turn_order: duplicate and missing turns', () => {
    const raw = edited((c) => Object.assign(blockOf(c, 1), { turn: 0 }));
    const dup = expectError(raw, { code: 'turn_order', turn: 0, field: 'turn' });
    assert.ok(dup);
    const r = validateChecklist(raw, example);
    assert.ok(r.violations.some((v) => v.code === 'turn_order' && /2 blocks have turn 0/.test(v.message)));
    assert.ok(r.violations.some((v) => v.code === 'turn_order' && v.turn === 1 && /no block for turn 1/.test(v.message)));
  });

  test('duplicate_id: ids unique within a turn (but may repeat across turns)', () => {
    const raw = edited((c) => Object.assign(itemOf(c, 0, 2), { id: 'C1' }));
    expectError(raw, { code: 'duplicate_id', turn: 0, item: 'C1', field: 'id' });
    // C0 in both turns is fine (the valid checklist has it).
    assert.equal(validateChecklist(validChecklist(), example).ok, true);
  });

  test('duplicate_id: blank ids', () => {
    const raw = edited((c) => Object.assign(itemOf(c, 0, 2), { id: '  ' }));
    expectError(raw, { code: 'duplicate_id', turn: 0, field: 'checklist[2].id' });
  });

  test('empty_turn: a turn has at least one item', () => {
    const raw = edited((c) => Object.assign(blockOf(c, 1), { checklist: [], dependence: {}, weight: {} }));
    expectError(raw, { code: 'empty_turn', turn: 1, field: 'checklist' });
    assert.deepEqual(codes(validateChecklist(raw, example).violations), ['empty_turn']);
  });
});

describe('validateChecklist: dependence', () => {
  test('dependence_keys: a missing key and an unknown key', () => {
    const raw = edited((c) => {
      const dep = blockOf(c, 0).dependence;
      delete dep.C2;
      dep.C9 = [];
    });
    expectError(raw, { code: 'dependence_keys', turn: 0, item: 'C2', field: 'dependence.C2' });
    const unknown = expectError(raw, { code: 'dependence_keys', turn: 0, field: 'dependence.C9' });
    assert.equal(unknown.item, undefined);
  });

  test('unknown_dependency', () => {
    const raw = edited((c) => (blockOf(c, 0).dependence.C3 = ['C1', 'C7']));
    const v = expectError(raw, { code: 'unknown_dependency', turn: 0, item: 'C3', field: 'dependence.C3' });
    assert.match(v.message, /C7/);
  });

  test('dependency_not_tool_content', () => {
    const raw = edited((c) => (blockOf(c, 0).dependence.C3 = ['C0']));
    const v = expectError(raw, { code: 'dependency_not_tool_content', turn: 0, item: 'C3', field: 'dependence.C3' });
    assert.match(v.message, /assistant\.tool_calls/);
  });

  test('self_dependency', () => {
    const raw = edited((c) => (blockOf(c, 0).dependence.C1 = ['C1']));
    expectError(raw, { code: 'self_dependency', turn: 0, item: 'C1', field: 'dependence.C1' });
  });

  test('dependency_cycle', () => {
    const raw = edited((c) => {
      Object.assign(itemOf(c, 0, 2), { focus_on: 'tool.content', evidence: [{ turn: 0, step: 4, from: 'tool.content', snippet: '14:00' }] });
      blockOf(c, 0).dependence.C1 = ['C2'];
      blockOf(c, 0).dependence.C2 = ['C1'];
    });
    const r = validateChecklist(raw, example);
    assert.deepEqual(codes(r.violations), ['dependency_cycle']);
    assert.equal(r.violations.length, 1);
    const v = expectError(raw, { code: 'dependency_cycle', turn: 0 });
    assert.match(v.message, /C1 → C2 → C1|C2 → C1 → C2/);
  });
});

describe('validateChecklist: weight', () => {
  test('weight_keys: a missing and an unknown key', () => {
    const raw = edited((c) => {
      const w = blockOf(c, 0).weight;
      w.C9 = w.C3!;
      delete w.C3;
    });
    expectError(raw, { code: 'weight_keys', turn: 0, item: 'C3', field: 'weight.C3' });
    expectError(raw, { code: 'weight_keys', turn: 0, field: 'weight.C9' });
  });

  test('weight_range: each weight in [0, 1]', () => {
    const raw = edited((c) => (blockOf(c, 0).weight = { C0: 1.1, C1: -0.1, C2: 0, C3: 0 }));
    expectError(raw, { code: 'weight_range', turn: 0, item: 'C0', field: 'weight.C0' });
    expectError(raw, { code: 'weight_range', turn: 0, item: 'C1', field: 'weight.C1' });
    assert.deepEqual(codes(validateChecklist(raw, example).violations), ['weight_range']);
  });

  test('weight_range: non-finite weights (offline annotators can produce them)', () => {
    const raw = edited((c) => (blockOf(c, 1).weight.C0 = Number.NaN));
    const r = validateChecklist(raw, example);
    assert.equal(r.ok, false);
    assert.ok(r.violations.some((v) => v.turn === 1 && v.field === 'weight.C0'));
  });

  test('weight_sum: the message gives the actual sum; the tolerance is 1e-6', () => {
    const v = expectError(
      edited((c) => (blockOf(c, 0).weight.C3 = 0.25)),
      { code: 'weight_sum', turn: 0, field: 'weight' },
    );
    assert.match(v.message, /0\.95/);
    assert.equal(validateChecklist(edited((c) => (blockOf(c, 0).weight.C3 = 0.3 + 5e-7)), example).ok, true);
    assert.equal(validateChecklist(edited((c) => (blockOf(c, 0).weight = { C0: 0.1, C1: 0.2, C2: 0.3, C3: 0.4 })), example).ok, true);
  });
});

describe('validateChecklist: evidence', () => {
  test('evidence_turn: evidence from another turn', () => {
    const raw = edited((c) => (itemOf(c, 0, 3).evidence[0] = { turn: 1, step: 1, from: 'assistant.content.user_visible_reply', snippet: 'You are welcome.' }));
    expectError(raw, { code: 'evidence_turn', turn: 0, item: 'C3', field: 'evidence[0].turn' });
    assert.deepEqual(codes(validateChecklist(raw, example).violations), ['evidence_turn']);
  });

  test('evidence_step: a step the turn does not have, or a turn the dialogue does not have', () => {
    const raw = edited((c) => Object.assign(itemOf(c, 1, 0).evidence[0]!, { step: 2 }));
    const v = expectError(raw, { code: 'evidence_step', turn: 1, item: 'C0', field: 'evidence[0].step' });
    assert.match(v.message, /0\.\.1/);
    const noTurn = edited((c) => Object.assign(itemOf(c, 1, 0).evidence[0]!, { turn: 5 }));
    expectError(noTurn, { code: 'evidence_step', turn: 1, item: 'C0', field: 'evidence[0].step' });
    expectError(noTurn, { code: 'evidence_turn', turn: 1, item: 'C0', field: 'evidence[0].turn' });
  });

  test('evidence_user_step: never the user message', () => {
    const raw = edited((c) => (itemOf(c, 0, 0).evidence[0] = { turn: 0, step: 0, from: 'user.content', snippet: 'weather in Paris' }));
    expectError(raw, { code: 'evidence_user_step', turn: 0, item: 'C0', field: 'evidence[0].step' });
  });

  test('evidence_from: the part must fit the role', () => {
    const toolAsThinking = edited((c) => Object.assign(itemOf(c, 0, 1).evidence[0]!, { from: 'assistant.content.thinking' }));
    const v = expectError(toolAsThinking, { code: 'evidence_from', turn: 0, item: 'C1', field: 'evidence[0].from' });
    assert.match(v.message, /tool message.*"tool\.content"/);
    const assistantAsTool = edited((c) => Object.assign(itemOf(c, 0, 0).evidence[0]!, { from: 'tool.content' }));
    const w = expectError(assistantAsTool, { code: 'evidence_from', turn: 0, item: 'C0', field: 'evidence[0].from' });
    assert.match(w.message, /this step's assistant\.tool_calls/);
    const userFrom = edited((c) => Object.assign(itemOf(c, 0, 3).evidence[0]!, { from: 'user.content' }));
    expectError(userFrom, { code: 'evidence_from', turn: 0, item: 'C3', field: 'evidence[0].from' });
  });

  test('evidence_snippet: not found anywhere', () => {
    const raw = edited((c) => Object.assign(itemOf(c, 0, 1).evidence[0]!, { snippet: '"temperature": 25' }));
    const v = expectError(raw, { code: 'evidence_snippet', turn: 0, item: 'C1', field: 'evidence[0].snippet' });
    assert.match(v.message, /not found in the tool\.content of turn 0 step 2; it occurs nowhere/);
  });

  test('evidence_snippet: found in another part of the message or another step, and said where', () => {
    const otherPart = edited((c) => Object.assign(itemOf(c, 0, 2).evidence[1]!, { from: 'assistant.content.user_visible_reply' }));
    const v = expectError(otherPart, { code: 'evidence_snippet', turn: 0, item: 'C2', field: 'evidence[1].snippet' });
    assert.match(v.message, /this step's assistant\.content\.thinking/);
    const otherStep = edited((c) => Object.assign(itemOf(c, 0, 1).evidence[0]!, { step: 4 }));
    const w = expectError(otherStep, { code: 'evidence_snippet', turn: 0, item: 'C1', field: 'evidence[0].snippet' });
    assert.match(w.message, /turn 0 step 2 \(tool\.content\)/);
  });

  test('evidence_snippet: an empty snippet', () => {
    const raw = edited((c) => Object.assign(itemOf(c, 0, 1).evidence[0]!, { snippet: ' \n ' }));
    expectError(raw, { code: 'evidence_snippet', turn: 0, item: 'C1', field: 'evidence[0].snippet' });
  });

  test('snippet matching: whitespace, case, elisions and JSON escapes are tolerated', () => {
    for (const snippet of ['PARIS: 18 °C;   it is 14:00', 'Paris: 18 °C ... both cities', 'Paris…cities.', 'paris: 18\n°c']) {
      const raw = edited((c) => Object.assign(itemOf(c, 0, 3).evidence[0]!, { snippet }));
      assert.equal(validateChecklist(raw, example).ok, true, snippet);
    }
    const escaped = edited((c) => Object.assign(itemOf(c, 0, 0).evidence[0]!, { snippet: '{\\"city\\":\\"Paris\\"}' }));
    assert.equal(validateChecklist(escaped, example).ok, true);
    assert.equal(snippetOccurs('{"a": "x\\ny"}', '"a": "x\\ny"'), true);
    assert.equal(snippetOccurs('line one\nline two', 'one\\nline'), true);
    assert.equal(snippetOccurs('abc', '...'), false);
    assert.equal(snippetOccurs('abc def', 'def ... abc'), false);
  });
});

describe('validateChecklist: warnings', () => {
  test('no_evidence', () => {
    const r = validateChecklist(
      edited((c) => (itemOf(c, 1, 0).evidence = [])),
      example,
    );
    assert.equal(r.ok, true);
    expectViolation(r.violations, { code: 'no_evidence', severity: 'warning', turn: 1, item: 'C0', field: 'evidence' });
  });

  test('mentions_index: in the question, pass condition and failure examples', () => {
    const raw = edited((c) => {
      Object.assign(itemOf(c, 0, 0), { question: 'At step 1, does the assistant call get_weather?', pass_condition: 'See Step: 3.', failure_examples: ['ok', 'Repeats turn 2.'] });
    });
    const r = validateChecklist(raw, example);
    assert.equal(r.ok, true);
    expectViolation(r.violations, { code: 'mentions_index', severity: 'warning', turn: 0, item: 'C0', field: 'question' });
    expectViolation(r.violations, { code: 'mentions_index', severity: 'warning', turn: 0, item: 'C0', field: 'pass_condition' });
    expectViolation(r.violations, { code: 'mentions_index', severity: 'warning', turn: 0, item: 'C0', field: 'failure_examples[1]' });
    assert.equal(r.violations.length, 3);
  });

  test('conditional_question', () => {
    for (const question of ['If the user asks, does it reply?', 'when done, does it stop?']) {
      const r = validateChecklist(
        edited((c) => (itemOf(c, 1, 0).question = question)),
        example,
      );
      assert.equal(r.ok, true);
      expectViolation(r.violations, { code: 'conditional_question', severity: 'warning', turn: 1, item: 'C0', field: 'question' });
    }
    const r = validateChecklist(
      edited((c) => (itemOf(c, 1, 0).question = 'Whenever asked, does it reply?')),
      example,
    );
    assert.deepEqual(r.violations, []);
  });
});

/** The stored example of goodExample() with the given variants. */
function stored(...variants: ChecklistOutput[]): AnnotatedExample {
  return { ...goodExample(), checklists: variants.map((v) => toStoredVariant(v, 0.01)) };
}

describe('validateAnnotatedExample', () => {
  test('a stored example passes', () => {
    const r = validateAnnotatedExample(JSON.parse(JSON.stringify(stored(validChecklist(), validChecklist()))));
    assert.deepEqual(r, { ok: true, uuid: 'good-1', violations: [] });
  });

  test('a semantic error is labelled with its variant, per-item fields', () => {
    const ex = stored(validChecklist(), validChecklist());
    ex.checklists[1]![0]![3]!.weight = 0.25;
    ex.checklists[1]![0]![3]!.dependence = ['C0'];
    const r = validateAnnotatedExample(ex);
    assert.equal(r.ok, false);
    assert.equal(r.uuid, 'good-1');
    expectViolation(r.violations, { code: 'weight_sum', variant: 1, turn: 0, field: 'weight' });
    expectViolation(r.violations, { code: 'dependency_not_tool_content', variant: 1, turn: 0, item: 'C3', field: 'dependence' });
    assert.ok(r.violations.every((v) => v.variant === 1));
    assert.match(formatViolation(r.violations[0]!), /^error variant 1 · turn 0/);
  });

  test('duplicate ids in the stored form', () => {
    const ex = stored(validChecklist());
    ex.checklists[0]![0]![1]!.id = 'C0';
    const r = validateAnnotatedExample(ex);
    expectViolation(r.violations, { code: 'duplicate_id', variant: 0, turn: 0, item: 'C0', field: 'id' });
  });

  test('a structure error is located in variant, turn, item and field', () => {
    const ex = JSON.parse(JSON.stringify(stored(validChecklist()))) as Record<string, unknown>;
    (ex.checklists as Record<string, unknown>[][][])[0]![0]![1]!.weight = 'heavy';
    const r = validateAnnotatedExample(ex);
    assert.equal(r.ok, false);
    assert.equal(r.uuid, 'good-1');
    expectViolation(r.violations, { code: 'structure', variant: 0, turn: 0, item: 'C1', field: 'weight' });
  });

  test('a variant count different from annotation.variants is a warning', () => {
    const ex: AnnotatedExample = {
      ...stored(validChecklist()),
      annotation: { annotator: 'x', variants: [], usage: { calls: 0, promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0, costUsd: 0, cacheHits: 0 } },
    };
    const r = validateAnnotatedExample(ex);
    assert.equal(r.ok, true);
    expectViolation(r.violations, { code: 'annotation_variants', severity: 'warning', field: 'annotation.variants' });
  });

  test('garbage never throws', () => {
    for (const raw of [null, 42, 'x', [], {}, { uuid: 'u' }, { ...goodExample(), checklists: [] }, { ...goodExample(), checklists: [[[null]]] }]) {
      const r = validateAnnotatedExample(raw);
      assert.equal(r.ok, false, JSON.stringify(raw));
      assert.ok(r.violations.length > 0);
    }
    assert.equal(validateAnnotatedExample({ uuid: 'u' }).uuid, 'u');
  });
});

describe('formatting', () => {
  const snippet: Violation = { severity: 'error', code: 'evidence_snippet', turn: 1, item: 'C2', field: 'evidence[0].snippet', message: 'snippet "x" not found' };
  const warning: Violation = { severity: 'warning', code: 'no_evidence', turn: 0, item: 'C1', field: 'evidence', message: 'no evidence' };
  const whole: Violation = { severity: 'error', code: 'structure', message: 'not an array' };

  test('formatViolation: path first, then message and code', () => {
    assert.equal(formatViolation(snippet), 'error turn 1 · item C2 · evidence[0].snippet: snippet "x" not found (evidence_snippet)');
    assert.equal(formatViolation(whole), 'error not an array (structure)');
    assert.equal(formatViolation({ ...warning, variant: 2 }), 'warning variant 2 · turn 0 · item C1 · evidence: no evidence (no_evidence)');
  });

  test('violationsForRepair: errors first, warnings marked, duplicates dropped', () => {
    const text = violationsForRepair([warning, snippet, whole, snippet]);
    assert.equal(text, ['- turn 1 · item C2 · evidence[0].snippet: snippet "x" not found', '- whole answer: not an array', '- (warning) turn 0 · item C1 · evidence: no evidence'].join('\n'));
    assert.equal(violationsForRepair([]), '');
  });

  test('violationsForRepair: a long list is capped', () => {
    const many = Array.from({ length: 60 }, (_, i): Violation => ({ ...snippet, item: `C${i}` }));
    const lines = violationsForRepair(many).split('\n');
    assert.equal(lines.length, 41);
    assert.equal(lines[40], '- … and 20 more');
  });

  test('real violations carry their path into the repair text', () => {
    const r = validateChecklist(
      edited((c) => delete blockOf(c, 0).weight.C3),
      example,
    );
    const text = violationsForRepair(r.violations);
    assert.match(text, /- turn 0 · item C3 · weight\.C3: "weight" has no entry for C3/);
    assert.match(text, /- turn 0 · weight: the weights of the turn sum to 0\.7, not 1/);
  });

  test('renderViolations', () => {
    assert.equal(renderViolations([]), 'no violations');
    assert.deepEqual(renderViolations([warning, snippet]).split('\n').map((l) => l.split(' ')[0]), ['error', 'warning']);
  });
});

describe('renderChecklist', () => {
  test('shows the dialogue with steps and the items with their fields', () => {
    const ex = stored(validChecklist());
    const text = renderChecklist(ex, { width: 100 });
    for (const expected of [
      'Example good-1',
      '══ Turn 0 ',
      '══ Turn 1 ',
      'step 0 · user',
      'step 2 · tool',
      'step 6 · assistant',
      'call:      get_weather {"city":"Paris"}',
      'thinking:  First the weather in Paris.',
      'reply:     Paris: 18 °C; it is 14:00 in both cities.',
      'Does the assistant call get_weather for Paris?',
      'A get_weather call has city equal to "Paris"',
      '- Calls get_weather for Rome only.',
      'C0 · weight 0.3 · required · focus assistant.tool_calls',
      'C3 · weight 0.3 · optional · focus assistant.content.user_visible_reply · depends on C1',
      'C0 · weight 1 · optional',
      'step 1 · assistant.tool_calls · "{\\"city\\":\\"Paris\\"}"',
      'check:     tool_called get_weather {"city":"Paris"}',
      'weights sum 1',
    ]) {
      assert.ok(text.includes(expected), `missing ${JSON.stringify(expected)} in:\n${text}`);
    }
    for (const line of text.split('\n')) assert.ok(line.length <= 100, `line too long: ${line}`);
  });

  test('wraps and truncates long texts; a missing variant is said, not thrown', () => {
    const ex = stored(validChecklist());
    ex.messages[2] = { role: 'tool', content: `{"data": "${'x'.repeat(2000)}"}` };
    ex.checklists[0]![0]![0]!.question = `${'word '.repeat(60)}end?`;
    const text = renderChecklist(ex, { width: 60, maxChars: 100 });
    assert.match(text, /… \[\+\d+ chars\]/);
    for (const line of text.split('\n')) assert.ok(line.length <= 60, `line too long: ${line}`);
    assert.match(text, /end\?/);
    const missing = renderChecklist(ex, { variant: 3 });
    assert.match(missing, /no checklist variant 3 \(the example has 1\)/);
    assert.match(missing, /step 6 · assistant/);
  });

  test('wrapText breaks long words and keeps paragraphs', () => {
    assert.deepEqual(wrapText('aaaaaaaaaaaaaaa bb\n\ncc', 10), ['aaaaaaaaaa', 'aaaaa bb', '', 'cc']);
  });
});
