/**
 * `cm2 demo` survives its own display: with every progress-line update failing (an injected fault standing for the
 * `formatProgress` RangeError of issue 12) the run goes on, and when the CLI then crashes with an uncaught error in
 * the middle of SFT it stops what it started (the in-process workers and the gpu worker child) and exits 1. The run
 * itself lives on in Temporal; `cm2 demo` with the same run id resumes it to completion, with the held-out means and
 * their standard errors in `cm2 status --json`.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod';
import { pipelineWorkflowId } from '../../src/cli/stages';
import { connectClient } from '../../src/infra/temporal';
import { testConfig, uniqueId } from '../helpers/env';
import { allGone, startDemo } from '../helpers/demoProcess';
import { cm2, tinyPipeline } from '../helpers/pipelineFixture';
import { writeConfigFile } from '../helpers/processes';

const HeldOut = z.object({
  heldOut: z.object({ sft: z.number(), sftSe: z.number().nullable(), rl: z.number(), rlSe: z.number().nullable(), prompts: z.number(), evals: z.array(z.object({ step: z.number(), mean: z.number(), se: z.number().nullable(), n: z.number() })) }),
  stages: z.array(z.object({ name: z.string(), state: z.string() })),
});

test('display errors never stop the demo; a CLI crash mid-SFT stops what it started, and `cm2 demo` resumes the run to completion', async () => {
  const cfg = testConfig(uniqueId('dfault'), { ...tinyPipeline({ rlSteps: 1 }), eval: { enabled: false } });
  cfg.rl.eval = { ...cfg.rl.eval, prompts: 3, every: 1 };
  const runId = cfg.run.id;
  const file = writeConfigFile(cfg);
  const infra = { CM2_INFRA_DIR: process.env['CM2_TEST_INFRA_DIR'] };

  const first = startDemo(file, runId, { ...infra, CM2_FAULT_INJECT: 'display-throw,crash-in:sft' });
  await first.waitFor(/progress display failed: RangeError: injected display fault #1/);
  await first.waitFor(/✓ prepare completed/);
  const [, gpuPid] = await first.waitFor(/gpu worker started \(pid (\d+)\)/);
  const ex = await first.exited;
  const out = first.output();
  if (process.env['CM2_TEST_KEEP_OUTPUT']) require('node:fs').writeFileSync(`${process.env['CM2_TEST_KEEP_OUTPUT']}/demoFault-1.txt`, out);
  assert.equal(ex.code, 1, out);
  assert.match(out, /✓ checklist completed/, 'the run went on through the display errors');
  assert.equal(out.match(/progress display failed/g)?.length, 1, 'said once, not once a second');
  assert.match(out, /cm2 demo: uncaught error: Error: injected CLI crash in stage sft/);
  assert.match(out, new RegExp(`npm run demo -- --run ${runId}\` resumes run "${runId}"`));
  await allGone([Number(gpuPid)], 30_000);

  // The run outlives the CLI that crashed.
  const client = await connectClient(cfg);
  assert.equal((await client.workflow.getHandle(pipelineWorkflowId(runId)).describe()).status.name, 'RUNNING');

  const second = startDemo(file, runId, infra);
  const ex2 = await second.exited;
  const out2 = second.output();
  if (process.env['CM2_TEST_KEEP_OUTPUT']) require('node:fs').writeFileSync(`${process.env['CM2_TEST_KEEP_OUTPUT']}/demoFault-2.txt`, out2);
  assert.equal(ex2.code, 0, out2);
  // It attached to the running pipeline (nothing restarted): each stage workflow ran once.
  assert.match(out2, /✓ sft completed/);
  for (const stage of ['prepare', 'checklist', 'sft']) {
    const runs = [];
    for await (const w of client.workflow.list({ query: `WorkflowId = "cm2-${runId}-${stage}"` })) runs.push(w.runId);
    assert.equal(runs.length, 1, `${stage} ran once`);
  }
  assert.match(out2, new RegExp(`run ${runId}: completed`));
  assert.match(out2, /held-out mean checklist reward: SFT \d\.\d{4} (± \d\.\d{4} )?→ RL \d\.\d{4}/);
  assert.match(out2, /report: .*report\.html/);
  assert.doesNotMatch(out2, /progress display failed/);
  await allGone(second.gpuPids(), 30_000);

  const status = await cm2(['status', runId, '--config', file, '--json']);
  assert.equal(status.code, 0, status.out);
  const s = HeldOut.parse(JSON.parse(status.out));
  assert.deepEqual(s.stages.map((x) => x.state), ['completed', 'completed', 'completed', 'completed', 'disabled']);
  assert.equal(s.heldOut.prompts, 3);
  assert.deepEqual(s.heldOut.evals.map((e) => [e.step, e.n]), [[0, 3], [1, 3]]);
  for (const e of s.heldOut.evals) assert.ok(e.se !== null && e.se >= 0, 'a standard error with 3 prompts');
});

test('a run that fails: the demo says how to look and resume, exits 1, and stops what it started', async () => {
  // More cold-start examples than survive filtering: the prepare stage fails at once (BadConfig, not retried).
  const over = tinyPipeline({ rlSteps: 1 });
  const cfg = testConfig(uniqueId('dfail'), { ...over, data: { ...over.data, split: { seed: 42, coldStart: 10_000 } }, eval: { enabled: false } });
  const demo = startDemo(writeConfigFile(cfg), cfg.run.id, { CM2_INFRA_DIR: process.env['CM2_TEST_INFRA_DIR'] });
  const ex = await demo.exited;
  const out = demo.output();
  assert.equal(ex.code, 1, out);
  assert.match(out, /the demo run failed: stage prepare of run \S+ failed[^\n]*\n {2}cause: data\.split\.coldStart asks for 10000 cold-start examples/);
  assert.match(out, new RegExp(`npx cm2 logs ${cfg.run.id}\` shows what happened`));
  assert.match(out, /report: .*report\.html/, 'the report of what exists is still written');
  await allGone(demo.gpuPids(), 30_000);
});
