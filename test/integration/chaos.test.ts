/**
 * Chaos, small scale: a whole pipeline (LLM filter and LLM judge on a fake endpoint) on dedicated servers while a
 * driver SIGKILLs a random worker process (workflows, api or gpu) every 20–40 s and starts it again, and kills and
 * restarts the Temporal server and MinIO once each at random moments. The run finishes with the final weights of an
 * undisturbed run (after every RL step), the same stage results, and no LLM answer paid twice: every request is
 * answered no more often than in the undisturbed run. The driver's seed is printed (CM2_CHAOS_SEED repeats it).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pipelineWorkflowId, startPipeline, pipelineInput } from '../../src/cli/stages';
import { connectClient } from '../../src/infra/temporal';
import { mulberry32 } from '../../src/kernel/rng';
import type { PipelineResult } from '../../src/stages/pipeline/workflow';
import type { Cm2Config } from '../../src/run/config';
import { comparableStages, startDedicatedServers, stepWeights } from '../helpers/dedicatedServers';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { judgeReply, hashVerdict } from '../helpers/fakeJudge';
import { replies, startFakeOpenAI, type FakeOpenAI } from '../helpers/fakeOpenAI';
import { tinyPipeline } from '../helpers/pipelineFixture';
import { startChildWorker, writeConfigFile, type ChildWorker } from '../helpers/processes';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
// CI scale; CM2_CHAOS_STEPS makes the longer bench version (bench/README.md).
const STEPS = Number(process.env['CM2_CHAOS_STEPS'] ?? 100);
const QUEUES = ['workflows', 'api', 'gpu'] as const;
/** Summary keys that differ between the runs by retries (cache hits, calls) as well as by design. */
const OMIT = /Key$|policy|judge|cache|calls|cost|tokens|seconds/i;

/** The fake endpoint: the LLM filter keeps everything, the judge answers by a hash of the prompt. */
const startLlm = () =>
  startFakeOpenAI({ behaviour: (req) => (String(req.body.model) === 'fake-judge' ? judgeReply(req.body, (id, prompt) => hashVerdict(`${id}\n${prompt}`)) : replies.json({ Reasoning: 'fine', NoError: true })) });

function config(prefix: string, llm: FakeOpenAI): Cm2Config {
  const over = tinyPipeline({ rlSteps: STEPS });
  return testConfig(uniqueId(prefix), {
    ...over,
    rl: { ...over.rl, judge: { offlineChecks: 'never', batchItems: 4 } },
    llm: { roles: { filter: { baseUrl: llm.url, model: 'fake-filter' }, judge: { baseUrl: llm.url, model: 'fake-judge' } } },
  });
}

async function resultOf(cfg: Cm2Config): Promise<PipelineResult> {
  for (let i = 0; ; i++) {
    try {
      return await (await connectClient(cfg)).workflow.getHandle(pipelineWorkflowId(cfg.run.id)).result();
    } catch (e) {
      if (i > 120) throw e;
      await sleep(1000);
    }
  }
}

test('chaos: random worker SIGKILLs, a Temporal and a MinIO restart — the run ends with an undisturbed run\'s weights and no LLM answer paid twice', async () => {
  const seed = Number(process.env['CM2_CHAOS_SEED'] ?? Math.floor(Math.random() * 2 ** 31));
  console.log(`chaos seed ${seed} (CM2_CHAOS_SEED=${seed} repeats the schedule)`);
  const rand = mulberry32(seed);
  const between = (lo: number, hi: number) => lo + (hi - lo) * rand();

  // Reference: undisturbed, on the shared servers.
  const llmA = await startLlm();
  const a = config('chaosa', llmA);
  const workerA = await startChildWorker(writeConfigFile(a));
  let reference: PipelineResult;
  const t0 = Date.now();
  try {
    reference = await (await startPipeline(await connectClient(a), a)).result();
  } finally {
    await workerA.kill('SIGTERM');
    await llmA.close();
  }
  assert.equal(reference.state, 'completed');
  console.log(`chaos: the undisturbed run took ${((Date.now() - t0) / 1000).toFixed(0)}s`);

  // The same run on dedicated servers, under chaos.
  const llmB = await startLlm();
  const servers = await startDedicatedServers('chaos');
  const env = servers.env;
  const b = servers.configure(config('chaosb', llmB));
  const file = writeConfigFile(b);
  const storeB = servers.store(b);
  const workers = new Map<string, ChildWorker>();
  for (const q of QUEUES) workers.set(q, await startChildWorker(file, q, env));
  const events: string[] = [];
  let done = false;
  try {
    await startPipeline(await connectClient(b), b, pipelineInput(b));
    const finished = resultOf(b).finally(() => {
      done = true;
    });
    const began = Date.now();
    const at = (s: string) => events.push(`${((Date.now() - began) / 1000).toFixed(0)}s ${s}`);
    let nextKill = began + between(20, 40) * 1000;
    const temporalAt = began + between(10, 50) * 1000;
    const minioAt = began + between(30, 70) * 1000;
    let temporalDone = false;
    let minioDone = false;
    while (!done) {
      const now = Date.now();
      if (!temporalDone && now >= temporalAt) {
        temporalDone = true;
        at('Temporal killed');
        await servers.restartTemporal(between(1, 4) * 1000);
        at('Temporal restarted');
      } else if (!minioDone && now >= minioAt) {
        minioDone = true;
        at('MinIO killed');
        await servers.restartMinio(between(1, 4) * 1000);
        at('MinIO restarted');
      } else if (now >= nextKill) {
        const q = QUEUES[Math.floor(rand() * QUEUES.length)]!;
        await workers.get(q)!.kill('SIGKILL');
        at(`${q} worker SIGKILLed`);
        workers.set(q, await startChildWorker(file, q, env));
        at(`${q} worker restarted`);
        nextKill = Date.now() + between(20, 40) * 1000;
      }
      await Promise.race([finished.catch(() => undefined), sleep(250)]);
    }
    const result = await finished;
    console.log(`chaos events:\n  ${events.join('\n  ')}`);
    assert.ok(temporalDone && minioDone && events.filter((e) => e.endsWith('SIGKILLed')).length >= 2, `the run outlived the schedule: ${events.join('; ')}`);
    assert.equal(result.state, 'completed');
    assert.deepEqual(comparableStages(result, OMIT), comparableStages(reference, OMIT), 'the same stage results as the undisturbed run');
    assert.deepEqual(await stepWeights(storeB, b.run.id), await stepWeights(testStore(a), a.run.id), 'the same weights after every RL step');

    // No answer paid twice: no request answered more often than in the undisturbed run.
    assert.ok(llmA.answered.size > 0);
    const extra = [...llmB.answered].filter(([key, n]) => n > (llmA.answered.get(key) ?? 0)).map(([key, n]) => `${n}× (reference ${llmA.answered.get(key) ?? 0}×): ${key.slice(0, 120)}`);
    assert.deepEqual(extra, [], 'LLM answers paid twice');
  } finally {
    for (const w of workers.values()) await w.kill('SIGTERM');
    await servers.stop();
    await llmB.close();
  }
});
