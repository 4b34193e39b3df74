/**
 * Chaos, the longer version (issue 16): the drill of test/integration/chaos.test.ts (test/helpers/chaos.ts) with
 * many RL steps, and the Temporal server and MinIO killed and restarted again and again, not once. A whole pipeline
 * (LLM filter and LLM judge on a fake endpoint, RL with continue-as-new every 2 steps) runs undisturbed on servers of
 * its own, then on a second pair of servers while a seeded driver SIGKILLs a random worker process (workflows, api,
 * gpu) every 20–40 s and starts it again, and kills Temporal and MinIO about every `--server-every` seconds each.
 * Pass: the run completes with the same stage results and the same weights after every RL step as the undisturbed
 * run, and no LLM request is answered more often than in it (nothing paid twice).
 *
 *   npx tsx bench/chaos.ts [--steps 400] [--seed N] [--server-every 300] [--kill-min 20] [--kill-max 40] [--out chaos.json]
 *
 * Prints the events, the checks, and a row for the Chaos table in bench/README.md; exits 1 when a check fails.
 * Needs the `temporal` and `minio` binaries (`CM2_TEMPORAL_BIN`, `CM2_MINIO_BIN`, or those `npm test` installs).
 */
import { writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { isDeepStrictEqual, parseArgs } from 'node:util';
import { startDedicatedServers } from '../test/helpers/dedicatedServers';
import { runChaos } from '../test/helpers/chaos';

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      steps: { type: 'string', default: '400' },
      seed: { type: 'string' },
      'server-every': { type: 'string', default: '300' },
      'kill-min': { type: 'string', default: '20' },
      'kill-max': { type: 'string', default: '40' },
      out: { type: 'string' },
    },
  });
  const steps = Number(values.steps);
  const seed = values.seed !== undefined ? Number(values.seed) : Math.floor(Math.random() * 2 ** 31);
  console.log(`chaos bench: ${steps} RL steps, seed ${seed}, servers restarted about every ${values['server-every']} s, a worker killed every ${values['kill-min']}–${values['kill-max']} s`);

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
      serverEverySec: Number(values['server-every']),
      killEverySec: [Number(values['kill-min']), Number(values['kill-max'])],
      log: (l) => console.log(`[${((Date.now() - began) / 1000).toFixed(0)}s] ${l}`),
    });
    const checks = {
      completed: r.reference.state === 'completed' && r.result.state === 'completed',
      sameStages: isDeepStrictEqual(r.stages.chaos, r.stages.reference),
      sameWeightsEveryStep: r.weights.chaos.length === steps && isDeepStrictEqual(r.weights.chaos, r.weights.reference),
      nothingPaidTwice: r.answered > 0 && r.paidTwice.length === 0,
    };
    const kills = r.kills.workflows + r.kills.api + r.kills.gpu;
    const load = loads.length ? `${Math.min(...loads).toFixed(1)}–${Math.max(...loads).toFixed(1)}` : 'n/a';
    console.log(`\nchecks: ${JSON.stringify(checks)}`);
    if (r.paidTwice.length) console.log(`paid twice:\n  ${r.paidTwice.slice(0, 20).join('\n  ')}`);
    console.log(`undisturbed ${r.undisturbedSeconds.toFixed(0)} s; under chaos ${r.chaosSeconds.toFixed(0)} s; ${kills} worker kills (workflows ${r.kills.workflows}, api ${r.kills.api}, gpu ${r.kills.gpu}); Temporal ${r.temporalRestarts}×, MinIO ${r.minioRestarts}×; ${r.answered} distinct LLM requests; load ${load} on ${cpus().length} cores`);
    const pass = Object.values(checks).every(Boolean);
    console.log(`\n| ${new Date().toISOString().slice(0, 10)}, ${cpus()[0]?.model.trim()} ${cpus().length} cores, load ${load} | ${steps} | ${r.undisturbedSeconds.toFixed(0)} s | ${r.chaosSeconds.toFixed(0)} s | Temporal ${r.temporalRestarts}×, MinIO ${r.minioRestarts}×, ${kills} worker kills (workflows ${r.kills.workflows}, api ${r.kills.api}, gpu ${r.kills.gpu}) | ${pass ? 'pass' : 'FAIL'} (seed ${seed}) |`);
    if (values.out) writeFileSync(values.out, JSON.stringify({ seed, steps, checks, load: loads, undisturbedSeconds: r.undisturbedSeconds, chaosSeconds: r.chaosSeconds, events: r.events, kills: r.kills, temporalRestarts: r.temporalRestarts, minioRestarts: r.minioRestarts, answered: r.answered, paidTwice: r.paidTwice }, null, 2));
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
