/**
 * Load at the rate limit (issue 16): the LLM-bound work of the pipeline against a fake OpenAI-compatible endpoint
 * that accepts a fixed number of requests per second (a token bucket) and answers 429 with `Retry-After` /
 * `retry-after-ms` above it (test/helpers/rateLimitedOpenAI.ts). Does throughput sit at the limit, does any example
 * fail, is any request paid twice?
 *
 *   npx tsx bench/rate-limit.ts [--examples 8000] [--variants 3] [--rate 60] [--judge-rate 50] [--prompts 64]
 *                               [--group 8] [--probe 600] [--latency 50] [--part all|checklist|client|judge]
 *                               [--client-rate 50] [--client-concurrency 32] [--client-seconds 25]
 *
 * (0) `--probe N` (0 = skip): the checklist stage on N examples with no limit at all — how many requests/s our side
 *     (workers, MinIO, the fake, on this machine) can drive; the limit must sit well below it, or the figures
 *     measure our CPU, not the limiter.
 * (a) Checklist annotation of `--examples` demo-world examples × `--variants`, through the real checklist workflow
 *     (Temporal workers in this process, MinIO), against a fake annotator limited to `--rate` requests/s that
 *     answers valid checklists after `--latency` ms.
 * (b) Judging one RL step of `--prompts` × `--group` rollouts: the rlJudge activity (called in this process, with
 *     the S3 response and verdict caches) phase after phase, against a fake judge limited to `--judge-rate`. The
 *     rollouts are scripted (the reference dialogue of each prompt, each group member's assistant messages made
 *     distinct), so no policy model is needed; turn control from the fake verdicts ends some episodes early.
 *
 * (c) The LLM client alone against the limit, pacing off and on (src/llm/rateLimit.ts): throughput and 429s.
 *
 * Local infrastructure as `cm2 infra up` (reused when running); CM2_TEMPORAL_PORT / CM2_MINIO_PORT (and the UI and
 * console ports) put it beside another one on a shared machine.
 *
 * Printed per part: limit, achieved throughput (paid answers/s from the first request to the last answer, and in
 * steady state: the mean over whole seconds without the first 5 and the last 3), 429s, failed examples (verdicts),
 * requests paid more than once, activity retries, wall time, and the CPU used by this process and by the machine.
 */
import os from 'node:os';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { temporal } from '@temporalio/proto';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { loadConfig } from '../src/run/config';
import { infraEnv, portsFromEnv, startInfra } from '../src/infra/localInfra';
import { ObjectStore } from '../src/storage/store';
import { prepareKeys, rlKeys } from '../src/run/layout';
import { connectClient } from '../src/infra/temporal';
import { startWorkers } from '../src/workers';
import { startChecklist } from '../src/cli/stages';
import { generateDemoDataset } from '../src/demo/generator';
import { offlineChecklist } from '../src/demo/checklist';
import { toStoredVariant } from '../src/stages/checklist/schema';
import { turnSpans } from '../src/stages/checklist/steps';
import { createRlActivities } from '../src/stages/rl/activities';
import { demoWorld } from '../src/demo/world';
import { promptMessages } from '../src/stages/rl/rollout';
import { Rollout } from '../src/stages/rl/rolloutSchema';
import { LlmConfig } from '../src/llm/llmConfig';
import { LlmClient } from '../src/llm/client';
import { replies } from '../test/helpers/fakeOpenAI';
import type { Example } from '../src/kernel/schema';
import { checklistAnswerer, judgeAnswerer, startRateLimitedOpenAI, type RateLimitedEndpoint } from '../test/helpers/rateLimitedOpenAI';

const EventType = temporal.api.enums.v1.EventType;

/** Busy and total jiffies of the whole machine (/proc/stat), for its CPU utilisation over an interval. */
function machineCpu(): { busy: number; total: number } {
  const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const idle = (cpu[3] ?? 0) + (cpu[4] ?? 0);
  const total = cpu.reduce((a, b) => a + b, 0);
  return { busy: total - idle, total };
}

interface Meter {
  stop(): { wallS: number; processCores: number; machineBusy: number; load: string };
}

function meter(): Meter {
  const t0 = Date.now();
  const p0 = process.cpuUsage();
  const m0 = machineCpu();
  return {
    stop: () => {
      const wallS = (Date.now() - t0) / 1000;
      const p = process.cpuUsage(p0);
      const m1 = machineCpu();
      return {
        wallS,
        processCores: (p.user + p.system) / 1e6 / wallS,
        machineBusy: (m1.busy - m0.busy) / Math.max(1, m1.total - m0.total),
        load: os.loadavg().map((x) => x.toFixed(2)).join(' '),
      };
    },
  };
}

function throughput(fake: RateLimitedEndpoint) {
  const t = fake.totals();
  const seconds = (t.lastPaidAt - t.firstAt) / 1000;
  const secs = fake.paidPerSecond.slice(5, Math.max(5, fake.paidPerSecond.length - 3));
  const steady = secs.length ? secs.reduce((a, b) => a + b, 0) / secs.length : Number.NaN;
  const sorted = [...secs].sort((a, b) => a - b);
  const q = (f: number) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(f * sorted.length))]! : Number.NaN);
  return { ...t, seconds, overall: t.paid / seconds, steady, minSecond: q(0), p10: q(0.1), median: q(0.5), steadySeconds: secs.length };
}

function printPart(title: string, limit: string, fake: RateLimitedEndpoint, extra: Record<string, string>, m: ReturnType<Meter['stop']>) {
  const t = throughput(fake);
  console.log(`\n${title}`);
  console.log(`limit                   ${limit}`);
  console.log(`paid answers            ${t.paid} (requests ${t.requests}, 429s ${t.limited})`);
  console.log(`throughput overall      ${t.overall.toFixed(1)} req/s over ${t.seconds.toFixed(1)} s (first request → last answer)`);
  console.log(`throughput steady       ${t.steady.toFixed(1)} req/s (mean of ${t.steadySeconds} whole seconds; per second: median ${t.median}, 10th percentile ${t.p10}, slowest ${t.minSecond})`);
  for (const [k, v] of Object.entries(extra)) console.log(`${k.padEnd(24)}${v}`);
  console.log(`wall time               ${m.wallS.toFixed(1)} s`);
  console.log(`CPU                     this process ${m.processCores.toFixed(2)} cores; machine ${(m.machineBusy * 100).toFixed(0)} % busy (${os.cpus().length} cores); load ${m.load}`);
}

async function activityRetries(handle: { fetchHistory(): Promise<temporal.api.history.v1.IHistory> }): Promise<number> {
  const history = await handle.fetchHistory();
  return (history.events ?? []).filter((e) => e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED && (e.activityTaskStartedEventAttributes?.attempt ?? 1) > 1).length;
}

async function checklistPart(opts: { examples: number; variants: number; rate: number; latency: number; unlimited: boolean; seed: number }) {
  const runId = `bench-rate-${opts.unlimited ? 'probe' : 'ckl'}-${Date.now().toString(36)}`;
  const examples = generateDemoDataset({ seed: opts.seed, count: opts.examples, brokenRate: 0 });
  const fake = await startRateLimitedOpenAI({ rate: opts.rate, latencyMs: opts.latency, unlimited: opts.unlimited, answer: checklistAnswerer(examples) });
  const cfg = loadConfig('config/demo.yaml', {
    overrides: {
      run: { id: runId },
      checklist: { shardSize: 50, shardConcurrency: 4, variants: opts.variants },
      llm: { roles: { annotator: { baseUrl: fake.url, model: 'fake-annotator', concurrency: 32 } } },
    },
  });
  const store = ObjectStore.fromConfig(cfg.s3);
  await store.putJsonl(prepareKeys.rl(runId), examples);
  const workers = await startWorkers(cfg);
  try {
    const client = await connectClient(cfg);
    const m = meter();
    const handle = await startChecklist(client, cfg);
    const report = await handle.result();
    const stopped = m.stop();
    const t = fake.totals();
    const title = opts.unlimited
      ? `(0) capacity probe: checklist stage, ${opts.examples} examples × ${opts.variants} variants, NO limit (run ${runId})`
      : `(a) checklist stage at the limit: ${opts.examples} examples × ${opts.variants} variants (run ${runId})`;
    printPart(title, opts.unlimited ? 'none' : `${fake.rate} req/s, burst ${fake.burst}, answer latency ${opts.latency} ms`, fake, {
      'annotated / failed': `${report.annotated} / ${report.failed} ${report.failed ? JSON.stringify(report.failureReasons) : ''}`,
      'paid twice': `${t.paid - opts.examples * opts.variants} answers beyond one per (example, variant); ${[...fake.paid.values()].filter((n) => n > opts.variants).length} requests paid more than ${opts.variants}× (the variants share a request)`,
      'activity retries': String(await activityRetries(handle)),
    }, stopped);
  } finally {
    await workers.shutdown();
    await fake.close();
  }
}

/** The scripted policy: plays the reference's assistant and tool messages of the rollout's current turn. */
function play(r: Rollout, ex: Example): void {
  const span = turnSpans(ex.messages)[r.turns - 1]!;
  for (const m of ex.messages.slice(span.start + 1, span.end + 1)) {
    const msg = structuredClone(m);
    if (msg.role === 'assistant') {
      // Group members differ (a policy samples): a member tag in the thinking, which the judge sees.
      const tag = ` (sample ${r.member})`;
      msg.content = msg.content.includes('</think>') ? msg.content.replace('</think>', `${tag}\n</think>`) : `${msg.content}${tag}`;
      r.segments.push({ message: r.messages.length, turn: r.turns - 1, start: 0, end: 0 });
      r.generations++;
    }
    r.messages.push(msg);
  }
  r.status = 'judge';
}

async function judgePart(opts: { prompts: number; group: number; rate: number; latency: number; seed: number }) {
  const runId = `bench-rate-judge-${Date.now().toString(36)}`;
  const base = loadConfig('config/demo.yaml', { overrides: { run: { id: runId } } });
  const store = ObjectStore.fromConfig(base.s3);
  const examples = generateDemoDataset({ seed: opts.seed, count: opts.prompts, brokenRate: 0 });
  const annotated = examples.map((ex) => ({ ...ex, checklists: [toStoredVariant(offlineChecklist(ex), 0)] }));
  const dataKey = rlKeys.folder(runId, 'data', 'examples.jsonl');
  await store.putJsonl(dataKey, annotated);
  const byUuid = new Map(examples.map((e) => [e.uuid, e]));
  const folder = rlKeys.step(runId, 0);

  let rollouts: Rollout[] = [];
  examples.forEach((ex, group) => {
    for (let member = 0; member < opts.group; member++) {
      rollouts.push({
        id: `${ex.uuid}#${member}`, uuid: ex.uuid, group, member, messages: promptMessages(ex), tokens: [], logprobs: [], segments: [],
        turns: 1, refTurns: turnSpans(ex.messages).length, status: 'generate', generations: 0, toolFailed: false, toolSources: {},
      });
    }
  });

  const fake = await startRateLimitedOpenAI({ rate: opts.rate, latencyMs: opts.latency, answer: judgeAnswerer() });
  const llm = LlmConfig.parse({ roles: { judge: { baseUrl: fake.url, model: 'fake-judge', concurrency: 32 } } });
  const rl = { ...base.rl, promptsPerStep: opts.prompts, groupSize: opts.group };
  const acts = createRlActivities({ store, world: demoWorld, log: () => undefined });
  const totals = { calls: 0, failed: 0, cacheHits: 0, pairs: 0, phases: 0 };
  const m = meter();
  for (let phase = 0; ; phase += 2) {
    for (const r of rollouts) if (r.status === 'generate') play(r, byUuid.get(r.uuid)!);
    await store.putJson(rlKeys.phase(folder, phase), { rollouts });
    const res = await acts.rlJudge({ runId, folder, phase: phase + 1, dataKey, rl, llm });
    totals.phases++;
    totals.calls += res.judge?.calls ?? 0;
    totals.failed += res.judge?.failed ?? 0;
    totals.cacheHits += res.judge?.cacheHits ?? 0;
    rollouts = ((await store.getJson(res.key)) as { rollouts: unknown[] }).rollouts.map((x) => Rollout.parse(x));
    if (!rollouts.some((r) => r.status === 'generate')) break;
  }
  const stopped = m.stop();
  const t = fake.totals();
  const verdicts = rollouts.flatMap((r) => (r.verdicts ?? []).flat().flatMap((tv) => tv.steps.flat()));
  const ended: Record<string, number> = {};
  for (const r of rollouts) ended[r.ended ?? '?'] = (ended[r.ended ?? '?'] ?? 0) + 1;
  printPart(`(b) judging one RL step at the limit: ${opts.prompts} prompts × ${opts.group} rollouts, ${totals.phases} judge phases (run ${runId})`,
    `${fake.rate} req/s, burst ${fake.burst}, answer latency ${opts.latency} ms`, fake, {
      'judged pairs': `${verdicts.length} (step, item) verdicts over ${rollouts.reduce((n, r) => n + r.segments.length, 0)} steps; episodes ended ${JSON.stringify(ended)}`,
      'judge calls': `${totals.calls} (verdict cache hits ${totals.cacheHits})`,
      'failed verdicts': `${verdicts.filter((v) => !v.ok).length} (judge stats: ${totals.failed})`,
      'paid twice': `${t.paidTwiceOrMore} requests paid more than once (max ${t.maxPaidPerKey}× one request)`,
      'activity failures': 'none (rlJudge is called in process: a 429 that escaped the client would have stopped the bench)',
    }, stopped);
}

/**
 * (c) The client alone, pacing off vs on: `--client-concurrency` callers ask as fast as they can for `--client-seconds`
 * against the limit `--client-rate` (no Temporal, no S3): what the adaptive limiter changes.
 */
async function clientPart(opts: { rate: number; concurrency: number; seconds: number; latency: number }) {
  for (const pace of [false, true]) {
    const fake = await startRateLimitedOpenAI({ rate: opts.rate, latencyMs: opts.latency, answer: () => replies.json({ ok: true }) });
    const client = new LlmClient(LlmConfig.parse({ roles: { annotator: { baseUrl: fake.url, model: 'fake', concurrency: opts.concurrency } } }), { backoff: { pace }, log: () => undefined });
    const end = Date.now() + opts.seconds * 1000;
    let n = 0;
    let thrown = 0;
    const m = meter();
    await Promise.all(Array.from({ length: opts.concurrency }, async () => {
      while (Date.now() < end) {
        await client.chat({ role: 'annotator', messages: [{ role: 'user', content: `question ${n++}` }] }).catch(() => thrown++);
      }
    }));
    printPart(`(c) the LLM client alone, ${opts.concurrency} eager callers for ${opts.seconds} s, pacing ${pace ? 'ON (default)' : 'OFF (only the jittered Retry-After)'}`,
      `${fake.rate} req/s, burst ${fake.burst}, answer latency ${opts.latency} ms`, fake, {
        'calls failed': String(thrown),
        '429s per paid answer': (fake.totals().limited / Math.max(1, fake.totals().paid)).toFixed(2),
      }, m.stop());
    await fake.close();
  }
}

async function main() {
  const { values } = parseArgs({
    options: {
      examples: { type: 'string', default: '8000' },
      variants: { type: 'string', default: '3' },
      rate: { type: 'string', default: '60' },
      'judge-rate': { type: 'string', default: '50' },
      prompts: { type: 'string', default: '64' },
      group: { type: 'string', default: '8' },
      probe: { type: 'string', default: '600' },
      latency: { type: 'string', default: '50' },
      part: { type: 'string', default: 'all' },
      'client-rate': { type: 'string', default: '50' },
      'client-concurrency': { type: 'string', default: '32' },
      'client-seconds': { type: 'string', default: '25' },
    },
  });
  const state = await startInfra({ ...portsFromEnv(), log: (l) => console.log(l) });
  for (const [k, v] of Object.entries(infraEnv(state))) process.env[k] ??= v;
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  console.log(`${new Date().toISOString()}  ${os.cpus().length} cores, load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
  const part = values.part!;
  const latency = Number(values.latency);
  const variants = Number(values.variants);
  if ((part === 'all' || part === 'checklist') && Number(values.probe) > 0) {
    await checklistPart({ examples: Number(values.probe), variants, rate: 1, latency, unlimited: true, seed: 161 });
  }
  if (part === 'all' || part === 'checklist') {
    await checklistPart({ examples: Number(values.examples), variants, rate: Number(values.rate), latency, unlimited: false, seed: 16 });
  }
  if (part === 'all' || part === 'client') {
    await clientPart({ rate: Number(values['client-rate']), concurrency: Number(values['client-concurrency']), seconds: Number(values['client-seconds']), latency });
  }
  if (part === 'all' || part === 'judge') {
    await judgePart({ prompts: Number(values.prompts), group: Number(values.group), rate: Number(values['judge-rate']), latency, seed: 64 });
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
