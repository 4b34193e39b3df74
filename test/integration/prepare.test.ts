/**
 * The data-preparation stage on the real Temporal dev server and MinIO: end to end on the demo world,
 * a worker killed mid-stage, and an LLM endpoint that is down for a while.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { connectClient } from '../../src/infra/temporal';
import { startPrepare } from '../../src/cli/stages';
import type { PrepareReport } from '../../src/stages/prepare/shapes';
import type { DroppedRecord, Example } from '../../src/kernel/schema';
import { runKey, stageWorkflowId } from '../../src/run/layout';
import { startWorkers } from '../../src/workers';
import { replies, startFakeOpenAI } from '../helpers/fakeOpenAI';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { startChildWorker, writeConfigFile } from '../helpers/processes';

function checkReportConsistency(report: PrepareReport) {
  // Every example entering a step leaves it kept or dropped: nothing is lost between steps.
  let expectedIn = report.total;
  for (const step of report.steps) {
    if (step.name === 'compression' || step.name === 'selection') continue;
    assert.equal(step.in, expectedIn, `${step.name} input`);
    assert.equal(step.kept + step.dropped, step.in, `${step.name} kept + dropped`);
    expectedIn = step.kept;
  }
}

test('prepare runs end to end on the demo world, records every drop, and is idempotent on re-entry', async () => {
  const cfg = testConfig(uniqueId('prep'), {
    data: { source: { kind: 'demo', count: 120, seed: 3, brokenRate: 0.25 }, shardSize: 30, llmFilter: { cascade: { passes: [{ effort: 'low' }, { effort: 'high' }] } }, split: { seed: 1, coldStart: 0.3 } },
  });
  const store = testStore(cfg);
  const workers = await startWorkers(cfg);
  try {
    const client = await connectClient(cfg);
    const report = await (await startPrepare(client, cfg)).result();
    assert.equal(report.total, 120);
    checkReportConsistency(report);
    const rule = report.steps.find((s) => s.name === 'rule_filter')!;
    assert.ok(rule.dropped > 0, 'the demo world has rule-broken examples');
    assert.ok((report.steps.find((s) => s.name === 'llm_filter_pass0')?.dropped ?? 0) > 0, 'and LLM-filter-broken ones');

    // Every rule-broken example is dropped by rule_filter with its filter code among the reasons.
    const imported = await store.getJsonl<Example>(runKey(cfg.run.id, 'data', 'imported', 'shard-00000.jsonl'));
    const dropped = (await Promise.all((await store.list(runKey(cfg.run.id, 'data', 'dropped', 'rule_filter/'))).map((k) => store.getJsonl<DroppedRecord>(k)))).flat();
    const droppedBy = new Map(dropped.map((d) => [d.uuid, d.reasons.map((r) => r.code)]));
    for (const ex of imported) {
      const broken = ex.meta?.['broken'];
      if (typeof broken === 'string' && broken !== 'llm_filter') assert.ok(droppedBy.get(ex.uuid)?.includes(broken), `${ex.uuid} (${broken}) dropped by rule filters`);
    }

    // Final splits exist in S3 with the reported counts; cold-start thinking is compressed.
    const coldStart = await store.getJsonl<Example>(report.coldStart.key);
    const rl = await store.getJsonl<Example>(report.rl.key);
    assert.equal(coldStart.length, report.coldStart.count);
    assert.equal(rl.length, report.rl.count);
    assert.ok(coldStart.length > 0 && rl.length > 0);
    assert.deepEqual(await store.getJson(report.reportKey), report);

    // Re-entry with the same run id: a new workflow run returns the same result without redoing work.
    const again = await (await startPrepare(client, cfg)).result();
    assert.deepEqual(again, report);
  } finally {
    await workers.shutdown();
  }
});

/** Request key at the fake server: the prompt plus the pass's effort (two passes send the same prompt). */
const keyOf = (body: { messages?: unknown; reasoning_effort?: unknown }) =>
  createHash('sha256').update(JSON.stringify([body.messages, body.reasoning_effort ?? null])).digest('hex');

test('a worker killed mid-stage is replaced and the stage finishes without redoing finished work', async () => {
  const fake = await startFakeOpenAI({ keyOf, behaviour: () => replies.json({ Reasoning: 'fine', NoError: true }, { delayMs: 60 }) });
  const cfg = testConfig(uniqueId('kill'), {
    data: { source: { kind: 'demo', count: 80, seed: 5, brokenRate: 0 }, shardSize: 10, shardConcurrency: 2, llmFilter: { cascade: { passes: [{ effort: 'low' }, { effort: 'medium' }] } }, compression: { enabled: false } },
    llm: { roles: { filter: { baseUrl: fake.url, model: 'fake-filter', concurrency: 2, reasoningEffort: 'low' } } },
    temporal: { activity: { heartbeatTimeout: '4s', startToCloseTimeout: '5m', maxRetryInterval: '2s' } },
  });
  const file = writeConfigFile(cfg);
  let worker = await startChildWorker(file);
  try {
    const client = await connectClient(cfg);
    const handle = await startPrepare(client, cfg);
    // Kill the worker once part of the first LLM pass is done.
    while (fake.requests.length < 25) await new Promise((r) => setTimeout(r, 50));
    await worker.kill('SIGKILL');
    const seenAtKill = fake.requests.length;
    worker = await startChildWorker(file);
    const report = await handle.result();
    checkReportConsistency(report);
    const passes = report.steps.filter((s) => s.name.startsWith('llm_filter'));
    assert.equal(passes.length, 2);
    for (const p of passes) assert.equal(p.failed, 0);
    // Each (example, pass) costs one call; only calls in flight at the kill may be repeated.
    const expected = passes.reduce((n, p) => n + p.in, 0);
    const duplicates = [...fake.counts.values()].reduce((n, c) => n + (c - 1), 0);
    assert.equal(fake.counts.size, expected, 'every (example, pass) was judged');
    assert.ok(duplicates <= 2 * 2, `at most the in-flight calls are repeated (got ${duplicates}, ${seenAtKill} before the kill)`);
  } finally {
    await worker.kill('SIGTERM');
    await fake.close();
  }
});

test('an LLM endpoint that answers 503 for a while delays the stage but loses nothing', async () => {
  let outageUntil = 0;
  const fake = await startFakeOpenAI({
    keyOf,
    behaviour: (_req, ctx) => {
      if (ctx.total === 10) outageUntil = Date.now() + 4000; // the endpoint goes down after 9 answers
      if (Date.now() < outageUntil) return replies.status(503, { message: 'upstream unavailable' });
      return replies.json({ Reasoning: 'fine', NoError: true });
    },
  });
  const cfg = testConfig(uniqueId('outage'), {
    data: { source: { kind: 'demo', count: 40, seed: 9, brokenRate: 0 }, shardSize: 10, llmFilter: { cascade: { passes: [{ effort: 'low' }] } }, compression: { enabled: false } },
    llm: { roles: { filter: { baseUrl: fake.url, model: 'fake-filter', concurrency: 2, maxTransportRetries: 1 } } },
    temporal: { activity: { heartbeatTimeout: '10s', startToCloseTimeout: '5m', maxRetryInterval: '1s' } },
  });
  const workers = await startWorkers(cfg);
  try {
    const client = await connectClient(cfg);
    const t0 = Date.now();
    const report = await (await startPrepare(client, cfg)).result();
    checkReportConsistency(report);
    const pass = report.steps.find((s) => s.name === 'llm_filter_pass0')!;
    assert.equal(pass.failed, 0, 'no example recorded as failed because of the outage');
    assert.equal(pass.dropped, 0);
    assert.ok(fake.requests.some((r) => r.index >= 9) && Date.now() - t0 >= 4000, 'the outage happened and was waited out');
    assert.equal(fake.counts.size, pass.in);
    const history = await client.workflow.getHandle(stageWorkflowId(cfg.run.id, 'prepare')).fetchHistory();
    const failedAttempts = (history.events ?? []).some((e) => e.activityTaskStartedEventAttributes && (e.activityTaskStartedEventAttributes.attempt ?? 1) > 1);
    assert.ok(failedAttempts, 'shard activities were retried by Temporal during the outage');
  } finally {
    await workers.shutdown();
    await fake.close();
  }
});
