/**
 * Issue 28, "no silent failure", on non-demo data (examples without the demo world's `meta.world`) on Temporal +
 * MinIO: a checklist stage that annotated nothing fails with the reasons counted, once (not retried), instead of
 * completing; the RL data counts its invalid lines by reason, says when the held-out set shrank, and fails with the
 * counts when nothing is left to train on.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ApplicationFailure } from '@temporalio/common';
import { connectClient } from '../../src/infra/temporal';
import { startChecklist } from '../../src/cli/stages';
import { rootCauseText } from '../../src/cli/watch';
import { ChecklistReport } from '../../src/stages/checklist/shapes';
import { toStoredVariant } from '../../src/stages/checklist/schema';
import { createRlActivities } from '../../src/stages/rl/activities';
import { checklistKeys, runKey } from '../../src/run/layout';
import { startWorkers } from '../../src/workers';
import { generateDemoDataset } from '../../src/demo/generator';
import { offlineChecklist } from '../../src/demo/checklist';
import { demoWorld } from '../../src/demo/world';
import { testConfig, testStore, uniqueId } from '../helpers/env';

/** Demo dialogues stripped of what makes them demo data (`meta.world`, which the offline annotator needs). */
const nonDemo = (count: number, seed: number) => generateDemoDataset({ seed, count, brokenRate: 0 }).map((ex) => ({ ...ex, meta: { source: 'customer-logs' } }));

test('checklist on non-demo data with no annotator endpoint: the stage fails with the reasons counted, not retried', async () => {
  const cfg = testConfig(uniqueId('ckl-floor'), { checklist: { shardSize: 5 } });
  const store = testStore(cfg);
  const sourceKey = runKey(cfg.run.id, 'data', 'rl.jsonl');
  await store.putText(sourceKey, [...nonDemo(12, 3).map((ex) => JSON.stringify(ex)), '{"not": "an example"}'].join('\n') + '\n');
  const workers = await startWorkers(cfg);
  try {
    const client = await connectClient(cfg);
    const handle = await startChecklist(client, cfg);
    const err = await handle.result().then(() => undefined, (e: unknown) => e);
    assert.ok(err, 'the stage fails');
    assert.equal(
      rootCauseText(err),
      'checklist: 0 of 12 examples annotated (12 failed: 12× offline annotator cannot annotate non-demo data — configure llm.roles.annotator; 1 input line(s) not examples, skipped); at least 1 needed (checklist.minAnnotated)',
    );
    // Not retried: one attempt of the report activity.
    const history = await handle.fetchHistory();
    const failed = history.events!.filter((e) => e.activityTaskFailedEventAttributes);
    assert.equal(failed.length, 1);
    assert.equal(failed[0]!.activityTaskFailedEventAttributes!.failure?.applicationFailureInfo?.nonRetryable, true);
    // The report is written all the same, for `cm2 checklist report`.
    const report = await store.getJson(checklistKeys.report(cfg.run.id), ChecklistReport);
    assert.deepEqual([report.annotated, report.failed, report.inputErrors], [0, 12, 1]);
  } finally {
    await workers.shutdown();
  }
});

test('RL data of non-demo examples: invalid lines counted by reason, a shrunk held-out set said so; nothing to train on fails with the counts', async () => {
  const cfg = testConfig(uniqueId('rl-floor'), { rl: { eval: { prompts: 24 } } });
  const store = testStore(cfg);
  const annotated = nonDemo(4, 5).map((ex, i) => ({ ...ex, checklists: [toStoredVariant(offlineChecklist(generateDemoDataset({ seed: 5, count: 4, brokenRate: 0 })[i]!), 0)] }));
  const { checklists: _c, ...noChecklists } = annotated[0]!;
  const lines = [...annotated.map((a) => JSON.stringify(a)), '{"truncated": ', JSON.stringify(noChecklists), 'null'];
  const sourceKey = runKey(cfg.run.id, 'checklists', 'annotated.jsonl');
  await store.putText(sourceKey, lines.join('\n') + '\n');
  const logs: string[] = [];
  const acts = createRlActivities({ store, world: demoWorld, log: (l) => logs.push(l) });
  const data = await acts.rlPrepareData({ runId: cfg.run.id, sourceKey, tokenizerDir: cfg.sft.tokenizerDir, rl: cfg.rl });
  assert.deepEqual({ train: data.train, heldOut: data.heldOut, heldOutRequested: data.heldOutRequested, invalid: data.invalid }, { train: 1, heldOut: 3, heldOutRequested: 24, invalid: 3 });
  assert.equal(Object.values(data.invalidReasons ?? {}).reduce((a, b) => a + b, 0), 3);
  assert.equal(data.invalidReasons?.['not JSON'], 1);
  assert.match(logs.join('\n'), /3 invalid line\(s\) left out: .*1× not JSON/);
  assert.match(logs.join('\n'), /held-out prompts: 3 of 24 asked for/);

  // Nothing usable: the stage stops with the counts, not retried.
  const bad = testConfig(uniqueId('rl-floor0'));
  const badKey = runKey(bad.run.id, 'checklists', 'annotated.jsonl');
  await store.putText(badKey, ['{"truncated": ', JSON.stringify(noChecklists), JSON.stringify(noChecklists)].join('\n') + '\n');
  await assert.rejects(acts.rlPrepareData({ runId: bad.run.id, sourceKey: badKey, tokenizerDir: bad.sft.tokenizerDir, rl: bad.rl }), (e: unknown) => {
    assert.ok(e instanceof ApplicationFailure && e.nonRetryable, String(e));
    assert.match(e.message, new RegExp(`^rl data: 0 of 3 lines of ${badKey} left to train on \\(3 invalid: 2× checklists: .*, 1× not JSON\\); at least 1 needed \\(rl\\.minExamples\\)$`));
    return true;
  });
});
