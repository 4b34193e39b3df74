/**
 * The counters activities add (src/stages/activityMetrics.ts) reach the activity's metric meter with the right names,
 * labels and values; `once` counts a unit of work when its result is first stored, never again when it is found; a
 * metrics error never reaches the activity.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod';
import { MockActivityEnvironment } from '@temporalio/testing';
import type { MetricCounter, MetricGauge, MetricHistogram, MetricMeter, MetricTags } from '@temporalio/common';
import { recordJudgePhase, recordLlmUsage, recordRlBatch } from '../../../src/stages/activityMetrics';
import { once } from '../../../src/stages/activityKit';
import type { ObjectStore } from '../../../src/storage/store';
import { zeroUsage } from '../../../src/kernel/roleContracts';
import { zeroJudgeTotals } from '../../../src/kernel/counts';

interface Added {
  name: string;
  value: number;
  tags: MetricTags;
}

/** A meter that keeps what is added; `fail` makes every add throw. */
function recordingMeter(opts: { fail?: boolean } = {}): MetricMeter & { added: Added[]; created: string[] } {
  const added: Added[] = [];
  const created: string[] = [];
  const meter = {
    added,
    created,
    createCounter(name: string): MetricCounter {
      created.push(name);
      const c: MetricCounter = {
        name,
        kind: 'counter',
        valueType: 'int',
        add(value: number, tags: MetricTags = {}) {
          if (opts.fail) throw new Error('meter broken');
          added.push({ name, value, tags });
        },
        withTags: () => c,
      };
      return c;
    },
    createHistogram: (): MetricHistogram => {
      throw new Error('unused');
    },
    createGauge: (): MetricGauge => {
      throw new Error('unused');
    },
    withTags: () => meter,
  };
  return meter;
}

const sumOf = (added: Added[], name: string, tags: MetricTags = {}) =>
  added.filter((a) => a.name === name && Object.entries(tags).every(([k, v]) => a.tags[k] === v)).reduce((n, a) => n + a.value, 0);

test('LLM usage: a paid answer adds calls, tokens by kind and micro-USD; a cached one a cache hit only; fractions of a micro-USD carry over', async () => {
  const meter = recordingMeter();
  await new MockActivityEnvironment({}, { metricMeter: meter }).run(async () => {
    recordLlmUsage('judge', { ...zeroUsage(), calls: 1, promptTokens: 100, cachedPromptTokens: 20, completionTokens: 10, costUsd: 0.00013 }, false);
    recordLlmUsage('judge', { ...zeroUsage(), calls: 1, cacheHits: 1 }, true);
    for (let i = 0; i < 3; i++) recordLlmUsage('filter', { ...zeroUsage(), calls: 1, promptTokens: 1, costUsd: 0.4e-6 }, false);
  });
  const { added } = meter;
  assert.equal(sumOf(added, 'cm2_llm_calls_total', { role: 'judge' }), 1);
  assert.equal(sumOf(added, 'cm2_llm_cache_hits_total', { role: 'judge' }), 1);
  assert.equal(sumOf(added, 'cm2_llm_tokens_total', { role: 'judge', kind: 'prompt' }), 100);
  assert.equal(sumOf(added, 'cm2_llm_tokens_total', { role: 'judge', kind: 'cached_prompt' }), 20);
  assert.equal(sumOf(added, 'cm2_llm_tokens_total', { role: 'judge', kind: 'completion' }), 10);
  assert.equal(sumOf(added, 'cm2_llm_cost_microusd_total', { role: 'judge' }), 130, '0.00013 USD = 130 micro-USD, not 129');
  assert.equal(sumOf(added, 'cm2_llm_cost_microusd_total', { role: 'filter' }), 1, '3 × 0.4 micro-USD: 1 counted, 0.2 carried');
  assert.ok(added.every((a) => Number.isInteger(a.value) && a.value >= 0), 'the SDK counters take whole numbers');
  assert.equal(new Set(meter.created).size, meter.created.length, 'each counter created once per activity execution');
});

test('judge phases and batches: every counter, labelled with the run (and the split), zeros included', async () => {
  const meter = recordingMeter();
  await new MockActivityEnvironment({}, { metricMeter: meter }).run(async () => {
    recordJudgePhase('r1', { ...zeroJudgeTotals(), calls: 4, cacheHits: 3, offline: 2, shortcut: 1, failed: 0 });
    recordJudgePhase('r1', undefined);
    recordRlBatch('r1', 'train', 8, 0);
    recordRlBatch('r1', 'heldout', 4, 1);
  });
  const { added } = meter;
  assert.equal(sumOf(added, 'cm2_judge_calls_total', { run_id: 'r1' }), 4);
  assert.equal(sumOf(added, 'cm2_judge_cache_hits_total', { run_id: 'r1' }), 3);
  assert.equal(sumOf(added, 'cm2_judge_offline_items_total', { run_id: 'r1' }), 3);
  assert.ok(added.some((a) => a.name === 'cm2_judge_failed_items_total' && a.value === 0), 'a zero still creates the series');
  assert.equal(sumOf(added, 'cm2_rl_rollouts_total', { split: 'train' }), 8);
  assert.equal(sumOf(added, 'cm2_rl_failed_samples_total', { split: 'heldout' }), 1);
});

test('a broken meter, or no activity at all, never reaches the caller', async () => {
  await new MockActivityEnvironment({}, { metricMeter: recordingMeter({ fail: true }) }).run(async () => {
    recordLlmUsage('judge', { ...zeroUsage(), calls: 1, promptTokens: 5 }, false);
    recordJudgePhase('r', zeroJudgeTotals());
  });
  recordLlmUsage('judge', { ...zeroUsage(), calls: 1 }, false);
  recordRlBatch('r', 'train', 1, 0);
});

test('once: onStored runs when the result is first stored, not when an attempt fails first nor when the result is found; its errors are swallowed', async () => {
  const objects = new Map<string, unknown>();
  const store = {
    exists: async (k: string) => objects.has(k),
    getJson: async <T>(k: string, schema: z.ZodType<T>) => schema.parse(objects.get(k)),
    putJson: async (k: string, v: unknown) => void objects.set(k, v),
  } as unknown as ObjectStore;
  const Result = z.object({ n: z.number() });
  const stored: number[] = [];
  await assert.rejects(once(store, 'k', Result, async () => {
    throw new Error('attempt 1 fails before its result is stored');
  }, (r) => stored.push(r.n)));
  assert.deepEqual(await once(store, 'k', Result, async () => ({ n: 1 }), (r) => stored.push(r.n)), { n: 1 });
  assert.deepEqual(await once(store, 'k', Result, async () => ({ n: 2 }), (r) => stored.push(r.n)), { n: 1 }, 'found: not redone');
  assert.deepEqual(stored, [1]);
  assert.deepEqual(await once(store, 'k2', Result, async () => ({ n: 3 }), () => {
    throw new Error('metrics broken');
  }), { n: 3 });
  assert.deepEqual(objects.get('k2'), { n: 3 });
});
