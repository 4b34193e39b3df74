import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { itemSatisfiedInTurn } from '../../../src/stages/checklist/check';
import type { ItemCheck } from '../../../src/stages/checklist/schema';
import { replyPart, turnSpans } from '../../../src/stages/checklist/steps';
import { validateChecklist } from '../../../src/stages/checklist/validate';
import { applyRuleFilters } from '../../../src/stages/prepare/filters';
import { DemoSource } from '../../../src/run/config';
import { findUngrounded } from '../../../src/demo/offline';
import { offlineChecklist } from '../../../src/demo/checklist';
import { generateDemoDataset, generateDemoExample, terseReply, worldMetaOf, type DemoMeta } from '../../../src/demo/generator';

describe('terse demonstrator (data.source.terseRate)', () => {
  test('terseReply keeps the reply up to the first fact, cut at a clause boundary', () => {
    assert.equal(terseReply('It is foggy in Lyon with 21 degrees celsius and 34 percent humidity.', ['foggy', '21', '34']), 'It is foggy in Lyon.');
    assert.equal(terseReply('Flight FL1697 is on time at gate C11.', ['on time', 'C11']), 'Flight FL1697 is on time.');
    assert.equal(
      terseReply('Done! I ordered 2 x coffee mug for a total of 15 EUR. Your order id is ord-5485 and it will arrive in 5 days.', ['ord-5485', '15']),
      'Done! I ordered 2 x coffee mug for a total of 15 EUR.',
    );
    assert.equal(terseReply('acc-105 has 400.26 EUR and acc-102 has 4530.73 EUR.', ['400.26', '4530.73']), 'acc-105 has 400.26 EUR.');
    // Fewer than two facts stated, or no boundary between them: unchanged.
    assert.equal(terseReply('It is foggy in Lyon.', ['foggy']), 'It is foggy in Lyon.');
    assert.equal(terseReply('Gate C11 21', ['C11', '21']), 'Gate C11 21');
    // Facts on word boundaries only: "1" inside "21" is not a second fact.
    assert.equal(terseReply('It is 21 degrees.', ['21', '1']), 'It is 21 degrees.');
  });

  test('rate 0 is the default and changes nothing; the decision has its own random stream', () => {
    assert.equal(DemoSource.parse({ kind: 'demo' }).terseRate, 0);
    const plain = generateDemoDataset({ seed: 7, count: 60 });
    assert.deepEqual(generateDemoDataset({ seed: 7, count: 60, terseRate: 0 }), plain);
    const half = generateDemoDataset({ seed: 7, count: 60, terseRate: 0.5 });
    let terse = 0;
    half.forEach((ex, i) => {
      const meta = ex.meta as unknown as DemoMeta;
      const p = plain[i]!;
      assert.deepEqual(worldMetaOf(ex), worldMetaOf(p), 'the ground truth does not depend on the demonstrator');
      assert.equal(ex.messages.length, p.messages.length);
      if (meta.demonstrator !== 'terse') {
        assert.deepEqual(ex, p);
        return;
      }
      terse++;
      ex.messages.forEach((m, k) => {
        const q = p.messages[k]!;
        if (m.content === q.content) return;
        // Only final replies change, and only by getting shorter.
        assert.equal(m.role, 'assistant');
        assert.equal(m.tool_calls, undefined);
        assert.ok(q.content!.startsWith(m.content!.slice(0, -1)), `${m.content} is a prefix of ${q.content}`);
      });
    });
    assert.ok(terse > 15 && terse < 45, `about half terse: ${terse}`);
    assert.throws(() => generateDemoDataset({ seed: 7, count: 1, terseRate: 2 }), /terseRate/);
  });

  test('the checklist of a terse dialogue is valid and still asks for every fact; its reference fails exactly those items', () => {
    let dropped = 0;
    for (let i = 0; i < 120; i++) {
      const ex = generateDemoExample(7, i, { brokenRate: 0, terseRate: 1 });
      const full = generateDemoExample(7, i, { brokenRate: 0 });
      const checklist = offlineChecklist(ex);
      const v = validateChecklist(checklist, ex);
      assert.deepEqual(v.violations, [], `${ex.uuid}`);
      // Same items as the full demonstrator's checklist: the ground truth, not the reference, decides them.
      assert.deepEqual(checklist.map((b) => b.checklist.map((it) => it.question)), offlineChecklist(full).map((b) => b.checklist.map((it) => it.question)));
      const spans = turnSpans(ex.messages);
      for (const block of checklist) {
        const finalReply = replyPart(ex.messages[spans[block.turn]!.end]!.content);
        for (const item of block.checklist) {
          const ok = itemSatisfiedInTurn(item.check as ItemCheck, ex.messages, block.turn).satisfied;
          if (item.check?.kind === 'reply_states' && !ok) {
            dropped++;
            assert.equal(item.evidence[0]!.from, 'tool.content', 'a fact the reply leaves out is grounded in the tool result');
            assert.ok(!finalReply.toLowerCase().includes(item.check.value.toLowerCase()) || /\d/.test(item.check.value));
          } else assert.ok(ok, `${ex.uuid} turn ${block.turn} ${item.id} ${item.question}`);
        }
      }
    }
    assert.ok(dropped > 50, `terse references leave facts out: ${dropped}`);
  });

  test('the filters keep terse dialogues exactly as they keep the complete ones: the defect is not one they look for', () => {
    for (let i = 0; i < 150; i++) {
      const terse = generateDemoExample(7, i, { terseRate: 1 });
      const full = generateDemoExample(7, i);
      assert.equal(applyRuleFilters(terse).kept, applyRuleFilters(full).kept, `${terse.uuid}: rule filters`);
      assert.equal(findUngrounded(terse) === undefined, findUngrounded(full) === undefined, `${terse.uuid}: offline LLM filter`);
    }
  });
});
