/**
 * Issue 16: RL step time by phase with 1, 2 and 3 gpu worker processes (rollouts fanned out in chunks,
 * `rl.rollout.chunkPrompts`), and one-step-off asynchronous RL against synchronous RL on the demo, same seeds.
 *
 *   npx tsx bench/rl-scale.ts [--from demo] [--part scaling,async] [--steps 3] [--workers 1,2,3] [--chunk 1]
 *                             [--async-workers 2] [--async-steps 8] [--eval-prompts 64]
 *
 * Needs a finished `npm run demo` (its SFT policy and checklists, run `--from`). Workflows and api workers run in
 * this process; each gpu worker is a `cm2 worker --queues gpu` child process, as `npm run demo` starts one.
 *
 * Part `scaling`: `--steps` RL steps of config/demo.yaml (no held-out evaluation) from the SFT policy, once without
 * fan-out (chunkPrompts 0, one gpu worker: today's default) and once per worker count with `--chunk` prompts per
 * chunk. Prints each configuration's mean seconds per step by phase (steps after the first, which also loads the
 * policy, when there are several) and whether the weights after every step are the same for every worker count.
 *
 * Part `async`: the demo's RL (config/demo.yaml: 8 steps, held-out evaluation of 64 prompts at steps 0 and 8) with
 * `--async-workers` gpu workers and fan-out, synchronous and one-step-off, same seeds: wall time, seconds per step
 * and held-out reward (mean ± standard error over prompts).
 *
 * `--judge-latency-ms N`: the judge is an LLM endpoint (a local fake whose verdict is a hash of the item and the
 * judged text) that answers after N ms, as a real LLM judge spends seconds per call without using this machine's
 * CPU; then the judge's waiting is what one-step-off can hide behind training. The rewards are then meaningless
 * (hashed verdicts); compare the times.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { parseArgs } from 'node:util';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { startGpuWorker } from '../src/cli/demo';
import { startRl } from '../src/cli/stages';
import { loadConfig, type Cm2Config } from '../src/run/config';
import { infraEnv, startInfra } from '../src/infra/localInfra';
import { ObjectStore } from '../src/storage/store';
import { checklistKeys, rlKeys, sftKeys } from '../src/run/layout';
import { connectClient } from '../src/infra/temporal';
import { startWorkers } from '../src/workers';
import { startFakeOpenAI, type FakeOpenAI } from '../test/helpers/fakeOpenAI';
import { hashVerdict, judgeReply } from '../test/helpers/fakeJudge';

interface Row {
  kind: string;
  step: number;
  weightsSha256?: string;
  rewardMean?: number;
  rewardSe?: number | null;
  staleness?: number;
  seconds: Record<string, number>;
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
const f1 = (x: number) => x.toFixed(1);

let judgeEndpoint: FakeOpenAI | undefined;

async function runOnce(base: Cm2Config, store: ObjectStore, runId: string, rl: Record<string, unknown>, gpuWorkers: number): Promise<{ rows: Row[]; wall: number }> {
  const llm = judgeEndpoint ? { roles: { judge: { baseUrl: judgeEndpoint.url, model: 'fake-judge', concurrency: 64 } } } : {};
  const cfg = loadConfig('config/demo.yaml', { overrides: { run: { id: runId }, rl: { ...base.rl, ...rl }, llm } });
  const file = `${mkdtempSync(`${tmpdir()}/cm2-bench-`)}/config.yaml`;
  writeFileSync(file, JSON.stringify(cfg));
  const workers = await startWorkers(cfg, ['workflows', 'api']);
  const gpus = await Promise.all(Array.from({ length: gpuWorkers }, () => startGpuWorker(file)));
  const t0 = Date.now();
  try {
    await (await startRl(await connectClient(cfg), cfg)).result();
  } finally {
    await Promise.all(gpus.map((g) => g.stop()));
    await workers.shutdown();
  }
  const wall = (Date.now() - t0) / 1000;
  const rows = (await store.getText(rlKeys.metrics(runId))).split('\n').filter(Boolean).map((l) => JSON.parse(l) as Row);
  return { rows, wall };
}

async function main() {
  const { values } = parseArgs({
    options: {
      from: { type: 'string', default: 'demo' },
      part: { type: 'string', default: 'scaling,async' },
      steps: { type: 'string', default: '3' },
      workers: { type: 'string', default: '1,2,3' },
      chunk: { type: 'string', default: '1' },
      'async-workers': { type: 'string', default: '2' },
      'async-steps': { type: 'string', default: '8' },
      'eval-prompts': { type: 'string', default: '64' },
      'judge-latency-ms': { type: 'string' },
    },
  });
  if (values['judge-latency-ms']) {
    const ms = Number(values['judge-latency-ms']);
    judgeEndpoint = await startFakeOpenAI({
      behaviour: async (req) => {
        await new Promise((r) => setTimeout(r, ms));
        return judgeReply(req.body, (id, prompt) => hashVerdict(`${id}\n${prompt}`));
      },
    });
    console.log(`judge: a fake LLM endpoint answering after ${ms} ms (${judgeEndpoint.url})`);
  }
  const state = await startInfra({ log: (l) => console.log(l) });
  for (const [k, v] of Object.entries(infraEnv(state))) process.env[k] ??= v;
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  const from = values.from!;
  const base = loadConfig('config/demo.yaml');
  const store = ObjectStore.fromConfig(base.s3);
  const source = { sourceKey: checklistKeys.annotated(from), policyPrefix: sftKeys.final(from) };
  if (!(await store.exists(`${source.policyPrefix}/model.safetensors`))) throw new Error(`no SFT policy at ${source.policyPrefix}: run \`npm run demo\` first (or pass --from RUN)`);
  const tag = Date.now().toString(36);
  const parts = values.part!.split(',');
  const chunk = Number(values.chunk);

  if (parts.includes('scaling')) {
    const steps = Number(values.steps);
    const configs = [
      { name: 'no fan-out (chunkPrompts 0), 1 gpu worker', workers: 1, chunkPrompts: 0 },
      ...values.workers!.split(',').map(Number).map((w) => ({ name: `fan-out (chunkPrompts ${chunk}), ${w} gpu worker${w > 1 ? 's' : ''}`, workers: w, chunkPrompts: chunk })),
    ];
    const phases = ['rolloutWall', 'rollout', 'judge', 'advantages', 'train', 'checkpoint', 'orchestration', 'total'];
    const results: { name: string; workers: number; chunkPrompts: number; rows: Row[]; wall: number }[] = [];
    for (const c of configs) {
      const runId = `bench-scale-${tag}-w${c.workers}-c${c.chunkPrompts}`;
      console.log(`\n${c.name}: ${steps} steps of ${base.rl.promptsPerStep} prompts × ${base.rl.groupSize} rollouts as ${runId}...`);
      const r = await runOnce(base, store, runId, { ...source, steps, eval: { ...base.rl.eval, prompts: 0 }, rollout: { ...base.rl.rollout, chunkPrompts: c.chunkPrompts } }, c.workers);
      results.push({ ...c, rows: r.rows.filter((x) => x.kind === 'step'), wall: r.wall });
    }
    const timed = (rows: Row[]) => (rows.length > 1 ? rows.slice(1) : rows);
    console.log(`\nRL step time by phase, mean seconds per step${steps > 1 ? ' (steps 2..' + steps + ')' : ''}; rolloutWall = rollouts + judge of all chunks, start to merge; rollout/judge = busy seconds summed over activities`);
    console.log(`| configuration | ${phases.join(' | ')} | speed-up (total) | run wall s |`);
    console.log(`|---|${phases.map(() => '---').join('|')}|---|---|`);
    const ref = mean(timed(results[0]!.rows).map((r) => r.seconds['total'] ?? 0));
    for (const r of results) {
      const t = timed(r.rows);
      const total = mean(t.map((x) => x.seconds['total'] ?? 0));
      console.log(`| ${r.name} | ${phases.map((p) => f1(mean(t.map((x) => x.seconds[p] ?? (p === 'rolloutWall' ? (x.seconds['rollout'] ?? 0) + (x.seconds['judge'] ?? 0) : 0))))).join(' | ')} | ${(ref / total).toFixed(2)}× | ${f1(r.wall)} |`);
    }
    const fanned = results.filter((r) => r.chunkPrompts > 0);
    const shas = fanned.map((r) => JSON.stringify(r.rows.map((x) => x.weightsSha256)));
    console.log(`\nweights after every step identical across ${fanned.map((r) => r.workers).join(', ')} gpu workers: ${shas.every((s) => s === shas[0]) ? 'yes' : 'NO'}`);
  }

  if (parts.includes('async')) {
    const w = Number(values['async-workers']);
    const steps = Number(values['async-steps']);
    const evalCfg = { ...base.rl.eval, prompts: Number(values['eval-prompts']), every: steps };
    const out: { mode: string; rows: Row[]; wall: number }[] = [];
    for (const mode of ['off', 'one-step-off'] as const) {
      const runId = `bench-async-${tag}-${mode}`;
      console.log(`\nasync ${mode}: ${steps} steps, ${w} gpu workers, chunkPrompts ${chunk}, as ${runId}...`);
      const r = await runOnce(base, store, runId, { ...source, steps, async: mode, eval: evalCfg, rollout: { ...base.rl.rollout, chunkPrompts: chunk } }, w);
      out.push({ mode, ...r });
    }
    console.log(`\nSynchronous vs one-step-off RL on the demo (${steps} steps, ${w} gpu workers, chunkPrompts ${chunk}, same seeds${judgeEndpoint ? `, LLM judge answering after ${values['judge-latency-ms']} ms` : ', offline judge'})`);
    console.log('| mode | run wall s | mean s/step (all) | mean s/step (steps 2..) | rollout wait s/step | train s/step | held-out reward at 0 | held-out reward at end | staleness |');
    console.log('|---|---|---|---|---|---|---|---|---|');
    for (const o of out) {
      const st = o.rows.filter((r) => r.kind === 'step');
      const ev = o.rows.filter((r) => r.kind === 'eval');
      const fmt = (r?: Row) => (r ? `${(r.rewardMean ?? 0).toFixed(4)} ± ${(r.rewardSe ?? 0).toFixed(4)}` : '—');
      const later = st.slice(1);
      console.log(`| ${o.mode} | ${f1(o.wall)} | ${f1(mean(st.map((r) => r.seconds['total'] ?? 0)))} | ${f1(mean(later.map((r) => r.seconds['total'] ?? 0)))} | ${f1(mean(st.map((r) => r.seconds['rolloutWait'] ?? 0)))} | ${f1(mean(st.map((r) => r.seconds['train'] ?? 0)))} | ${fmt(ev.find((r) => r.step === 0))} | ${fmt(ev.find((r) => r.step === steps))} | ${st.map((r) => r.staleness ?? 0).join(',')} |`);
    }
  }
}

main().then(() => process.exit(0), (e) => {
  console.error(e);
  process.exit(1);
});
