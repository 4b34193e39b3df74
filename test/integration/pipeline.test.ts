/**
 * The whole offline pipeline at small scale against the real servers, driven through the `cm2` CLI as a user would:
 * run → pause / unpause / stop during RL → resume → status (table and JSON) → logs → report; and a second resume of
 * the finished run that re-enters without redoing any stage.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { pipelineWorkflowId } from '../../src/cli/stages';
import { connectClient } from '../../src/infra/temporal';
import { evalKeys, runKey } from '../../src/run/layout';
import { BfclResults } from '../../src/stages/eval/bfcl/score';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { cm2, tinyPipeline } from '../helpers/pipelineFixture';
import { startChildWorker, writeConfigFile } from '../helpers/processes';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const StatusJson = z.object({
  runId: z.string(),
  pipeline: z.object({ status: z.string(), state: z.string().optional() }).nullable(),
  stages: z.array(z.object({ name: z.string(), state: z.string(), summary: z.record(z.string(), z.union([z.number(), z.string()])) })),
  heldOut: z.object({
    sft: z.number().nullable(),
    rl: z.number().nullable(),
    rlStep: z.number().nullable(),
    prompts: z.number().nullable(),
    evals: z.array(z.object({ step: z.number(), mean: z.number(), n: z.number().nullable() })),
  }),
  reportKey: z.string().optional(),
});

test('cm2 run → pause/unpause/stop in RL → resume → status, logs, report; a finished run re-enters without redoing a stage', async () => {
  // Enough RL steps for the pause and the stop to land before RL ends (a step of the tiny policy takes a second or two
  // on the native backend).
  const STEPS = 12;
  const cfg = testConfig(uniqueId('pipe'), tinyPipeline({ rlSteps: STEPS }));
  const runId = cfg.run.id;
  const file = writeConfigFile(cfg);
  const store = testStore(cfg);
  const client = await connectClient(cfg);
  const worker = await startChildWorker(file);
  const status = async () => {
    const r = await cm2(['status', runId, '--config', file, '--json']);
    assert.equal(r.code, 0, r.out);
    return StatusJson.parse(JSON.parse(r.out));
  };
  try {
    const started = await cm2(['run', '--config', file, '--no-wait']);
    assert.equal(started.code, 0, started.out);
    assert.match(started.out, new RegExp(`workflow ${pipelineWorkflowId(runId)}`));
    assert.ok(await store.exists(runKey(runId, 'pipeline', 'input.json')), 'the input is recorded for `cm2 resume`');

    // Wait for the RL stage, then steer it through the pipeline.
    for (let i = 0; ; i++) {
      const s = await status();
      if (s.stages.find((x) => x.name === 'rl')?.state === 'running') break;
      assert.ok(!s.stages.some((x) => x.state === 'failed'), JSON.stringify(s));
      assert.ok(i < 600, 'the RL stage starts');
      await sleep(1000);
    }
    assert.equal((await cm2(['pause', runId, '--config', file])).code, 0);
    for (let i = 0; ; i++) {
      const s = await status();
      if (s.stages.find((x) => x.name === 'rl')?.state === 'paused' && s.pipeline?.state === 'paused') break;
      assert.ok(i < 60, `paused: ${JSON.stringify(s)}`);
      await sleep(500);
    }
    assert.equal((await cm2(['unpause', runId, '--config', file])).code, 0);
    assert.equal((await cm2(['stop', runId, '--config', file])).code, 0);
    const stopped = await client.workflow.getHandle(pipelineWorkflowId(runId)).result();
    assert.equal(stopped.state, 'stopped');
    let s = await status();
    assert.deepEqual(s.stages.map((x) => [x.name, x.state]), [['prepare', 'completed'], ['checklist', 'completed'], ['sft', 'completed'], ['rl', 'stopped'], ['eval', 'pending']]);
    const stepsAtStop = Number(s.stages[3]!.summary['steps']);
    assert.ok(stepsAtStop < STEPS, `stopped early (${stepsAtStop} steps)`);

    // Resume: the finished stages are skipped, RL continues to the end.
    const resumed = await cm2(['resume', runId, '--config', file]);
    assert.equal(resumed.code, 0, resumed.out);
    assert.match(resumed.out, /prepare skipped \(finished earlier\)/);
    assert.match(resumed.out, /report: .*report\.html/);
    s = await status();
    assert.equal(s.pipeline?.status, 'COMPLETED');
    assert.deepEqual(s.stages.map((x) => x.state), ['completed', 'completed', 'completed', 'completed', 'completed']);
    // BFCL accuracy of both policies (the tiny policies score what they score; the stage must run and report): an
    // accuracy in [0, 1] over every example asked for (2 categories × limit 2), as the results file in S3 records it.
    const unit = (v: unknown, what: string) => assert.ok(typeof v === 'number' && Number.isFinite(v) && v >= 0 && v <= 1, `${what}: ${String(v)}`);
    const bfclCfg = cfg.eval.bfcl;
    for (const label of ['sft', 'rl']) {
      const accuracy = s.stages[4]!.summary[`bfcl_${label}`];
      unit(accuracy, `BFCL accuracy of the ${label} policy`);
      const res = await store.getJson(evalKeys.bfcl(runId, label), BfclResults);
      assert.deepEqual(Object.keys(res.categories), bfclCfg.categories, `${label}: every category evaluated`);
      for (const [c, r] of Object.entries(res.categories)) assert.equal(r.total, bfclCfg.limit, `${label}/${c}: ${JSON.stringify(r)}`);
      assert.equal(res.overall.total, bfclCfg.categories.length * bfclCfg.limit!, `${label}: ${JSON.stringify(res.overall)}`);
      assert.equal(res.examples.length, res.overall.total);
      assert.equal(res.overall.correct, res.examples.filter((e) => e.valid).length);
      assert.equal(accuracy, res.overall.accuracy, `${label}: the status reports the results file's accuracy`);
    }
    assert.equal(s.stages[3]!.summary['steps'], STEPS);
    // Held-out mean checklist rewards (each in [0, 1]) of the SFT policy (step 0) and the latest RL policy, over the
    // configured held-out prompts; an evaluation every `rl.eval.every` steps from 0 to the end. (The stopped run
    // evaluated the step it stopped at too, but the resumed RL stage goes through its steps again from 0, each from
    // what S3 holds, and its metrics rows replace those from that step on: that evaluation is not among them.)
    unit(s.heldOut.sft, 'held-out reward of the SFT policy');
    unit(s.heldOut.rl, 'held-out reward of the latest RL policy');
    assert.equal(s.heldOut.rlStep, STEPS);
    assert.equal(s.heldOut.prompts, cfg.rl.eval.prompts);
    const every = cfg.rl.eval.every;
    const evalSteps = new Set([...Array.from({ length: Math.floor(STEPS / every) + 1 }, (_, i) => i * every), STEPS]);
    assert.deepEqual(s.heldOut.evals.map((e) => e.step), [...evalSteps].sort((a, b) => a - b));
    for (const e of s.heldOut.evals) {
      unit(e.mean, `held-out reward at step ${e.step}`);
      assert.equal(e.n, cfg.rl.eval.prompts, `step ${e.step}: ${JSON.stringify(e)}`);
    }
    assert.ok(s.reportKey, 'the pipeline wrote its report to S3');
    // Every RL step exactly once in the metrics, despite the stop and the resume.
    const rows = (await store.getText(runKey(runId, 'rl', 'metrics.jsonl'))).split('\n').filter(Boolean).map((l) => JSON.parse(l) as { kind: string; step: number });
    assert.deepEqual(rows.filter((r) => r.kind === 'step').map((r) => r.step), Array.from({ length: STEPS }, (_, i) => i + 1));

    // Human-readable status, logs and the report.
    const table = await cm2(['status', runId, '--config', file]);
    assert.match(table.out, /prepare\s+completed/);
    assert.match(table.out, new RegExp(`held-out mean checklist reward: SFT \\d\\.\\d{4}( ± \\d\\.\\d{4})?\\s+→\\s+RL \\d\\.\\d{4}( ± \\d\\.\\d{4})? \\(step ${STEPS}[;)]`));
    const list = await cm2(['status', '--config', file]);
    assert.match(list.out, new RegExp(`${runId}\\s+completed`));
    // The held-out rewards from the pipeline's memo (patch `pipeline-heldout-memo`), without a query per run.
    assert.match(list.out, new RegExp(`${runId}\\s+completed.*\\d\\.\\d{4} → \\d\\.\\d{4}`));
    const logs = await cm2(['logs', runId, '--config', file]);
    assert.equal(logs.code, 0, logs.out);
    for (const want of [/pipeline\s+signal pause/, /pipeline\s+signal stop/, /stage cm2-.*-rl completed/, /rl\s+signal stop/, /sft\s+sftTrain done/]) assert.match(logs.out, want);
    const out = path.join(mkdtempSync(path.join(tmpdir(), 'cm2-report-')), 'r.html');
    const rep = await cm2(['report', runId, '--config', file, '--out', out]);
    assert.equal(rep.code, 0, rep.out);
    const html = readFileSync(out, 'utf8');
    assert.ok(html.startsWith('<!DOCTYPE html>') || html.startsWith('<!doctype html>'));
    assert.ok((html.match(/<svg/g) ?? []).length >= 4, 'plots');
    assert.match(html, /BFCL/);
    assert.ok(existsSync(out.replace(/\.html$/, '.json')));

    // A second resume of the finished run redoes nothing: no stage workflow runs again.
    const executions = async (stage: string) => {
      let n = 0;
      for await (const _ of client.workflow.list({ query: `WorkflowId = "cm2-${runId}-${stage}"` })) n++;
      return n;
    };
    const stagesRun = ['prepare', 'checklist', 'sft', 'rl', 'eval'];
    const before = await Promise.all(stagesRun.map(executions));
    assert.ok(before.every((n) => n >= 1), `every stage ran: ${JSON.stringify(before)}`);
    const again = await cm2(['resume', runId, '--config', file]);
    assert.equal(again.code, 0, again.out);
    assert.match(again.out, /eval skipped/);
    assert.deepEqual(await Promise.all(stagesRun.map(executions)), before);
  } finally {
    await worker.kill('SIGTERM');
  }
});

test('cm2 status, resume and logs say clearly what is wrong when the servers are not running', async () => {
  const cfg = testConfig(uniqueId('down'), { temporal: { address: '127.0.0.1:1' }, s3: { endpoint: 'http://127.0.0.1:1' } });
  const file = writeConfigFile(cfg);
  const r = await cm2(['status', '--config', file], { TEMPORAL_ADDRESS: '127.0.0.1:1', CM2_S3_ENDPOINT: 'http://127.0.0.1:1' });
  assert.equal(r.code, 2, r.out);
  assert.match(r.out, /Temporal server is not reachable at 127\.0\.0\.1:1/);
  assert.match(r.out, /cm2 infra up/);
});
