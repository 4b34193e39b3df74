/**
 * Every way out of `cm2 demo` stops what it started, on its own local infrastructure (a Temporal dev server and MinIO
 * on free ports in a temp folder, as a fresh clone would start them):
 *
 * 1. SIGTERM to `npm run demo` in the middle of SFT (what `kill`, systemd and `docker stop` send): the demo exits
 *    within a bounded time like Ctrl-C, and its workers, the gpu worker child and both servers are gone;
 * 2. SIGKILL of the demo (nothing can clean up): the gpu worker child notices its parent's death and exits; the
 *    servers stay up;
 * 3. the next `cm2 demo` adopts the servers the killed demo left, resumes the run to completion, and stops them.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { freePort, isAlive, readInfraState, stopInfra } from '../../src/infra/localInfra';
import { testConfig, uniqueId } from '../helpers/env';
import { allGone, startDemo } from '../helpers/demoProcess';
import { tinyPipeline } from '../helpers/pipelineFixture';
import { writeConfigFile } from '../helpers/processes';

/** Bound on how long SIGTERM may take to stop everything (it typically takes a few seconds). */
const STOP_BOUND_MS = 60_000;

test('SIGTERM mid-SFT stops the demo and everything it started; after a SIGKILL the gpu worker exits by itself; the next demo resumes, completes and stops the servers', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'cm2-demo-infra-'));
  const over = tinyPipeline({ rlSteps: 1 });
  // Enough SFT that what is left after step 10 outlasts the gpu worker's 10 s shutdown grace on any machine: an
  // in-flight step loop may finish the stage within the grace (it did at 150 steps once training ran as graph runs).
  const cfg = testConfig(uniqueId('dterm'), { ...over, sft: { ...over.sft, epochs: 200, checkpointEvery: 5 }, eval: { enabled: false } });
  const runId = cfg.run.id;
  const file = writeConfigFile(cfg);
  // The demo's own servers: no addresses or credentials from the test runner's servers.
  const env = {
    CM2_INFRA_DIR: dir,
    CM2_TEMPORAL_PORT: String(await freePort()),
    CM2_TEMPORAL_UI_PORT: String(await freePort()),
    CM2_MINIO_PORT: String(await freePort()),
    CM2_MINIO_CONSOLE_PORT: String(await freePort()),
    TEMPORAL_ADDRESS: undefined,
    CM2_TEMPORAL_UI_URL: undefined,
    CM2_S3_ENDPOINT: undefined,
    CM2_S3_ACCESS_KEY: undefined,
    CM2_S3_SECRET_KEY: undefined,
  };
  const keep = (name: string, text: string) => process.env['CM2_TEST_KEEP_OUTPUT'] && writeFileSync(`${process.env['CM2_TEST_KEEP_OUTPUT']}/${name}.txt`, text);
  const demos: ReturnType<typeof startDemo>[] = [];
  try {
    // 1. SIGTERM to `npm run demo` while the gpu worker trains (npm forwards it to the demo).
    const first = startDemo(file, runId, env, [], { viaNpm: true });
    demos.push(first);
    await first.waitFor(/Temporal dev server: 127\.0\.0\.1:\d+/);
    const [, gpuPid] = await first.waitFor(/gpu worker started \(pid (\d+)\)/);
    await first.waitFor(/gpu worker: \[sft [^\]]+\] step 10\//);
    const servers = readInfraState(dir)!;
    const demoPid = servers.owner?.pid;
    assert.ok(demoPid !== undefined && isAlive(demoPid), 'the demo recorded that it owns the servers');
    const sentAt = Date.now();
    first.proc.kill('SIGTERM');
    const ex = await first.exited;
    keep('demoSigterm-1', `${first.output()}\n[test] npm exited ${ex.at - sentAt} ms after SIGTERM (code ${ex.code}, signal ${ex.signal})\n`);
    assert.notEqual(ex.code, 0, first.output());
    assert.ok(ex.at - sentAt < STOP_BOUND_MS, `stopped in ${ex.at - sentAt} ms`);
    assert.match(first.output(), new RegExp(`SIGTERM received: stopping the workers and what else the demo started; run "${runId}" is kept`));
    // It waited for them: gone when it exited (a little slack for the kernel to reap).
    await allGone([demoPid, Number(gpuPid), servers.temporal.pid, servers.minio.pid], 5_000);

    // 2. SIGKILL: no cleanup possible; the child worker must not outlive its parent.
    const second = startDemo(file, runId, env);
    demos.push(second);
    const [, gpu2] = await second.waitFor(/gpu worker started \(pid (\d+)\)/);
    await second.waitFor(/gpu worker: \[sft [^\]]+\] (resumed from checkpoint|step \d+\/)/);
    const servers2 = readInfraState(dir)!;
    second.proc.kill('SIGKILL');
    await second.exited;
    keep('demoSigterm-2', second.output());
    await allGone([Number(gpu2)], 45_000);
    assert.ok(isAlive(servers2.temporal.pid) && isAlive(servers2.minio.pid), 'the servers outlive a SIGKILLed demo');

    // 3. The next demo adopts the orphaned servers, finishes the run and stops them.
    const third = startDemo(file, runId, env);
    demos.push(third);
    const ex3 = await third.exited;
    const out3 = third.output();
    keep('demoSigterm-3', out3);
    assert.equal(ex3.code, 0, out3);
    assert.match(out3, new RegExp(`left running by a \`cm2 demo\` \\(pid ${second.proc.pid}\\) that is gone: this demo stops them at its end`));
    assert.match(out3, /✓ sft completed[^\n]*steps=500/);
    // Resumed, not redone from scratch: the SFT attempt that finished started from a checkpoint (every 5 steps; the
    // first demo had shown step 10, so the one at step 5 at least was complete).
    const resumed = /gpu worker: \[sft [^\]]+\] resumed from checkpoint step (\d+)\/500/.exec(out3);
    assert.ok(resumed && Number(resumed[1]) >= 5, `the third demo's SFT resumed from a checkpoint: ${resumed?.[0] ?? 'no "resumed from checkpoint" line'}`);
    assert.match(out3, new RegExp(`run ${runId}: completed`));
    assert.match(out3, /the local Temporal server and MinIO were stopped/);
    await allGone([servers2.temporal.pid, servers2.minio.pid, ...third.gpuPids()], 5_000);
  } finally {
    for (const d of demos) if (d.proc.exitCode === null && d.proc.signalCode === null) d.proc.kill('SIGKILL');
    await stopInfra(dir).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
});
