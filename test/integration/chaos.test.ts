/**
 * Chaos, small scale: a whole pipeline (LLM filter and LLM judge on a fake endpoint) on dedicated servers while a
 * driver SIGKILLs a random worker process (workflows, api or gpu) every 15–30 RL steps' worth of progress and starts
 * it again, and kills and restarts the Temporal server and MinIO once each. The events come at points of the run's
 * progress drawn from the seed (test/helpers/chaosSchedule.ts), so CM2_CHAOS_SEED replays a schedule. The run
 * finishes with the final weights of an undisturbed run (after every RL step), the same stage results, and no LLM
 * answer paid twice: every request is answered no more often than in the undisturbed run.
 *
 * The drill (test/helpers/chaos.ts) checks and reports: pass or fail, it prints the report folder
 * ($CM2_CHAOS_REPORT_DIR, default ~/.cache/cm2/chaos-reports/<seed>-<time>/: report.md, events, progress, Temporal
 * histories, worker logs) and, on failure, the report itself. bench/chaos.ts runs it longer, with repeated server restarts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runChaos } from '../helpers/chaos';

// CI scale: 60 RL steps (about 2 × 220 s on the CI machine; 100 steps took 2 × 320 s), enough for every seed to draw
// at least two worker kills and both server restarts (test/unit/helpers/chaosSchedule.test.ts checks that for 2,000
// seeds). CM2_CHAOS_STEPS runs it longer (bench/chaos.ts and bench/chaos-series.ts are the bench versions).
const STEPS = Number(process.env['CM2_CHAOS_STEPS'] ?? 60);
// The runner stops a test file after CM2_TEST_TIMEOUT_MIN (scripts/run-tests.mjs): a hang is reported a minute before.
const TIMEOUT_MS = Number(process.env['CM2_TEST_TIMEOUT_MIN'] ?? 15) * 60_000;
const startedAt = Date.now();

test('chaos: random worker SIGKILLs, a Temporal and a MinIO restart — the run ends with an undisturbed run\'s weights and no LLM answer paid twice', async () => {
  const seed = Number(process.env['CM2_CHAOS_SEED'] ?? Math.floor(Math.random() * 2 ** 31));
  console.log(`chaos seed ${seed} (CM2_CHAOS_SEED=${seed} repeats the schedule)`);
  const r = await runChaos({ steps: STEPS, seed, expect: { restartsEach: 1, minKills: 2 }, deadline: startedAt + TIMEOUT_MS - 90_000, log: (l) => console.log(l) });
  assert.deepEqual(r.failures, [], `chaos seed ${seed} failed; report ${r.dir}/report.md:\n${r.text}`);
});
