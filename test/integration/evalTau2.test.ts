/**
 * τ²-Bench in the evaluation stage (issue 34 item 6), on Temporal + MinIO with the real tau2: with `eval.tau2.enabled`
 * each policy's episodes (task × trial) are played on a gpu worker, each finished one stored in S3 at once; a worker
 * SIGKILLed in the middle leaves the episodes it finished, and the activity's retry (on another worker) plays only
 * the others; the results (every episode with tau2's simulation, per-domain metrics) and the summary land in S3, and
 * the stage's result carries them for `cm2 status`.
 *
 * The policy is a tiny random Qwen3 (its answers are noise; the point is the bookkeeping) whose context holds
 * tau2's prompts (~8k tokens with the demo tokenizer); the user simulator is the offline one.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pipelineInput, startStage } from '../../src/cli/stages';
import { collectReport } from '../../src/report/collect';
import { renderReport } from '../../src/report/html';
import { tau2Lines } from '../../src/cli/runStatus';
import { connectClient } from '../../src/infra/temporal';
import { evalKeys } from '../../src/run/layout';
import type { Cm2Config } from '../../src/run/config';
import { evalWorkflow, type EvalResult } from '../../src/stages/eval/workflow';
import type { Tau2Results } from '../../src/stages/eval/tau2/results';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { startChildWorker, writeConfigFile, type ChildWorker } from '../helpers/processes';
import { writeTinySftPolicy } from '../helpers/rlFixture';

const tau2 = { enabled: true, domains: ['airline', 'retail'], limit: 3, trials: 2, maxNewTokens: 6, concurrency: 2 };

function config(tag: string): Cm2Config {
  return testConfig(uniqueId(tag), { eval: { bfcl: { categories: ['simple_python'], limit: 2, maxNewTokens: 6, batchSize: 2 }, tau2 }, temporal: { activity: { heartbeatTimeout: '6s', maxRetryInterval: '1s' } } });
}

test('τ²-Bench in the stage: episodes stored as they finish; a worker killed mid-activity leaves them, and the retry plays only the others', { timeout: 600_000 }, async () => {
  const cfg = config('evt2');
  const store = testStore(cfg);
  const prefix = await writeTinySftPolicy(cfg, store, 16384);
  const client = await connectClient(cfg);
  const workers: ChildWorker[] = [];
  const logs = mkdtempSync(path.join(tmpdir(), 'cm2-evt2-'));
  console.log(`worker logs: ${logs}`);
  try {
    workers.push(await startChildWorker(writeConfigFile(cfg), 'workflows,api', {}, [], { logFile: path.join(logs, 'workflows.log') }));
    const first = await startChildWorker(writeConfigFile(cfg), 'gpu', {}, [], { logFile: path.join(logs, 'gpu-1.log') });
    workers.push(first);
    const resultKey = evalKeys.tau2(cfg.run.id, 'sft');
    const runs = ['airline', 'retail'].flatMap((d) => ['0', '1', '2'].flatMap((t) => [0, 1].map((trial) => ({ d, t, trial }))));
    const evalInput = { ...pipelineInput(cfg).stages.eval!, policies: [{ label: 'sft', policy: { kind: 'hf' as const, prefix } }] };
    assert.ok(evalInput.tau2?.config.enabled, 'the pipeline passes eval.tau2 and llm.roles.user');
    const handle = await startStage(client, cfg, evalWorkflow, 'eval', [evalInput], 'test τ²-Bench');
    // the tasks' ids: airline's and retail's base split begin with 0, 1, 2
    const keyOf = (r: (typeof runs)[number]) => evalKeys.tau2Episode(resultKey, r.d, r.t, r.trial);
    let stored: string[] = [];
    for (let i = 0; i < 1200 && stored.length < 2; i++) {
      stored = [];
      for (const r of runs) if (await store.exists(keyOf(r))) stored.push(keyOf(r));
      await new Promise((res) => setTimeout(res, 250));
    }
    assert.ok(stored.length >= 2 && stored.length < runs.length, `episodes stored before the kill: ${stored.length}`);
    first.proc.kill('SIGKILL');
    // Mark a finished episode: if the retry played it again, the mark would be gone.
    const marked = stored[0]!;
    await store.putJson(marked, { ...(JSON.parse(await store.getText(marked)) as object), error: 'stored before the kill' });
    workers.push(await startChildWorker(writeConfigFile(cfg), 'gpu', {}, [], { logFile: path.join(logs, 'gpu-2.log') }));
    const result = (await handle.result()) as EvalResult;
    const summary = result.tau2![0]!;
    assert.equal(summary.label, 'sft');
    assert.equal(summary.episodes, 12);
    assert.deepEqual(Object.keys(summary.domains), ['airline', 'retail']);
    for (const m of Object.values(summary.domains)) assert.deepEqual([m.tasks, m.trials], [3, 2]);
    const full = JSON.parse(await store.getText(summary.key)) as Tau2Results;
    assert.match(full.tau2, /^\d+\.\d+/);
    assert.deepEqual(full.user, { kind: 'offline-user' });
    assert.equal(full.episodes.length, 12);
    const again = full.episodes.find((e) => keyOf({ d: e.domain, t: e.taskId, trial: e.trial }) === marked)!;
    assert.equal(again.error, 'stored before the kill', 'a finished episode was not played again');
    for (const e of full.episodes) assert.ok(e.termination !== null || e.error, JSON.stringify(e).slice(0, 300));
    assert.ok(tau2Lines(result.tau2!).some((l) => /airline/.test(l)));
    // the run's report reads the summary from S3: a τ²-Bench section beside BFCL's
    const report = renderReport(await collectReport(store, cfg.run.id, { stages: [] }));
    assert.match(report, /<section id="tau2">[\s\S]*airline[\s\S]*retail[\s\S]*<\/section>/);
  } finally {
    for (const w of workers) await w.kill('SIGTERM');
    await client.connection.close();
  }
});
