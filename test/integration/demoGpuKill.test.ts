/**
 * The gpu worker that `cm2 demo` starts is SIGKILLed in the middle of SFT (what an out-of-memory kill does). The demo
 * says so and restarts it after a back-off (held long here by an injected slow recovery, so the progress line has to
 * report the queue nobody polls and the retrying `sftTrain`); SFT resumes from its last checkpoint and the run
 * completes with every planned step, leaving no worker behind.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { z } from 'zod';

import { connectClient } from '../../src/infra/temporal';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { allGone, eventually, startDemo } from '../helpers/demoProcess';
import { cm2, tinyPipeline } from '../helpers/pipelineFixture';
import { writeConfigFile } from '../helpers/processes';
import { sftKeys, stageWorkflowId } from '../../src/run/layout';
import { SftTrainResult } from '../../src/stages/sft/shapes';

const Status = z.object({ stages: z.array(z.object({ name: z.string(), state: z.string(), summary: z.record(z.string(), z.union([z.number(), z.string()])) })) });

test('the gpu worker SIGKILLed during SFT is restarted with a message; the progress line shows the wait and the retry; the run completes', async () => {
  const over = tinyPipeline({ rlSteps: 1 });
  // SFT long enough to be killed in the middle, checkpoints every 5 steps. The server sees heartbeat details only
  // every 0.8 × heartbeatTimeout (8 s, the SDK's throttle), so SFT must outlast that by far: about 1,000 steps of the
  // tiny policy (150 steps took 5 s on a quiet machine, too short to ever show step 6 to the server).
  const cfg = testConfig(uniqueId('dgpu'), { ...over, sft: { ...over.sft, epochs: 400, checkpointEvery: 5 }, eval: { enabled: false } });
  const runId = cfg.run.id;
  const file = writeConfigFile(cfg);
  const client = await connectClient(cfg);
  const demo = startDemo(file, runId, { CM2_INFRA_DIR: process.env['CM2_TEST_INFRA_DIR'], CM2_FAULT_INJECT: 'restart-delay:60000' });
  try {
    const [, pid] = await demo.waitFor(/gpu worker started \(pid (\d+)\)/);
    // Training is under way: sftTrain runs and has heartbeated a few steps.
    let stepSeen = 0;
    await eventually('sftTrain past step 5', async () => {
      const pending = (await client.workflow.getHandle(stageWorkflowId(runId, 'sft')).describe()).raw.pendingActivities ?? [];
      const train = pending.find((p) => p.activityType?.name === 'sftTrain');
      const data = train?.heartbeatDetails?.payloads?.[0]?.data;
      const step = data ? Number((JSON.parse(Buffer.from(data).toString()) as { step?: number }).step) : 0;
      stepSeen = step;
      return step >= 6 ? true : undefined;
    }, 600_000, 100);
    process.kill(Number(pid), 'SIGKILL');

    await demo.waitFor(/the gpu worker \(pid \d+\) was killed by SIGKILL \(an out-of-memory kill looks like this\); restarting it in 60s \(restart 1\)/, 30_000);
    // While nobody runs the gpu queue: the retried activity waits, and the line says for whom.
    const [note] = await demo.waitFor(new RegExp(`sftTrain attempt 2, last failure: [^\\n]*waiting \\S+: no worker polling ${cfg.temporal.taskQueues.gpu}`), 120_000);
    assert.ok(note);
    await demo.waitFor(/gpu worker restarted \(pid \d+\); the interrupted activity is retried from its last checkpoint/, 120_000);
    const ex = await demo.exited;
    const out = demo.output();
    if (process.env['CM2_TEST_KEEP_OUTPUT']) writeFileSync(`${process.env['CM2_TEST_KEEP_OUTPUT']}/demoGpuKill.txt`, out);
    assert.equal(ex.code, 0, out);
    assert.match(out, /! sftTrain attempt 2, last failure: activity Heartbeat timeout/);
    assert.match(out, new RegExp(`run ${runId}: completed`));
    assert.equal(demo.gpuPids().length, 2);
    await allGone(demo.gpuPids(), 30_000);

    // Nothing lost: SFT did every planned step (resumed from its checkpoint, not from scratch, not short).
    const status = Status.parse(JSON.parse((await cm2(['status', runId, '--config', file, '--json'])).out));
    const sft = status.stages.find((s) => s.name === 'sft')!;
    assert.equal(sft.state, 'completed');
    const planned = Number(/(\d+) steps on /.exec(out)?.[1]);
    assert.ok(Number.isInteger(planned) && planned > stepSeen, `planned ${planned} steps, ${stepSeen} seen before the kill`);
    assert.equal(sft.summary['steps'], planned);
    // Resumed, not from scratch: the attempt that completed sftTrain was a retry, and it started from the checkpoint
    // saved before the kill (every 5 steps; the server had seen step `stepSeen` done, so the one at
    // ⌊stepSeen / 5⌋ × 5 ≥ 5 was complete), so the steps before it were not trained again.
    const history = await client.workflow.getHandle(stageWorkflowId(runId, 'sft')).fetchHistory();
    const events = history.events ?? [];
    const scheduled = events.find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'sftTrain');
    assert.ok(scheduled, 'sftTrain scheduled');
    const started = events.find((e) => e.activityTaskStartedEventAttributes && String(e.activityTaskStartedEventAttributes.scheduledEventId) === String(scheduled.eventId));
    assert.ok((started?.activityTaskStartedEventAttributes?.attempt ?? 0) >= 2, `sftTrain completed on a retry: ${JSON.stringify(started?.activityTaskStartedEventAttributes?.attempt)}`);
    const train = await testStore(cfg).getJson(sftKeys.trainResult(runId), SftTrainResult);
    const checkpointBeforeKill = Math.floor(stepSeen / 5) * 5;
    assert.ok(train.resumedFrom >= checkpointBeforeKill && train.resumedFrom >= 5 && train.resumedFrom % 5 === 0 && train.resumedFrom < planned,
      `resumed from step ${train.resumedFrom} (checkpoint every 5; step ${stepSeen} seen before the kill; ${planned} planned)`);
    assert.match(out, new RegExp(`resumed from checkpoint step ${train.resumedFrom}/${planned}`));
    assert.equal(train.steps, planned);
    assert.equal(train.losses.length, planned, 'one loss per step: the restored ones and the rest, none twice');
  } finally {
    if (demo.proc.exitCode === null && demo.proc.signalCode === null) demo.proc.kill('SIGKILL');
  }
});
