/**
 * The chaos drill, shared by the CI test (test/integration/chaos.test.ts) and the longer bench (bench/chaos.ts): a
 * whole pipeline (LLM filter and LLM judge on a fake endpoint, RL with continue-as-new) runs undisturbed, then again on
 * dedicated servers while a seeded driver SIGKILLs a random worker process (workflows, api or gpu) every 20–40 s and
 * starts it again, and kills and restarts the Temporal server and MinIO at random moments (once each, or about every
 * `serverEverySec`). It reports what a caller checks: the same stage results, the same weights after every RL step,
 * and no LLM answer delivered more often than in the undisturbed run.
 */
import { pipelineWorkflowId, startPipeline, pipelineInput } from '../../src/cli/stages';
import { connectClient } from '../../src/infra/temporal';
import { mulberry32 } from '../../src/kernel/rng';
import type { PipelineResult } from '../../src/stages/pipeline/workflow';
import type { Cm2Config } from '../../src/run/config';
import { comparableStages, startDedicatedServers, stepWeights } from './dedicatedServers';
import { testConfig, testStore, uniqueId } from './env';
import { judgeReply, hashVerdict } from './fakeJudge';
import { replies, startFakeOpenAI, type FakeOpenAI } from './fakeOpenAI';
import { tinyPipeline } from './pipelineFixture';
import { startChildWorker, writeConfigFile, type ChildWorker } from './processes';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const QUEUES = ['workflows', 'api', 'gpu'] as const;
/** Summary keys that differ between the runs by retries (cache hits, calls) as well as by design. */
const OMIT = /Key$|policy|judge|cache|calls|cost|tokens|seconds/i;

export interface ChaosOptions {
  steps: number;
  seed: number;
  /** Restart Temporal and MinIO about this often (each, ±25 %); undefined: once each in the first 70 s. */
  serverEverySec?: number;
  /** Seconds between worker kills (uniform). Default [20, 40]. */
  killEverySec?: [number, number];
  log?: (line: string) => void;
}

export interface ChaosReport {
  seed: number;
  steps: number;
  undisturbedSeconds: number;
  chaosSeconds: number;
  /** "<seconds since start>s <what>", in order. */
  events: string[];
  kills: Record<(typeof QUEUES)[number], number>;
  temporalRestarts: number;
  minioRestarts: number;
  reference: PipelineResult;
  result: PipelineResult;
  /** comparableStages of each run. */
  stages: { reference: unknown; chaos: unknown };
  /** [step, weights sha256] of each run. */
  weights: { reference: unknown[]; chaos: unknown[] };
  /** Answers delivered in the undisturbed run. */
  answered: number;
  /** Requests answered more often than in the undisturbed run. */
  paidTwice: string[];
}

/** The fake endpoint: the LLM filter keeps everything, the judge answers by a hash of the prompt. */
const startLlm = () =>
  startFakeOpenAI({ record: false, behaviour: (req) => (String(req.body.model) === 'fake-judge' ? judgeReply(req.body, (id, prompt) => hashVerdict(`${id}\n${prompt}`)) : replies.json({ Reasoning: 'fine', NoError: true })) });

function config(prefix: string, llm: FakeOpenAI, steps: number): Cm2Config {
  const over = tinyPipeline({ rlSteps: steps });
  return testConfig(uniqueId(prefix), {
    ...over,
    rl: { ...over.rl, judge: { offlineChecks: 'never', batchItems: 4 } },
    llm: { roles: { filter: { baseUrl: llm.url, model: 'fake-filter' }, judge: { baseUrl: llm.url, model: 'fake-judge' } } },
  });
}

/** The result of the pipeline workflow, reconnecting while the server is down. */
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

/** Runs the drill; the reference run uses the servers named by the environment (testConfig). */
export async function runChaos(opts: ChaosOptions): Promise<ChaosReport> {
  const log = opts.log ?? (() => undefined);
  const rand = mulberry32(opts.seed);
  const between = (lo: number, hi: number) => lo + (hi - lo) * rand();
  const [killLo, killHi] = opts.killEverySec ?? [20, 40];

  // Reference: undisturbed.
  const llmA = await startLlm();
  const a = config('chaosa', llmA, opts.steps);
  const workerA = await startChildWorker(writeConfigFile(a));
  let reference: PipelineResult;
  const t0 = Date.now();
  try {
    reference = await (await startPipeline(await connectClient(a), a)).result();
  } finally {
    await workerA.kill('SIGTERM');
    await llmA.close();
  }
  const undisturbedSeconds = (Date.now() - t0) / 1000;
  log(`chaos: the undisturbed run took ${undisturbedSeconds.toFixed(0)}s`);

  // The same run on dedicated servers, under chaos.
  const llmB = await startLlm();
  const servers = await startDedicatedServers('chaos');
  const env = servers.env;
  const b = servers.configure(config('chaosb', llmB, opts.steps));
  const file = writeConfigFile(b);
  const storeB = servers.store(b);
  const workers = new Map<string, ChildWorker>();
  for (const q of QUEUES) workers.set(q, await startChildWorker(file, q, env));
  const events: string[] = [];
  const kills = { workflows: 0, api: 0, gpu: 0 };
  let done = false;
  try {
    await startPipeline(await connectClient(b), b, pipelineInput(b));
    const finished = resultOf(b).finally(() => {
      done = true;
    });
    const began = Date.now();
    const at = (s: string) => {
      const line = `${((Date.now() - began) / 1000).toFixed(0)}s ${s}`;
      events.push(line);
      log(`chaos: ${line}`);
    };
    const every = opts.serverEverySec;
    const again = () => (every === undefined ? Infinity : Date.now() + every * between(0.75, 1.25) * 1000);
    let nextKill = began + between(killLo, killHi) * 1000;
    const restarts = [
      { name: 'Temporal', restart: (ms: number) => servers.restartTemporal(ms), at: began + between(10, 50) * 1000, count: 0 },
      { name: 'MinIO', restart: (ms: number) => servers.restartMinio(ms), at: began + between(30, 70) * 1000, count: 0 },
    ];
    while (!done) {
      const now = Date.now();
      const server = restarts.find((r) => now >= r.at);
      if (server) {
        at(`${server.name} killed`);
        await server.restart(between(1, 4) * 1000);
        server.count++;
        at(`${server.name} restarted`);
        server.at = again();
      } else if (now >= nextKill) {
        const q = QUEUES[Math.floor(rand() * QUEUES.length)]!;
        await workers.get(q)!.kill('SIGKILL');
        kills[q]++;
        at(`${q} worker SIGKILLed`);
        workers.set(q, await startChildWorker(file, q, env));
        at(`${q} worker restarted`);
        nextKill = Date.now() + between(killLo, killHi) * 1000;
      }
      await Promise.race([finished.catch(() => undefined), sleep(250)]);
    }
    const result = await finished;
    const chaosSeconds = (Date.now() - began) / 1000;
    const paidTwice = [...llmB.answered]
      .filter(([key, n]) => n > (llmA.answered.get(key) ?? 0))
      .map(([key, n]) => `${n}× (reference ${llmA.answered.get(key) ?? 0}×): ${key.slice(0, 120)}`);
    return {
      seed: opts.seed,
      steps: opts.steps,
      undisturbedSeconds,
      chaosSeconds,
      events,
      kills,
      temporalRestarts: restarts[0]!.count,
      minioRestarts: restarts[1]!.count,
      reference,
      result,
      stages: { reference: comparableStages(reference, OMIT), chaos: comparableStages(result, OMIT) },
      weights: { reference: await stepWeights(testStore(a), a.run.id), chaos: await stepWeights(storeB, b.run.id) },
      answered: llmA.answered.size,
      paidTwice,
    };
  } finally {
    for (const w of workers.values()) await w.kill('SIGTERM');
    await servers.stop();
    await llmB.close();
  }
}
