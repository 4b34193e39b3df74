import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Example } from '../../../src/kernel/schema';
import { applyRuleFilters } from '../../../src/stages/prepare/filters';
import { splitTurns } from '../../../src/stages/prepare/stats';
import { reassembleCompressed } from '../../../src/stages/prepare/compression';
import { BROKEN_CODES, generateDemoDataset, generateDemoExample, worldMetaOf, type DemoMeta } from '../../../src/demo/generator';
import { executeTool, toolResultText, WORLD_TOOL_NAMES } from '../../../src/demo/tools';
import { findUngrounded, offlineDataRoles } from '../../../src/demo/offline';

const metaOf = (e: Example): DemoMeta => e.meta as unknown as DemoMeta;

describe('demo world generator', () => {
  const dataset = generateDemoDataset({ seed: 11, count: 600, brokenRate: 0.25 });

  test('is deterministic and prefix-stable; every row is a valid Example', () => {
    const again = generateDemoDataset({ seed: 11, count: 50, brokenRate: 0.25 });
    assert.deepEqual(again, dataset.slice(0, 50));
    assert.notDeepEqual(generateDemoDataset({ seed: 12, count: 5 }).map((e) => e.uuid), dataset.slice(0, 5).map((e) => e.uuid));
    for (const e of dataset) Example.parse(e);
    assert.equal(new Set(dataset.map((e) => e.uuid)).size, dataset.length);
  });

  test('the broken rate does not change the clean content of an example', () => {
    for (let i = 0; i < 40; i++) {
      const clean = generateDemoExample(11, i, { brokenRate: 0 });
      const any = generateDemoExample(11, i, { brokenRate: 0.25 });
      if (metaOf(any).broken === undefined) assert.deepEqual(any, clean);
    }
  });

  test('covers several domains, 1–3 user turns, parallel calls and every defect', () => {
    const domains = new Set(dataset.map((e) => worldMetaOf(e).domain));
    assert.ok(domains.size >= 5, `domains: ${[...domains]}`);
    const turns = new Set(dataset.filter((e) => metaOf(e).broken === undefined).map((e) => splitTurns(e.messages).length));
    assert.deepEqual([...turns].sort(), [1, 2, 3]);
    assert.ok(dataset.some((e) => e.messages.some((m) => (m.tool_calls?.length ?? 0) > 1)), 'some parallel calls');
    const codes = new Set(dataset.map((e) => metaOf(e).broken).filter(Boolean));
    assert.deepEqual([...codes].sort(), [...BROKEN_CODES].sort());
  });

  test('tool results of clean examples are real: re-executing every call reproduces them', () => {
    let calls = 0;
    for (const e of dataset.filter((x) => metaOf(x).broken === undefined)) {
      const seed = worldMetaOf(e).seed;
      e.messages.forEach((m, i) => {
        (m.tool_calls ?? []).forEach((c, k) => {
          assert.ok(WORLD_TOOL_NAMES.includes(c.function.name));
          const result = e.messages[i + 1 + k];
          assert.equal(result?.role, 'tool');
          assert.equal(result?.content, toolResultText(executeTool(c.function.name, c.function.arguments, seed)));
          calls++;
        });
      });
    }
    assert.ok(calls > 500);
  });

  test('ground truth matches the dialogue: one world turn per user turn, expected calls made at their step', () => {
    for (const e of dataset.filter((x) => metaOf(x).broken === undefined)) {
      const world = worldMetaOf(e);
      const turns = splitTurns(e.messages);
      assert.equal(world.turns.length, turns.length);
      world.turns.forEach((wt, t) => {
        const turn = turns[t]!;
        assert.equal(wt.requiresTool, wt.expectedCalls.length > 0);
        for (const call of wt.expectedCalls) {
          const step = turn.steps[call.assistantStep];
          assert.ok(step, `turn ${t} has step ${call.assistantStep}`);
          const made = e.messages[step.assistantIndex]?.tool_calls ?? [];
          assert.ok(
            made.some((c) => c.function.name === call.name && JSON.stringify(JSON.parse(c.function.arguments as string)) === JSON.stringify(call.arguments)),
            `${e.uuid} turn ${t}: ${call.name} at step ${call.assistantStep}`,
          );
        }
        const reply = e.messages[turn.finalReplyIndex!]!.content;
        for (const fact of wt.answerFacts) assert.ok(reply.includes(fact), `${e.uuid} turn ${t} reply states ${fact}`);
      });
    }
  });

  test('every defect is caught by the filter it names; every clean example passes both', () => {
    for (const e of dataset) {
      const broken = metaOf(e).broken;
      const rules = applyRuleFilters(e);
      if (broken === undefined) {
        assert.ok(rules.kept, `${e.uuid}: ${JSON.stringify(rules.reasons)}`);
        assert.equal(findUngrounded(e), undefined, e.uuid);
      } else if (broken === 'llm_filter') {
        assert.ok(rules.kept, `${e.uuid}: semantic defect must pass the rules`);
        assert.notEqual(findUngrounded(e), undefined, `${e.uuid}: ${metaOf(e).brokenDetail}`);
      } else {
        assert.ok(!rules.kept, `${e.uuid} (${broken}) kept`);
        assert.ok(JSON.stringify(rules.reasons).includes(broken), `${e.uuid}: ${broken} not among ${JSON.stringify(rules.reasons)}`);
      }
    }
  });
});

describe('offline data roles', () => {
  const roles = offlineDataRoles();
  const clean = generateDemoDataset({ seed: 3, count: 80, brokenRate: 0 });

  test('the filter passes clean examples at every pass and effort and costs nothing', async () => {
    for (const e of clean.slice(0, 20)) {
      const out = await roles.filter.judge(e, { pass: 2, effort: 'high' });
      assert.ok(out.ok && out.value.noError, JSON.stringify(out));
      assert.equal(out.usage.calls, 0);
    }
  });

  test('the compressor returns one shorter thought per assistant message that reassembles into a valid example', async () => {
    for (const e of clean) {
      const out = await roles.compressor.compress(e);
      assert.ok(out.ok);
      const assistants = e.messages.filter((m) => m.role === 'assistant');
      assert.equal(out.value.length, assistants.length);
      out.value.forEach((t, i) => {
        assert.ok(t.length > 0);
        assert.ok(t.length <= assistants[i]!.content.length);
      });
      const compressed = reassembleCompressed(e, out.value);
      assert.ok(applyRuleFilters(compressed).kept);
    }
  });
});
