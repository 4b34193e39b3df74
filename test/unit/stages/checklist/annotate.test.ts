import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { annotateVariant, annotatorAsk, checklistCacheSalt, LlmChecklistAnnotator, OfflineChecklistAnnotator, type Ask } from '../../../../src/stages/checklist/annotate';
import { buildChecklistMessages, CHECKLIST_JSON_SCHEMA, extractChecklistBlocks, renderConversation } from '../../../../src/stages/checklist/annotatorPrompt';
import { fromStoredVariant, type ChecklistOutput } from '../../../../src/stages/checklist/schema';
import { zeroUsage } from '../../../../src/kernel/roleContracts';
import type { ChatRequest, LlmAsk } from '../../../../src/llm/client';
import { generateDemoDataset } from '../../../../src/demo/generator';
import { offlineChecklist, OFFLINE_ANNOTATOR } from '../../../../src/demo/checklist';

const [example] = generateDemoDataset({ seed: 5, count: 1, brokenRate: 0 });
const ex = example!;
const good = (): ChecklistOutput => offlineChecklist(ex).map((b) => ({ ...b, checklist: b.checklist.map(({ check: _c, ...i }) => i) }));
const usage = (costUsd: number) => ({ ...zeroUsage(), calls: 1, promptTokens: 100, completionTokens: 50, costUsd });

/** An `ask` that plays back answers and records what it was sent. */
function scripted(answers: string[]) {
  const sent: { messages: { role: string; content: string }[]; salt: string }[] = [];
  const ask: Ask = async (messages, salt) => {
    sent.push({ messages, salt });
    const text = answers[Math.min(sent.length - 1, answers.length - 1)]!;
    return { text, usage: usage(0.01) };
  };
  return { ask, sent };
}

describe('annotator prompt', () => {
  test('shows every message with turn and step, tools, and no meta', () => {
    const [system, user] = buildChecklistMessages(ex);
    assert.match(system!.content, /weights of a turn sum to exactly 1/);
    assert.ok(!user!.content.includes('"meta"') && !user!.content.includes('cm2-demo-world'));
    const rendered = renderConversation(ex) as { turn: number; step: number; role: string }[];
    assert.deepEqual(rendered[0], { ...rendered[0], turn: 0, step: 0, role: 'user' });
    assert.equal(rendered[1]!.step, 1);
  });

  test('answers are accepted as {"turns": [...]}, a bare array, or fenced', () => {
    const blocks = good();
    assert.deepEqual(extractChecklistBlocks(JSON.stringify({ turns: blocks })), { ok: true, value: blocks });
    assert.deepEqual(extractChecklistBlocks(JSON.stringify(blocks)), { ok: true, value: blocks });
    assert.deepEqual(extractChecklistBlocks('Here:\n```json\n' + JSON.stringify({ turns: blocks }) + '\n```'), { ok: true, value: blocks });
    assert.equal(extractChecklistBlocks('no json').ok, false);
    assert.equal(extractChecklistBlocks('{"a": 1}').ok, false);
  });

  test('the structured-output schema is sent non-strict (maps) with an object root', () => {
    assert.equal(CHECKLIST_JSON_SCHEMA.strict, false);
    assert.equal(CHECKLIST_JSON_SCHEMA.schema.type, 'object');
  });
});

describe('repair loop', () => {
  test('a valid first answer is accepted at once', async () => {
    const { ask, sent } = scripted([JSON.stringify({ turns: good() })]);
    const r = await annotateVariant(ex, ask, { variant: 0, maxAttempts: 3 });
    assert.ok(r.ok);
    assert.equal(r.attempts, 1);
    assert.equal(sent.length, 1);
    assert.equal(sent[0]!.salt, checklistCacheSalt(0, 1));
  });

  test('violations are fed back and a corrected answer is accepted', async () => {
    const bad = good();
    const id = bad[0]!.checklist[0]!.id;
    bad[0]!.weight[id] = 0.99;
    const { ask, sent } = scripted([JSON.stringify({ turns: bad }), JSON.stringify({ turns: good() })]);
    const r = await annotateVariant(ex, ask, { variant: 1, maxAttempts: 3 });
    assert.ok(r.ok, r.error);
    assert.equal(r.attempts, 2);
    assert.equal(r.usage.calls, 2);
    const repair = sent[1]!.messages;
    assert.equal(repair.length, 4);
    assert.equal(repair[2]!.role, 'assistant');
    assert.match(repair[3]!.content, /weight/);
    assert.equal(sent[1]!.salt, checklistCacheSalt(1, 2));
  });

  test('an answer that stays invalid is a failure value with the last violations and the cost of every attempt', async () => {
    const { ask, sent } = scripted(['I cannot help with that.', JSON.stringify({ turns: [] })]);
    const r = await annotateVariant(ex, ask, { variant: 0, maxAttempts: 3 });
    assert.equal(r.ok, false);
    assert.equal(sent.length, 3);
    assert.equal(r.usage.calls, 3);
    assert.match(r.error!, /invalid checklist after 3 attempt/);
    assert.ok(r.violations.some((v) => v.code === 'block_count'));
    assert.ok(r.raw);
  });

  test('K variants: stored form with per-item weight, dependence and price; a failed variant fails the example', async () => {
    const { ask } = scripted([JSON.stringify({ turns: good() })]);
    const out = await new LlmChecklistAnnotator('m', ask).annotate(ex, { variants: 2, maxAttempts: 1 });
    assert.ok(out.ok);
    assert.equal(out.annotated.checklists.length, 2);
    assert.deepEqual(fromStoredVariant(out.annotated.checklists[0]!), good());
    assert.ok(out.annotated.checklists[0]!.flat().every((i) => i.extra_info.price_usd === 0.01));
    assert.equal(out.annotated.annotation?.usage.calls, 2);

    let n = 0;
    const flaky: Ask = async () => ({ text: n++ === 0 ? JSON.stringify({ turns: good() }) : 'nope', usage: usage(0.02) });
    const failed = await new LlmChecklistAnnotator('m', flaky).annotate(ex, { variants: 3, maxAttempts: 2 });
    assert.equal(failed.ok, false);
    if (!failed.ok) {
      assert.match(failed.reason, /^variant 1: /);
      assert.equal(failed.variants.length, 2, 'stops at the failed variant');
      assert.equal(failed.usage.calls, 3);
    }
  });

  test('transport errors propagate (the activity turns them into Temporal retries)', async () => {
    const ask: Ask = async () => {
      throw new Error('503');
    };
    await assert.rejects(annotateVariant(ex, ask, { variant: 0, maxAttempts: 3 }), /503/);
  });

  test('annotatorAsk calls the annotator role with the checklist schema, the cache salt and the current signal', async () => {
    const requests: ChatRequest[] = [];
    const llm: LlmAsk = {
      chat: async (req) => {
        requests.push(req);
        return { text: JSON.stringify({ turns: good() }), usage: usage(0.01) } as Awaited<ReturnType<LlmAsk['chat']>>;
      },
      roleConfig: () => {
        throw new Error('not used');
      },
    };
    const controller = new AbortController();
    const current: { signal?: AbortSignal } = {};
    const out = await new LlmChecklistAnnotator('m', annotatorAsk(llm, () => current.signal)).annotate(ex, { variants: 1, maxAttempts: 1 });
    assert.ok(out.ok);
    current.signal = controller.signal;
    await annotateVariant(ex, annotatorAsk(llm, () => current.signal), { variant: 1, maxAttempts: 1 });
    assert.deepEqual(requests.map((r) => [r.role, r.cacheSalt, r.jsonSchema === CHECKLIST_JSON_SCHEMA, r.signal === controller.signal]), [
      ['annotator', checklistCacheSalt(0, 1), true, false],
      ['annotator', checklistCacheSalt(1, 1), true, true],
    ]);
    assert.ok(!('signal' in requests[0]!), 'no signal key when there is none');
  });
});

describe('offline annotator', () => {
  test('annotates demo examples and records a clear failure for foreign ones', async () => {
    const a = new OfflineChecklistAnnotator(OFFLINE_ANNOTATOR, offlineChecklist);
    const ok = await a.annotate(ex, { variants: 2, maxAttempts: 3 });
    assert.ok(ok.ok);
    assert.equal(ok.annotated.checklists.length, 2);
    assert.equal(ok.usage.calls, 0);
    const foreign = await a.annotate({ uuid: 'x', messages: ex.messages, tools: ex.tools }, { variants: 1, maxAttempts: 3 });
    assert.equal(foreign.ok, false);
    if (!foreign.ok) assert.match(foreign.reason, /x/);
  });
});
