/**
 * Chaos, the longer version (issue 16): the drill of test/integration/chaos.test.ts (test/helpers/chaos.ts) with
 * many RL steps, and the Temporal server and MinIO killed and restarted again and again, not once. A whole pipeline
 * (LLM filter and LLM judge on a fake endpoint, RL with continue-as-new every 2 steps) runs undisturbed on servers of
 * its own, then on a second pair of servers while a seeded driver SIGKILLs a random worker process (workflows, api,
 * gpu) and starts it again, and kills Temporal and MinIO again and again. Pass: the run completes with the same
 * stage results and the same weights after every RL step as the undisturbed run, and no LLM request is answered more
 * often than in it (nothing paid twice).
 *
 * The events come at points of the run's progress drawn from the seed (test/helpers/chaosSchedule.ts), so a seed
 * replays: a worker killed every `--kill-min`–`--kill-max` RL steps, each server restarted about every
 * `--server-every` RL steps (±25 %). `--clock wall` reads the three as seconds instead (the former schedule).
 *
 *   npx tsx bench/chaos.ts [--steps 400] [--seed N] [--server-every 150] [--kill-min 15] [--kill-max 30] [--clock progress|wall] [--out chaos.json]
 *
 * The report folder ($CM2_CHAOS_REPORT_DIR, default ~/.cache/cm2/chaos-reports/<seed>-<time>/) is printed.

 * Prints the events, the checks, and a row for the Chaos table in bench/README.md; exits 1 when a check fails.
 * Needs the `temporal` and `minio` binaries (`CM2_TEMPORAL_BIN`, `CM2_MINIO_BIN`, or those `npm test` installs).
 */
import { writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { isDeepStrictEqual, parseArgs } from 'node:util';
import { startDedicatedServers } from '../test/helpers/dedicatedServers';
import { runChaos, type ChaosSchedule } from '../test/helpers/chaos';

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      steps: { type: 'string', default: '400' },
      seed: { type: 'string' },
      'server-every': { type: 'string' },
      'kill-min': { type: 'string' },
      'kill-max': { type: 'string' },
      clock: { type: 'string', default: 'progress' },
      out: { type: 'string' },
    },
  });
  const steps = Number(values.steps);
  const seed = values.seed !== undefined ? Number(values.seed) : Math.floor(Math.random() * 2 ** 31);
  const wall = values.clock === 'wall';
  if (!wall && values.clock !== 'progress') throw new Error(`--clock is progress or wall, not ${values.clock}`);
  const unit = wall ? 's' : 'RL steps';
  const [serverEvery, killMin, killMax] = [values['server-every'] ?? (wall ? '300' : '150'), values['kill-min'] ?? (wall ? '20' : '15'), values['kill-max'] ?? (wall ? '40' : '30')].map(Number) as [number, number, number];
  const schedule: ChaosSchedule = wall ? { clock: 'wall', killEverySec: [killMin, killMax], serverEverySec: serverEvery } : { clock: 'progress', killEverySteps: [killMin, killMax], serverEverySteps: serverEvery };
  console.log(`chaos bench: ${steps} RL steps, seed ${seed}, servers restarted about every ${serverEvery} ${unit}, a worker killed every ${killMin}–${killMax} ${unit}`);

  // The undisturbed run's servers (the drill starts the disturbed run's own pair).
  const reference = await startDedicatedServers('chaos-ref');
  Object.assign(process.env, reference.env);
  const loads: number[] = [];
  const sampler = setInterval(() => loads.push(loadavg()[0]!), 10_000);
  const began = Date.now();
  try {
    const r = await runChaos({
      steps,
      seed,
      schedule,
      // A bench run may take hours: a hang is one 4 h past the undisturbed run's time.
      deadline: Date.now() + 4 * 3600_000,
      log: (l) => console.log(`[${((Date.now() - began) / 1000).toFixed(0)}s] ${l}`),
    });
    const checks = {
      completed: r.reference?.state === 'completed' && r.result?.state === 'completed',
      sameStages: r.result !== undefined && isDeepStrictEqual(r.stages.chaos, r.stages.reference),
      sameWeightsEveryStep: r.weights.chaos.length === steps && isDeepStrictEqual(r.weights.chaos, r.weights.reference),
      nothingPaidTwice: r.answered > 0 && r.paidTwice.length === 0,
      noOtherFailure: r.failures.length === 0,
    };
    const kills = r.kills.workflows + r.kills.api + r.kills.gpu;
    const load = loads.length ? `${Math.min(...loads).toFixed(1)}–${Math.max(...loads).toFixed(1)}` : 'n/a';
    console.log(`\nchecks: ${JSON.stringify(checks)}`);
    if (r.paidTwice.length) console.log(`paid twice:\n  ${r.paidTwice.slice(0, 20).join('\n  ')}`);
    console.log(`undisturbed ${r.undisturbedSeconds?.toFixed(0)} s; under chaos ${r.chaosSeconds?.toFixed(0)} s; ${kills} worker kills (workflows ${r.kills.workflows}, api ${r.kills.api}, gpu ${r.kills.gpu}); Temporal ${r.temporalRestarts}×, MinIO ${r.minioRestarts}×; ${r.answered} distinct LLM requests; load ${load} on ${cpus().length} cores`);
    const pass = Object.values(checks).every(Boolean);
    console.log(`\n| ${new Date().toISOString().slice(0, 10)}, ${cpus()[0]?.model.trim()} ${cpus().length} cores, load ${load} | ${steps} | ${r.undisturbedSeconds?.toFixed(0)} s | ${r.chaosSeconds?.toFixed(0)} s | Temporal ${r.temporalRestarts}×, MinIO ${r.minioRestarts}×, ${kills} worker kills (workflows ${r.kills.workflows}, api ${r.kills.api}, gpu ${r.kills.gpu}) | ${pass ? 'pass' : 'FAIL'} (seed ${seed}) |`);
    if (values.out) writeFileSync(values.out, JSON.stringify({ seed, steps, checks, load: loads, undisturbedSeconds: r.undisturbedSeconds, chaosSeconds: r.chaosSeconds, events: r.events, kills: r.kills, temporalRestarts: r.temporalRestarts, minioRestarts: r.minioRestarts, answered: r.answered, paidTwice: r.paidTwice, failures: r.failures, report: r.dir }, null, 2));
    process.exitCode = pass ? 0 : 1;
  } finally {
    clearInterval(sampler);
    await reference.stop();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
