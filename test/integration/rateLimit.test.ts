/**
 * Load at the rate limit (issue 16): the checklist stage on the real Temporal dev server and MinIO, 200 demo examples
 * × 3 variants against a fake annotator that accepts 12 requests/s and answers 429 with Retry-After above that. No
 * example fails, no request is paid twice, no shard activity fails (429s stay inside the LLM client), and the paid
 * answers come at ≥ 80 % of the limit. The full-size figures are bench/rate-limit.ts's.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { temporal } from '@temporalio/proto';
import { connectClient } from '../../src/infra/temporal';
import { startChecklist } from '../../src/cli/stages';
import { runKey } from '../../src/run/layout';
import { startWorkers } from '../../src/workers';
import { generateDemoDataset } from '../../src/demo/generator';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { checklistAnswerer, startRateLimitedOpenAI } from '../helpers/rateLimitedOpenAI';

const EventType = temporal.api.enums.v1.EventType;

test('200 examples × 3 variants at a 12 requests/s limit: throughput at the limit, no example failed, nothing paid twice', async () => {
  const rate = 12;
  const examples = generateDemoDataset({ seed: 16, count: 200, brokenRate: 0 });
  const fake = await startRateLimitedOpenAI({ rate, burst: 3, latencyMs: 50, answer: checklistAnswerer(examples) });
  const cfg = testConfig(uniqueId('ratelimit'), {
    // Every shard at once: no wave of shards ends mid-run (a gap while the workflow schedules the next ones).
    checklist: { shardSize: 25, shardConcurrency: 8, variants: 3 },
    llm: { roles: { annotator: { baseUrl: fake.url, model: 'fake-annotator', concurrency: 16 } } },
  });
  await testStore(cfg).putJsonl(runKey(cfg.run.id, 'data', 'rl.jsonl'), examples);
  const workers = await startWorkers(cfg);
  try {
    const client = await connectClient(cfg);
    const handle = await startChecklist(client, cfg);
    const report = await handle.result();
    const t = fake.totals();

    assert.equal(report.annotated, 200, JSON.stringify(report.failureReasons));
    assert.equal(report.failed, 0);
    assert.equal(report.variants, 3);
    // Each (example, variant) is a distinct cache entry that needs one paid answer; exactly that many were paid.
    // The 3 variants of an example send the same request (they differ only in the cache salt), hence ≤ 3 per hash.
    assert.equal(t.paid, 200 * 3, `paid ${t.paid}`);
    assert.ok(t.maxPaidPerKey <= 3, `a request paid ${t.maxPaidPerKey} times`);
    assert.equal(report.usage.calls, 600);
    assert.ok(t.limited > 0, 'the limit was reached (some 429s)');

    // Throughput from the first request to the last paid answer.
    const seconds = (t.lastPaidAt - t.firstAt) / 1000;
    const throughput = t.paid / seconds;
    console.log(`rate limit ${rate}/s: ${t.paid} paid in ${seconds.toFixed(1)} s = ${throughput.toFixed(1)}/s, ${t.limited} 429s; per second ${fake.paidPerSecond.join(",")}`);
    assert.ok(throughput >= 0.8 * rate, `throughput ${throughput.toFixed(1)}/s < 80 % of ${rate}/s`);
    assert.ok(throughput <= rate * 1.05 + fake.burst / seconds, 'the fake let more through than its limit');

    // 429s never failed an activity: every annotateShard ran in one attempt.
    const history = await handle.fetchHistory();
    const shardStarts = (history.events ?? []).filter((e) => e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED);
    assert.ok(shardStarts.length >= 8 + 2);
    for (const e of shardStarts) assert.equal(e.activityTaskStartedEventAttributes?.attempt, 1, 'an activity was retried');
  } finally {
    await workers.shutdown();
    await fake.close();
  }
});
