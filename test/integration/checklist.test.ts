/**
 * The checklist-annotation stage on the real Temporal dev server and MinIO: the demo world's RL split annotated
 * offline end to end; a fake OpenAI-compatible annotator whose invalid checklists lead to repair or a recorded
 * failure; and a worker killed mid-stage, after which no LLM answer is paid for twice (counted at the fake server).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { connectClient } from '../../src/infra/temporal';
import { startChecklist, startPrepare } from '../../src/cli/stages';
import { checklistValidateCommand } from '../../src/cli/checklistCommand';
import { FailedAnnotation } from '../../src/stages/checklist/shapes';
import { buildChecklistMessages } from '../../src/stages/checklist/annotatorPrompt';
import { AnnotatedExample, type ChecklistOutput } from '../../src/stages/checklist/schema';
import { validateAnnotatedExample } from '../../src/stages/checklist/validate';
import type { Example } from '../../src/kernel/schema';
import { checklistKeys, runKey } from '../../src/run/layout';
import { startWorkers } from '../../src/workers';
import { generateDemoDataset } from '../../src/demo/generator';
import { offlineChecklist } from '../../src/demo/checklist';
import { replies, startFakeOpenAI, type RecordedRequest } from '../helpers/fakeOpenAI';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { startChildWorker, writeConfigFile } from '../helpers/processes';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('the demo world\'s RL split is annotated offline on Temporal + MinIO; a re-run annotates nothing again', async () => {
  const cfg = testConfig(uniqueId('ckl'), {
    data: { source: { kind: 'demo', count: 90, seed: 21, brokenRate: 0.15 }, shardSize: 30, llmFilter: { cascade: { passes: [{ effort: 'low' }] } } },
    checklist: { shardSize: 10, variants: 2 },
  });
  const store = testStore(cfg);
  const workers = await startWorkers(cfg);
  try {
    const client = await connectClient(cfg);
    const prepared = await (await startPrepare(client, cfg)).result();
    const report = await (await startChecklist(client, cfg)).result();
    assert.equal(report.total, prepared.rl.count);
    assert.equal(report.annotated, report.total, JSON.stringify(report.failureReasons));
    assert.equal(report.failed, 0);
    assert.equal(report.variants, 2);
    assert.ok(report.meanItemsPerTurn >= 2);
    assert.equal(report.usage.calls, 0, 'the offline annotator calls no LLM');

    const annotated = await store.getJsonl(report.annotatedKey, AnnotatedExample);
    assert.equal(annotated.length, report.annotated);
    for (const ex of annotated) {
      const v = validateAnnotatedExample(ex);
      assert.ok(v.ok, `${ex.uuid}: ${JSON.stringify(v.violations.slice(0, 2))}`);
      assert.ok(ex.checklists[0]!.flat().every((item) => item.check !== undefined), 'offline items are machine-checkable');
    }
    // The stored file passes `cm2 checklist validate`.
    const file = path.join(mkdtempSync(path.join(tmpdir(), 'cm2-ckl-')), 'annotated.jsonl');
    writeFileSync(file, annotated.map((a) => JSON.stringify(a)).join('\n') + '\n');
    const lines: string[] = [];
    assert.equal(checklistValidateCommand(file, (l) => lines.push(l)), 0, lines.join('\n'));

    // A second run of the stage finds every example annotated.
    const again = await (await startChecklist(client, cfg)).result();
    assert.deepEqual(again, report);
  } finally {
    await workers.shutdown();
  }
});

/** Sets up examples in the bucket and a map from the annotator prompt to its example. */
async function seedExamples(cfg: ReturnType<typeof testConfig>, count: number, seed: number) {
  const examples = generateDemoDataset({ seed, count, brokenRate: 0 });
  await testStore(cfg).putJsonl(runKey(cfg.run.id, 'data', 'rl.jsonl'), examples);
  const byPrompt = new Map<string, Example>();
  for (const ex of examples) byPrompt.set(buildChecklistMessages(ex)[1]!.content, ex);
  const exampleOf = (req: RecordedRequest): Example => {
    const prompt = req.body.messages?.[1]?.content;
    const ex = typeof prompt === 'string' ? byPrompt.get(prompt) : undefined;
    if (!ex) throw new Error('unknown prompt');
    return ex;
  };
  return { examples, exampleOf };
}

/** A correct answer for an example, as an LLM would write it (no `check`), wrapped as `{"turns": [...]}`. */
const goodAnswer = (ex: Example): { turns: ChecklistOutput } => ({
  turns: offlineChecklist(ex).map((b) => ({ ...b, checklist: b.checklist.map(({ check: _c, ...item }) => item) })),
});

test('invalid checklists from the endpoint are repaired or recorded as failures, never a crash', async () => {
  const cfg0 = testConfig(uniqueId('repair'));
  const { examples, exampleOf } = await seedExamples(cfg0, 12, 4);
  const role = (i: number) => (i % 3 === 0 ? 'repair' : i % 3 === 1 ? 'hopeless' : 'good');
  const index = new Map(examples.map((e, i) => [e.uuid, i]));
  const fake = await startFakeOpenAI({
    behaviour: (req) => {
      const ex = exampleOf(req);
      const kind = role(index.get(ex.uuid)!);
      const attempt = ((req.body.messages?.length ?? 2) - 2) / 2 + 1;
      if (kind === 'good' || (kind === 'repair' && attempt >= 2)) return replies.json(goodAnswer(ex));
      if (kind === 'repair') {
        // Weights that do not sum to 1 in the first block.
        const bad = goodAnswer(ex);
        const first = bad.turns[0]!;
        const id = first.checklist[0]!.id;
        first.weight[id] = (first.weight[id] ?? 0) + 0.25;
        return replies.json(bad);
      }
      return attempt === 1 ? replies.text('Sure! Here is the checklist you asked for.') : replies.json({ turns: [] });
    },
  });
  const cfg = testConfig(cfg0.run.id, {
    checklist: { shardSize: 4, maxAttempts: 3 },
    llm: { roles: { annotator: { baseUrl: fake.url, model: 'fake-annotator', concurrency: 3, pricing: { inputPer1M: 1.25, outputPer1M: 10 } } } },
  });
  const store = testStore(cfg);
  const workers = await startWorkers(cfg);
  try {
    const client = await connectClient(cfg);
    const report = await (await startChecklist(client, cfg)).result();
    const hopeless = examples.filter((_, i) => role(i) === 'hopeless');
    assert.equal(report.total, 12);
    assert.equal(report.failed, hopeless.length);
    assert.equal(report.annotated, 12 - hopeless.length);
    assert.deepEqual(Object.keys(report.failureReasons), ['invalid checklist after 3 attempt(s)']);
    assert.ok(report.usage.costUsd > 0 && report.usage.calls === 4 * 1 + 4 * 2 + 4 * 3, `calls: ${report.usage.calls}`);
    assert.equal(report.attempts['1'], 4);
    assert.equal(report.attempts['2'], 4);

    for (const [i, ex] of examples.entries()) {
      if (role(i) === 'hopeless') {
        const rec = await store.getJson(checklistKeys.failedExample(cfg.run.id, ex.uuid), FailedAnnotation);
        assert.equal(rec.attempts, 3);
        assert.match(rec.reason, /invalid checklist after 3 attempt/);
        assert.ok(rec.usage.costUsd > 0, 'the cost of a failed example is recorded');
        continue;
      }
      const a = await store.getJson(checklistKeys.example(cfg.run.id, ex.uuid), AnnotatedExample);
      assert.equal(a.annotation?.variants[0]?.attempts, role(i) === 'repair' ? 2 : 1);
      assert.ok(a.checklists[0]!.flat().every((item) => item.extra_info.price_usd > 0));
    }
    // The repair request quoted the violation back to the model.
    const repairs = fake.requests.filter((r) => (r.body.messages?.length ?? 0) === 4 && role(index.get(exampleOf(r).uuid)!) === 'repair');
    assert.equal(repairs.length, 4);
    for (const r of repairs) assert.match(String(r.body.messages?.[3]?.content), /weight/i);
    // Structured output was requested with the checklist schema.
    assert.equal(fake.requests[0]?.body.response_format?.type, 'json_schema');
  } finally {
    await workers.shutdown();
    await fake.close();
  }
});

test('a worker killed mid-stage resumes without any LLM answer paid for twice', async () => {
  const cfg0 = testConfig(uniqueId('cklkill'));
  const { examples, exampleOf } = await seedExamples(cfg0, 30, 8);
  let passed = 0;
  let openGate: () => void = () => {};
  const gate = new Promise<void>((r) => (openGate = r));
  const fake = await startFakeOpenAI({
    behaviour: async (req) => {
      // The first 10 requests are answered; later ones wait for the gate (the kill happens while they wait).
      if (++passed > 10) await gate;
      return replies.json(goodAnswer(exampleOf(req)), { delayMs: 20 });
    },
  });
  const cfg = testConfig(cfg0.run.id, {
    checklist: { shardSize: 5, shardConcurrency: 2 },
    llm: { roles: { annotator: { baseUrl: fake.url, model: 'fake-annotator', concurrency: 2 } } },
    temporal: { activity: { heartbeatTimeout: '4s', startToCloseTimeout: '5m', maxRetryInterval: '2s' } },
  });
  const store = testStore(cfg);
  const file = writeConfigFile(cfg);
  let worker = await startChildWorker(file);
  try {
    const client = await connectClient(cfg);
    const handle = await startChecklist(client, cfg);
    // Wait until the 10 answered examples are stored and others are in flight (held), then kill.
    const prefix = runKey(cfg.run.id, 'checklists', 'examples/');
    while ((await store.list(prefix)).length < 10 || fake.inFlight === 0) await sleep(50);
    await worker.kill('SIGKILL');
    const heldAtKill = fake.requests.length - 10;
    assert.ok(heldAtKill > 0, 'requests were in flight at the kill');
    openGate();
    worker = await startChildWorker(file);
    const report = await handle.result();
    assert.equal(report.annotated, 30);
    assert.equal(report.failed, 0);
    // Every example answered exactly once; the held requests of the killed worker were never answered.
    assert.equal(fake.answered.size, 30);
    for (const [key, n] of fake.answered) assert.equal(n, 1, `answered ${n} times: ${key.slice(0, 80)}`);
    const stored = new Set(await store.list(prefix));
    for (const ex of examples) assert.ok(stored.has(checklistKeys.example(cfg.run.id, ex.uuid)), ex.uuid);

    // Re-running the stage sends nothing to the endpoint.
    const before = fake.requests.length;
    const again = await (await startChecklist(client, cfg)).result();
    assert.equal(again.annotated, 30);
    assert.equal(fake.requests.length, before);
  } finally {
    openGate();
    await worker.kill('SIGTERM');
    await fake.close();
  }
});
