/**
 * The chaos drill again and again (issue 28: "the chaos test passes 20 runs in a row, 10 beside a CPU-bound process"):
 * the CI test's drill (test/helpers/chaos.ts, at 100 RL steps by default — CI runs 60 — Temporal and MinIO restarted once each, at
 * least 2 worker kills, a new seed each time) run `--runs` times one after the other. The pipeline is deterministic,
 * so the undisturbed run is done once (by the first drill) and every chaos run is checked against it: the same stage
 * results, the same weights after every RL step, nothing paid twice — the test's checks, at half its cost.
 *
 * Each drill appends a line to `--results` (default bench/results/chaos-series.jsonl, committed: a series longer than a
 * session is run in pieces, and the file says what ran where) and prints a row for bench/README.md. With `--hog` a
 * CPU-bound process (`nice -n 5` busy loop, as bench/first-run.sh) runs beside the whole series. `--until-min M` starts
 * no drill after M minutes (a session's end). Exits 1 when a drill failed (the series goes on: every failure is
 * reported, with its report folder).
 *
 *   npx tsx bench/chaos-series.ts [--runs 10] [--hog] [--steps 100] [--until-min 150] [--results FILE]
 *
 * Needs the `temporal` and `minio` binaries (`CM2_TEMPORAL_BIN`, `CM2_MINIO_BIN`, or those `npm test` installs).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, mkdirSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { startDedicatedServers } from '../test/helpers/dedicatedServers';
import { runChaos, type UndisturbedRun } from '../test/helpers/chaos';

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      runs: { type: 'string', default: '10' },
      steps: { type: 'string', default: '100' },
      hog: { type: 'boolean', default: false },
      'until-min': { type: 'string' },
      results: { type: 'string', default: path.join('bench', 'results', 'chaos-series.jsonl') },
    },
  });
  const [runs, steps] = [Number(values.runs), Number(values.steps)];
  const until = values['until-min'] !== undefined ? Date.now() + Number(values['until-min']) * 60_000 : Infinity;
  const machine = `${cpus()[0]?.model.trim()} ${cpus().length} cores`;
  mkdirSync(path.dirname(values.results), { recursive: true });
  console.log(`chaos series: ${runs} drills of ${steps} RL steps${values.hog ? ', a CPU hog beside them' : ''}; results ${values.results}`);

  let hog: ChildProcess | undefined;
  if (values.hog) hog = spawn('nice', ['-n', '5', 'sh', '-c', 'while :; do :; done'], { stdio: 'ignore' });
  const servers: { reference?: Awaited<ReturnType<typeof startDedicatedServers>> } = {};
  // Stopped by a signal (a session's end): the hog and the servers go too.
  let stopping = false;
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.on(sig, () => {
      if (stopping) return;
      stopping = true;
      console.log(`chaos series: ${sig}, stopping (the drill in progress is not recorded)`);
      hog?.kill();
      void (servers.reference?.stop() ?? Promise.resolve()).finally(() => process.exit(130));
    });
  }
  const reference = (servers.reference = await startDedicatedServers('chaos-ref'));
  Object.assign(process.env, reference.env);
  let undisturbed: UndisturbedRun | undefined;
  let failed = 0;
  try {
    for (let i = 1; i <= runs; i++) {
      if (Date.now() > until) {
        console.log(`chaos series: --until-min reached after ${i - 1} drills`);
        break;
      }
      const seed = Math.floor(Math.random() * 2 ** 31);
      const loads: number[] = [];
      const sampler = setInterval(() => loads.push(loadavg()[0]!), 30_000);
      const t0 = Date.now();
      const r = await runChaos({ steps, seed, reference: undisturbed, expect: { restartsEach: 1, minKills: 2 }, log: (l) => console.log(`[${i}/${runs} ${((Date.now() - t0) / 1000).toFixed(0)}s] ${l}`) }).finally(() => clearInterval(sampler));
      undisturbed ??= r.undisturbed;
      const pass = r.failures.length === 0;
      if (!pass) failed++;
      const sorted = [...loads].sort((x, y) => x - y);
      const load = sorted.length ? `${sorted[0]!.toFixed(1)}–${sorted[sorted.length - 1]!.toFixed(1)} (median ${sorted[Math.floor(sorted.length / 2)]!.toFixed(1)})` : 'n/a';
      const kills = `workflows ${r.kills.workflows}, api ${r.kills.api}, gpu ${r.kills.gpu}`;
      const row = {
        date: new Date().toISOString(), machine, hog: values.hog, seed, steps, pass, failures: r.failures,
        seconds: Math.round((Date.now() - t0) / 1000), undisturbedSeconds: r.undisturbedSeconds, ownUndisturbed: !r.referenceFrom,
        chaosSeconds: r.chaosSeconds, kills: r.kills, temporalRestarts: r.temporalRestarts, minioRestarts: r.minioRestarts,
        answered: r.answered, paidTwice: r.paidTwice.length, load: sorted, events: r.events, report: r.dir,
      };
      appendFileSync(values.results, `${JSON.stringify(row)}\n`);
      console.log(`\n| ${row.date.slice(0, 16)} | ${seed} | ${values.hog ? 'CPU hog' : 'no hog'}, load ${load} | ${pass ? 'pass' : `FAIL: ${r.failures.join('; ')}`} | ${r.chaosSeconds?.toFixed(0) ?? '?'} s | ${kills}; Temporal ${r.temporalRestarts}×, MinIO ${r.minioRestarts}× |\n`);
      if (!undisturbed) console.log('chaos series: the undisturbed run did not complete; the next drill runs its own');
    }
  } finally {
    hog?.kill();
    await reference.stop();
  }
  console.log(`chaos series: ${failed} failed`);
  process.exitCode = failed ? 1 : 0;
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
