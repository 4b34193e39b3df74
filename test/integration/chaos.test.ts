/**
 * Chaos, small scale: a whole pipeline (LLM filter and LLM judge on a fake endpoint) on dedicated servers while a
 * driver SIGKILLs a random worker process (workflows, api or gpu) every 20–40 s and starts it again, and kills and
 * restarts the Temporal server and MinIO once each at random moments. The run finishes with the final weights of an
 * undisturbed run (after every RL step), the same stage results, and no LLM answer paid twice: every request is
 * answered no more often than in the undisturbed run. The driver's seed is printed (CM2_CHAOS_SEED repeats it).
 * The drill itself is test/helpers/chaos.ts; bench/chaos.ts runs it longer, with repeated server restarts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runChaos } from '../helpers/chaos';

// CI scale; CM2_CHAOS_STEPS runs it longer (bench/chaos.ts is the bench version).
const STEPS = Number(process.env['CM2_CHAOS_STEPS'] ?? 100);

test('chaos: random worker SIGKILLs, a Temporal and a MinIO restart — the run ends with an undisturbed run\'s weights and no LLM answer paid twice', async () => {
  const seed = Number(process.env['CM2_CHAOS_SEED'] ?? Math.floor(Math.random() * 2 ** 31));
  console.log(`chaos seed ${seed} (CM2_CHAOS_SEED=${seed} repeats the schedule)`);
  const r = await runChaos({ steps: STEPS, seed, log: (l) => console.log(l) });
  const events = r.events.join('; ');
  assert.equal(r.reference.state, 'completed');
  assert.ok(r.temporalRestarts === 1 && r.minioRestarts === 1 && r.kills.workflows + r.kills.api + r.kills.gpu >= 2, `the run outlived the schedule: ${events}`);
  assert.equal(r.result.state, 'completed');
  assert.deepEqual(r.stages.chaos, r.stages.reference, 'the same stage results as the undisturbed run');
  assert.equal(r.weights.chaos.length, STEPS);
  assert.deepEqual(r.weights.chaos, r.weights.reference, 'the same weights after every RL step');
  assert.ok(r.answered > 0);
  assert.deepEqual(r.paidTwice, [], 'LLM answers paid twice');
});
