/**
 * Observability against the real servers: a `cm2 worker` child with `--metrics ADDR` and tracing configured runs a
 * small RL run (judge on a fake OpenAI endpoint with fixed token counts); its Prometheus endpoint serves the SDK's
 * worker metrics and the run's own, equal to what the run recorded in metrics.jsonl (each counted once), and the
 * OTLP receiver gets one trace from the client's workflow start through the workflow to its activities. A port that
 * is taken is reported and the worker runs without metrics; a malformed address fails before anything starts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { z } from 'zod';
import { startRl } from '../../src/cli/stages';
import { connectClient } from '../../src/infra/temporal';
import { freePort } from '../../src/infra/localInfra';
import { shutdownTracing } from '../../src/infra/telemetry';
import { runKey } from '../../src/run/layout';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { startChildWorker, writeConfigFile } from '../helpers/processes';
import { tinyRl, writeRlFixture } from '../helpers/rlFixture';
import { startFakeOpenAI, type FakeReply } from '../helpers/fakeOpenAI';
import { judgeReply } from '../helpers/fakeJudge';
import { type Sample, scrape, select, startOtlpReceiver, total } from '../helpers/telemetry';
import { REPO } from '../helpers/paths';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `fn` until it returns without throwing (the last error after `ms`). */
async function eventually<T>(fn: () => Promise<T>, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    try {
      return await fn();
    } catch (e) {
      if (Date.now() > end) throw e;
      await sleep(250);
    }
  }
}

const Row = z.looseObject({
  step: z.number(),
  kind: z.string(),
  judge: z.object({ calls: z.number(), cacheHits: z.number(), failed: z.number() }),
});
const StepRow = Row.extend({ reward: z.object({ mean: z.number() }), failedSamples: z.number(), rollouts: z.number(), granularity: z.string() });
const EvalRow = Row.extend({ rewardMean: z.number(), failed: z.number(), rollouts: z.number() });

test('cm2 worker --metrics: SDK and project metrics on /metrics equal the run\'s own records; traces from the client start to the activities', async () => {
  // Judge answers with fixed usage: 100 prompt tokens (20 of them cached), 10 completion tokens.
  const fake = await startFakeOpenAI({ behaviour: (req) => ({ ...(judgeReply(req.body, () => true) as Extract<FakeReply, { kind: 'content' }>), usage: { prompt_tokens: 100, completion_tokens: 10, cached_tokens: 20 } }) });
  const otlp = await startOtlpReceiver();
  const cfg = testConfig(uniqueId('obs'), {
    rl: tinyRl({ steps: 2, eval: { prompts: 2, every: 2 }, judge: { offlineChecks: 'never', batchItems: 4 } }),
    // 80 × $1 + 20 × $0.5 + 10 × $4 per 1M tokens = 130 micro-USD per call.
    llm: { roles: { judge: { baseUrl: fake.url, model: 'fake-judge', pricing: { inputPer1M: 1, cachedInputPer1M: 0.5, outputPer1M: 4 } } } },
    temporal: { activity: { heartbeatTimeout: '20s', maxRetryInterval: '1s' }, tracing: { otlpEndpoint: otlp.url } },
  });
  const store = testStore(cfg);
  await writeRlFixture(cfg, store);
  const address = `127.0.0.1:${await freePort()}`;
  const worker = await startChildWorker(writeConfigFile(cfg), undefined, {}, ['--metrics', address]);
  try {
    assert.match(worker.output(), new RegExp(`Prometheus metrics on http://${address.replace(/\./g, '\\.')}/metrics`));
    assert.match(worker.output(), /tracing workflows and activities to http:\/\/127\.0\.0\.1:\d+\/v1\/traces/);
    const client = await connectClient(cfg);
    const handle = await startRl(client, cfg);
    // During the run: the endpoint answers, with the worker's slots.
    const during = await eventually(async () => {
      const s = await scrape(address);
      assert.ok(select(s, 'temporal_worker_task_slots_available').length > 0, 'SDK worker metrics are served');
      return s;
    });
    assert.ok(during.length > 0);
    const result = await handle.result();
    assert.equal(result.steps, 2);

    const rows = (await store.getText(runKey(cfg.run.id, 'rl', 'metrics.jsonl'))).split('\n').filter(Boolean).map((l) => JSON.parse(l) as unknown);
    const steps = rows.map((r) => Row.parse(r)).filter((r) => r.kind === 'step').map((r) => StepRow.parse(r));
    const evals = rows.map((r) => Row.parse(r)).filter((r) => r.kind === 'eval').map((r) => EvalRow.parse(r));
    assert.deepEqual(steps.map((r) => r.step), [1, 2]);
    assert.deepEqual(evals.map((r) => r.step), [0, 2]);
    const judged = [...steps, ...evals];
    const calls = fake.requests.length;
    assert.ok(calls > 0, 'the judge was called');
    const run = { run_id: cfg.run.id };

    const m: Sample[] = await eventually(async () => {
      const s = await scrape(address);
      assert.equal(total(s, 'cm2_rl_step', run), 2);
      assert.equal(total(s, 'cm2_rl_heldout_step', run), 2);
      return s;
    });
    // SDK metrics.
    assert.ok(select(m, 'temporal_worker_task_slots_available').length > 0);
    assert.ok(total(m, 'temporal_activity_execution_latency_count') > 0, 'activity latency histogram');
    // Gauges, set by the workflow.
    const reward = select(m, 'cm2_rl_reward_mean', run);
    assert.deepEqual(reward.map((s) => s.labels['granularity']), ['trajectory']);
    assert.equal(reward[0]!.labels['workflowType'], 'rlWorkflow', 'SDK workflow tags');
    assert.ok(Math.abs(reward[0]!.value - steps[1]!.reward.mean) < 1e-9, `reward gauge ${reward[0]!.value} = step 2's ${steps[1]!.reward.mean}`);
    assert.ok(Math.abs(total(m, 'cm2_rl_heldout_reward_mean', run) - evals[1]!.rewardMean) < 1e-9);
    assert.deepEqual(select(m, 'cm2_rl_advantage_abs_mean', run).map((s) => s.labels['granularity']).sort(), ['step', 'trajectory', 'turn']);
    // Counters, added once per stored phase: the sums of metrics.jsonl.
    const sum = (f: (r: (typeof judged)[number]) => number) => judged.reduce((a, r) => a + f(r), 0);
    assert.equal(total(m, 'cm2_judge_calls_total', run), sum((r) => r.judge.calls));
    assert.equal(total(m, 'cm2_judge_calls_total', run), calls, 'every judge call reached the fake endpoint once');
    assert.equal(total(m, 'cm2_judge_cache_hits_total', run), sum((r) => r.judge.cacheHits));
    assert.equal(total(m, 'cm2_judge_failed_items_total', run), sum((r) => r.judge.failed));
    assert.equal(select(m, 'cm2_judge_calls_total', run)[0]!.labels['activityType'], 'rlJudge', 'SDK activity tags');
    assert.equal(total(m, 'cm2_rl_rollouts_total', { ...run, split: 'train' }), steps.reduce((a, r) => a + r.rollouts, 0));
    assert.equal(total(m, 'cm2_rl_failed_samples_total', { ...run, split: 'train' }), steps.reduce((a, r) => a + r.failedSamples, 0));
    assert.equal(select(m, 'cm2_rl_failed_samples_total', { ...run, split: 'train' }).length, 1, 'the series exists even at 0');
    assert.equal(total(m, 'cm2_rl_rollouts_total', { ...run, split: 'heldout' }), evals.reduce((a, r) => a + r.rollouts, 0));
    assert.equal(total(m, 'cm2_rl_failed_samples_total', { ...run, split: 'heldout' }), evals.reduce((a, r) => a + r.failed, 0));
    // LLM usage per role, counted as the answers arrived.
    const judge = { role: 'judge' };
    assert.equal(total(m, 'cm2_llm_calls_total', judge), calls);
    assert.equal(total(m, 'cm2_llm_tokens_total', { ...judge, kind: 'prompt' }), 100 * calls);
    assert.equal(total(m, 'cm2_llm_tokens_total', { ...judge, kind: 'completion' }), 10 * calls);
    assert.equal(total(m, 'cm2_llm_tokens_total', { ...judge, kind: 'cached_prompt' }), 20 * calls);
    assert.equal(total(m, 'cm2_llm_cost_microusd_total', judge), 130 * calls);
    assert.equal(total(m, 'cm2_llm_cache_hits_total', judge), 0);

    // Traces: the client's start, the workflow, its activities, in one trace.
    await shutdownTracing();
    const spans = await eventually(async () => {
      const names = new Set(otlp.spans.map((s) => s.name));
      for (const n of ['StartWorkflow:rlWorkflow', 'RunWorkflow:rlWorkflow', 'StartActivity:rlJudge', 'RunActivity:rlJudge', 'RunActivity:rlRollout', 'RunActivity:rlTrain', 'RunActivity:rlAdvantages']) {
        assert.ok(names.has(n), `span ${n} (have: ${[...names].sort().join(', ')})`);
      }
      return otlp.spans;
    });
    assert.ok(otlp.contentTypes.every((t) => t.startsWith('application/json')), otlp.contentTypes.join(', '));
    const start = spans.find((s) => s.name === 'StartWorkflow:rlWorkflow')!;
    assert.equal(start.service, 'cm2');
    const wf = spans.find((s) => s.name === 'RunWorkflow:rlWorkflow')!;
    assert.equal(wf.service, 'cm2-worker');
    assert.equal(wf.traceId, start.traceId, 'the workflow continues the client\'s trace');
    for (const s of spans.filter((x) => x.name.startsWith('RunActivity:'))) {
      assert.equal(s.traceId, start.traceId, `${s.name} is in the run's trace`);
      const parent = spans.find((p) => p.spanId === s.parentSpanId);
      assert.equal(parent?.name, s.name.replace('RunActivity:', 'StartActivity:'), `${s.name}'s parent is the workflow's ${parent?.name}`);
    }
  } finally {
    await worker.kill('SIGTERM');
    await fake.close();
    await otlp.close();
  }
});

test('cm2 worker --metrics: a port that is taken is reported and the worker runs without metrics; a malformed address fails at once', async () => {
  const cfg = testConfig(uniqueId('obs-port'));
  const file = writeConfigFile(cfg);
  const blocker = net.createServer();
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
  const port = (blocker.address() as net.AddressInfo).port;
  const worker = await startChildWorker(file, 'workflows,api', {}, ['--metrics', `127.0.0.1:${port}`]);
  try {
    assert.match(worker.output(), new RegExp(`cm2 worker: cannot serve Prometheus metrics on 127\\.0\\.0\\.1:${port} \\(.*Address already in use.*\\); this worker runs without metrics`));
    assert.match(worker.output(), /cm2 worker polling/);
    await sleep(500);
    assert.equal(worker.proc.exitCode, null, 'still running');
  } finally {
    await worker.kill('SIGTERM');
    blocker.close();
  }
  // Through the environment variable, the same check as the config file: a malformed value is a config error (exit 2).
  for (const [args, env, where] of [[['--metrics', 'localhost'], {}, '--metrics'], [[], { CM2_METRICS_ADDR: '9464' }, 'temporal.metrics.prometheus']] as const) {
    const r = spawnSync(process.execPath, [path.join(REPO, 'bin', 'cm2.js'), 'worker', '--config', file, '--queues', 'api', ...args], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, new RegExp(`${where.replace(/\./g, '\\.')}: IP:PORT or localhost:PORT`));
    assert.doesNotMatch(r.stdout, /polling/);
  }
});
