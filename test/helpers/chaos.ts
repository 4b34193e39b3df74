/**
 * The chaos drill, shared by the CI test (test/integration/chaos.test.ts) and the longer bench (bench/chaos.ts): a
 * whole pipeline (LLM filter and LLM judge on a fake endpoint, RL with continue-as-new) runs undisturbed, then again on
 * dedicated servers while a seeded driver SIGKILLs a random worker process (workflows, api or gpu) and starts it
 * again, and kills and restarts the Temporal server and MinIO — at points of the run's progress drawn from the seed
 * (test/helpers/chaosSchedule.ts: "kill the gpu worker when RL step 37 starts training"), so a seed replays.
 *
 * The drill checks what a caller expects (the same stage results, the same weights after every RL step, no LLM
 * answer delivered more often than in the undisturbed run, the schedule carried out) and writes a report folder
 * (test/helpers/chaosReport.ts) whatever happens: a failed check, a run that fails or hangs, a drill that throws.
 */
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { pipelineWorkflowId, startPipeline, pipelineInput } from '../../src/cli/stages';
import { connectClient } from '../../src/infra/temporal';
import { STAGES, stageWorkflowId } from '../../src/run/layout';
import type { PipelineResult } from '../../src/stages/pipeline/workflow';
import type { Cm2Config } from '../../src/run/config';
import { comparableStages, startDedicatedServers, stepWeights, type DedicatedServers } from './dedicatedServers';
import { testConfig, testStore, uniqueId } from './env';
import { judgeReply, hashVerdict } from './fakeJudge';
import { replies, startFakeOpenAI, type FakeOpenAI } from './fakeOpenAI';
import { tinyPipeline } from './pipelineFixture';
import { startChildWorker, writeConfigFile, type ChildWorker } from './processes';
import { cmpKey, describeEvent, drawSchedule, observeProgress, QUEUES, START, type ChaosEvent, type ChaosSchedule, type Progress } from './chaosSchedule';
import { appendLine, chaosReportDir, compactReport, copyIfThere, firstDivergence, runHistory, stagesDiff, writeReport, type ReportBody } from './chaosReport';

export type { ChaosSchedule } from './chaosSchedule';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Summary keys that differ between the runs by retries (cache hits, calls) as well as by design. */
const OMIT = /Key$|policy|judge|cache|calls|cost|tokens|seconds/i;

export interface ChaosOptions {
  steps: number;
  seed: number;
  /** When the events come; default: by progress, a worker kill every 15–30 step units, each server restarted once. */
  schedule?: ChaosSchedule;
  /** What the checks require of the schedule carried out: each server restarted exactly `restartsEach` times, at least `minKills` worker kills. */
  expect?: { restartsEach?: number; minKills?: number };
  /** Epoch ms by which the chaos run must have ended (a hang is reported, not waited out). Default: 6 × the undisturbed run + 5 min. */
  deadline?: number;
  /** The report's parent folder (default $CM2_CHAOS_REPORT_DIR or ~/.cache/cm2/chaos-reports). */
  reportParent?: string;
  log?: (line: string) => void;
  /**
   * The undisturbed run of an earlier drill with the same `steps` (its `undisturbed`): the pipeline is deterministic,
   * so a series of drills (bench/chaos-series.ts) runs it once and compares every chaos run with it.
   */
  reference?: UndisturbedRun;
}

/** What the checks need of the undisturbed run. */
export interface UndisturbedRun {
  steps: number;
  result: PipelineResult;
  /** [step, weights sha256] after each RL step. */
  weights: unknown[];
  /** How often each LLM request was answered. */
  answered: Map<string, number>;
  seconds: number;
  /** Which drill ran it (its report folder). */
  from: string;
}

export interface ChaosReport extends ReportBody {
  reference?: PipelineResult;
  result?: PipelineResult;
  /** comparableStages of each run. */
  stages: { reference: unknown; chaos: unknown };
  /** [step, weights sha256] of each run. */
  weights: { reference: unknown[]; chaos: unknown[] };
  /** report.md's text. */
  text: string;
  /** The undisturbed run (this drill's or `opts.reference`), when it completed: for the next drill of a series. */
  undisturbed?: UndisturbedRun;
}

export const DEFAULT_SCHEDULE: ChaosSchedule = { clock: 'progress', killEverySteps: [15, 30] };

/** The fake endpoint: the LLM filter keeps everything, the judge answers by a hash of the prompt. `seen` gets each request's key and time. */
const startLlm = (seen?: (key: string) => void) =>
  startFakeOpenAI({
    record: false,
    behaviour: (req, ctx) => {
      seen?.(ctx.key);
      return String(req.body.model) === 'fake-judge' ? judgeReply(req.body, (id, prompt) => hashVerdict(`${id}\n${prompt}`)) : replies.json({ Reasoning: 'fine', NoError: true });
    },
  });

function config(prefix: string, llm: FakeOpenAI, steps: number): Cm2Config {
  const over = tinyPipeline({ rlSteps: steps });
  return testConfig(uniqueId(prefix), {
    ...over,
    rl: { ...over.rl, judge: { offlineChecks: 'never', batchItems: 4 } },
    llm: { roles: { filter: { baseUrl: llm.url, model: 'fake-filter' }, judge: { baseUrl: llm.url, model: 'fake-judge' } } },
  });
}

/**
 * The result of the pipeline workflow, reconnecting while the server is down; gives up once `stop()` says so (the
 * drill is over: its servers are stopping), so a drill that failed never keeps its test process alive.
 */
async function resultOf(cfg: Cm2Config, stop: () => boolean): Promise<PipelineResult> {
  for (let i = 0; ; i++) {
    let client: Client | undefined;
    try {
      client = await connectClient(cfg);
      return await client.workflow.getHandle(pipelineWorkflowId(cfg.run.id)).result();
    } catch (e) {
      if (i > 120 || stop()) throw e;
      await sleep(1000);
    } finally {
      await client?.connection.close().catch(() => undefined);
    }
  }
}

/** A client used for a while and then closed (`close`), so no connection outlives the drill. */
async function withClient<T>(cfg: Cm2Config, fn: (c: Client) => Promise<T>): Promise<T> {
  const client = await connectClient(cfg);
  try {
    return await fn(client);
  } finally {
    await client.connection.close().catch(() => undefined);
  }
}

/** The activities in flight in the stage now running ("rlTrain#2" = attempt 2), best effort. */
async function inFlight(client: Client, runId: string, p: Progress): Promise<string> {
  const stage = STAGES[p.key[0]];
  if (!stage) return '';
  try {
    const d = await Promise.race([client.workflow.getHandle(stageWorkflowId(runId, stage)).describe(), sleep(2000).then(() => undefined)]);
    const acts = (d?.raw.pendingActivities ?? []).map((a) => `${a.activityType?.name ?? '?'}#${a.attempt ?? 1}`);
    return acts.length ? ` {${acts.join(', ')}}` : '';
  } catch {
    return '';
  }
}

/** An error's causes (a workflow's failure: the stage's, then the activity's), as "; cause: …" lines. */
function causes(e: Error): string {
  let out = '';
  for (let c = e.cause, n = 0; c instanceof Error && n < 8; c = c.cause, n++) out += `; cause: ${c.message.split('\n')[0]}`;
  return out;
}

/** Runs the drill and writes its report; never throws for a failed check or run (see `failures`). */
export async function runChaos(opts: ChaosOptions): Promise<ChaosReport> {
  const log = opts.log ?? (() => undefined);
  const schedule = opts.schedule ?? DEFAULT_SCHEDULE;
  const dir = chaosReportDir(opts.seed, opts.reportParent);
  log(`chaos: seed ${opts.seed}, report folder ${dir}`);
  const plan = drawSchedule(opts.seed, opts.steps, schedule);
  const r: ChaosReport = {
    seed: opts.seed, steps: opts.steps, dir, failures: [], schedule: plan.filter((e) => e.at < 1e5).slice(0, 500).map(describeEvent), events: [],
    kills: { workflows: 0, api: 0, gpu: 0 }, temporalRestarts: 0, minioRestarts: 0, stagesDiff: [], paidTwice: [], answered: 0, workerLogs: [],
    stages: { reference: undefined, chaos: undefined }, weights: { reference: [], chaos: [] }, text: '',
  };
  const workerLog = (name: string) => {
    const file = path.join(dir, 'workers', `${name}.log`);
    if (!r.workerLogs.includes(file)) r.workerLogs.push(file);
    return file;
  };
  let llmA: FakeOpenAI | undefined;
  let llmB: FakeOpenAI | undefined;
  let servers: DedicatedServers | undefined;
  let a: Cm2Config | undefined;
  let b: Cm2Config | undefined;
  const workers = new Map<string, ChildWorker>();
  let began = 0;
  const seenAt = new Map<string, number[]>();
  const timeline: Array<[number, string]> = [];
  const clients: Client[] = [];
  let closing = false;
  try {
    if (opts.reference) {
      if (opts.reference.steps !== opts.steps) throw new Error(`the reference run has ${opts.reference.steps} RL steps, the drill ${opts.steps}`);
      r.reference = opts.reference.result;
      r.undisturbedSeconds = opts.reference.seconds;
      r.referenceFrom = opts.reference.from;
      log(`chaos: the undisturbed run of an earlier drill (${r.undisturbedSeconds.toFixed(0)}s) is the reference`);
    } else {
      // Reference: undisturbed.
      llmA = await startLlm();
      a = config('chaosa', llmA, opts.steps);
      const workerA = await startChildWorker(writeConfigFile(a), undefined, {}, [], { logFile: workerLog('undisturbed'), startTimeoutMs: 180_000 });
      const t0 = Date.now();
      try {
        const cfgA = a;
        r.reference = await withClient(a, async (c) => (await startPipeline(c, cfgA)).result());
      } finally {
        r.undisturbedSeconds = (Date.now() - t0) / 1000;
        await workerA.kill('SIGTERM');
      }
      log(`chaos: the undisturbed run took ${r.undisturbedSeconds.toFixed(0)}s`);
    }

    // The same run on dedicated servers, under chaos.
    llmB = await startLlm((key) => seenAt.set(key, [...(seenAt.get(key) ?? []), Date.now()]));
    servers = await startDedicatedServers('chaos');
    const { env } = servers;
    b = servers.configure(config('chaosb', llmB, opts.steps));
    const file = writeConfigFile(b);
    const incarnation: Record<string, number> = {};
    // A worker that starts slowly on a busy machine is the machine's doing, not the run's: up to 3 min.
    const startWorker = (q: string) => startChildWorker(file, q, env, [], { logFile: workerLog(`${q}-${(incarnation[q] = (incarnation[q] ?? 0) + 1)}`), startTimeoutMs: 180_000 });
    for (const q of QUEUES) workers.set(q, await startWorker(q));
    let client = await connectClient(b);
    clients.push(client);
    const runId = b.run.id;
    let unanswered = 0;
    await startPipeline(client, b, pipelineInput(b));
    let done = false;
    const finished = resultOf(b, () => closing).finally(() => {
      done = true;
    });
    finished.catch(() => undefined); // awaited below, unless the drill stops first (a deadline, a throw)
    began = Date.now();
    const deadline = opts.deadline ?? began + (6 * r.undisturbedSeconds + 300) * 1000;
    let progress: Progress = START;
    // The progress last seen (an event fires right after it is seen), or with `fresh` asked again (after a restart,
    // which can take half a minute on a busy machine).
    const at = async (what: string, fresh = false) => {
      const t = ((Date.now() - began) / 1000).toFixed(1);
      const now = (fresh ? await observeProgress(client, runId, 1500) : undefined) ?? progress;
      const line = `${t}s [${now.label}]${await inFlight(client, runId, now)} ${what}`;
      r.events.push(line);
      appendLine(path.join(dir, 'events.log'), line);
      log(`chaos: ${line}`);
    };
    const due = (e: ChaosEvent) => (e.target ? cmpKey(progress.key, e.target) >= 0 : Date.now() - began >= e.at * 1000);
    const restart = { Temporal: (ms: number) => servers!.restartTemporal(ms), MinIO: (ms: number) => servers!.restartMinio(ms) };
    let next = 0;
    while (!done) {
      if (Date.now() > deadline) {
        r.failures.push(`the chaos run had not ended ${((Date.now() - began) / 1000).toFixed(0)} s after it began (the deadline); it was at ${progress.label}`);
        break;
      }
      const seen = await observeProgress(client, runId);
      // A connection that stays silent past a server restart is replaced.
      unanswered = seen ? 0 : unanswered + 1;
      if (unanswered > 40) {
        unanswered = 0;
        client = await connectClient(b).catch(() => client);
        if (!clients.includes(client)) clients.push(client);
      }
      if (seen && cmpKey(seen.key, progress.key) > 0) {
        progress = seen;
        timeline.push([Date.now(), seen.label]);
        appendLine(path.join(dir, 'progress.log'), `${((Date.now() - began) / 1000).toFixed(1)}s ${seen.label}`);
      }
      for (; !done && next < plan.length && due(plan[next]!); next++) {
        const e = plan[next]!;
        if (e.kind === 'restart') {
          await at(`${e.server} killed (${describeEvent(e)})`);
          await restart[e.server](e.downMs);
          if (e.server === 'Temporal') r.temporalRestarts++;
          else r.minioRestarts++;
          await at(`${e.server} restarted`, true);
        } else {
          await workers.get(e.queue)!.kill('SIGKILL');
          r.kills[e.queue]++;
          await at(`${e.queue} worker SIGKILLed (${describeEvent(e)})`);
          workers.set(e.queue, await startWorker(e.queue));
          await at(`${e.queue} worker restarted`, true);
        }
      }
      await Promise.race([finished.catch(() => undefined), sleep(250)]);
    }
    if (done) {
      r.result = await finished;
      r.chaosSeconds = (Date.now() - began) / 1000;
      await at(`the pipeline ended: ${r.result.state}`);
      const left = plan.slice(next).filter((e) => e.target);
      if (left.length) await at(`not carried out (the run ended first): ${left.map(describeEvent).join('; ')}`);
    }
  } catch (e) {
    r.error = e instanceof Error ? `${e.stack ?? e.message}${causes(e)}` : String(e);
    r.failures.push(`the drill threw: ${e instanceof Error ? `${e.message.split('\n')[0]}${causes(e)}` : String(e)}`);
    if (began) r.chaosSeconds = (Date.now() - began) / 1000;
  } finally {
    closing = true;
    for (const c of clients) await c.connection.close().catch(() => undefined);
    await collect(r, { a, b, servers, llmA, llmB, began, seenAt, timeline, opts, workers });
  }
  r.text = writeReport(r);
  log(r.failures.length ? r.text : compactReport(r));
  log(`chaos: report ${path.join(dir, 'report.md')}`);
  return r;
}

interface Collected {
  a?: Cm2Config;
  b?: Cm2Config;
  servers?: DedicatedServers;
  llmA?: FakeOpenAI;
  llmB?: FakeOpenAI;
  began: number;
  seenAt: Map<string, number[]>;
  timeline: Array<[number, string]>;
  opts: ChaosOptions;
  workers: Map<string, ChildWorker>;
}

/** Everything the report needs, each part on its own (one that fails is noted, the others still come), then the clean-up. */
async function collect(r: ChaosReport, c: Collected): Promise<void> {
  const attempt = async (what: string, fn: () => Promise<void>) => {
    try {
      await fn();
    } catch (e) {
      r.failures.push(`could not ${what}: ${(e as Error).message.split('\n')[0]}`);
    }
  };
  const rel = (t: number) => `${((t - c.began) / 1000).toFixed(1)}s`;
  const progressAt = (t: number) => [...c.timeline].reverse().find(([u]) => u <= t)?.[1] ?? 'not started';
  const { a, b, servers } = c;
  if (b && servers) {
    await attempt('read the chaos run\'s history', async () => {
      r.history = await withClient(b, (client) => runHistory(client, b.run.id, c.began));
    });
    await attempt('read the chaos run\'s weights', async () => {
      r.weights.chaos = await stepWeights(servers.store(b), b.run.id);
    });
  }
  if (c.opts.reference) r.weights.reference = c.opts.reference.weights;
  else if (a) {
    await attempt('read the undisturbed run\'s weights', async () => {
      r.weights.reference = await stepWeights(testStore(a), a.run.id);
    });
    if (r.reference?.state !== 'completed') {
      await attempt('read the undisturbed run\'s history', async () => {
        r.referenceHistory = await withClient(a, (client) => runHistory(client, a.run.id, c.began));
      });
    }
  }
  for (const w of c.workers.values()) await w.kill('SIGTERM');
  if (servers) {
    copyIfThere(path.join(servers.dir, 'temporal.log'), path.join(r.dir, 'temporal.log'));
    copyIfThere(path.join(servers.dir, 'minio.log'), path.join(r.dir, 'minio.log'));
    await servers.stop();
  }
  const answeredA = c.opts.reference?.answered ?? c.llmA?.answered;
  if (answeredA && c.llmB) {
    const [A, B] = [answeredA, c.llmB.answered];
    r.answered = A.size;
    r.paidTwice = [...B]
      .filter(([key, n]) => n > (A.get(key) ?? 0))
      .map(([key, n]) => `${n}× (undisturbed ${A.get(key) ?? 0}×), requested at ${(c.seenAt.get(key) ?? []).map((t) => `${rel(t)} [${progressAt(t)}]`).join(', ')}: ${key.slice(0, 160)}`);
  }
  await c.llmA?.close();
  await c.llmB?.close();

  // The checks.
  if (r.reference?.state === 'completed' && answeredA && r.undisturbedSeconds !== undefined) {
    r.undisturbed = c.opts.reference ?? { steps: c.opts.steps, result: r.reference, weights: r.weights.reference, answered: new Map(answeredA), seconds: r.undisturbedSeconds, from: `the undisturbed run of the drill in ${r.dir}` };
  }
  r.stages = { reference: r.reference && comparableStages(r.reference, OMIT), chaos: r.result && comparableStages(r.result, OMIT) };
  r.stagesDiff = r.reference && r.result ? stagesDiff(r.stages.reference, r.stages.chaos) : [];
  r.weightsDivergence = firstDivergence(r.weights.reference, r.weights.chaos);
  const fail = (ok: boolean, what: string) => {
    if (!ok) r.failures.push(what);
  };
  if (r.reference) fail(r.reference.state === 'completed', `the undisturbed run ended ${r.reference.state}`);
  if (r.result) fail(r.result.state === 'completed', `the chaos run ended ${r.result.state}`);
  else if (r.reference && !r.failures.length) r.failures.push('the chaos run has no result');
  if (r.result) {
    fail(r.stagesDiff.length === 0, `stage results differ from the undisturbed run's: ${r.stagesDiff.join('; ')}`);
    fail(r.weights.chaos.length === c.opts.steps, `the chaos run recorded weights for ${r.weights.chaos.length} of ${c.opts.steps} RL steps`);
    fail(r.weightsDivergence === undefined, `weights differ from the undisturbed run's first at ${r.weightsDivergence}`);
    fail(r.answered > 0, 'the undisturbed run made no LLM request');
    fail(r.paidTwice.length === 0, `${r.paidTwice.length} LLM request(s) answered more often than undisturbed`);
    const { restartsEach, minKills } = c.opts.expect ?? {};
    const kills = Object.values(r.kills).reduce((n, k) => n + k, 0);
    if (restartsEach !== undefined) fail(r.temporalRestarts === restartsEach && r.minioRestarts === restartsEach, `Temporal restarted ${r.temporalRestarts}×, MinIO ${r.minioRestarts}× (expected ${restartsEach}× each)`);
    if (minKills !== undefined) fail(kills >= minKills, `${kills} worker kills (expected at least ${minKills})`);
  }
}
