/**
 * The RL workflow on Temporal + MinIO at test scale (tiny random policy, demo-world examples with offline checklists):
 * steps with continue-as-new, checkpoints and metrics; steering with the plain `temporal` CLI (query, validated
 * update, pause/resume/stop signals); a worker killed in the middle of a training step, and the run ends with
 * exactly the weights of an uninterrupted run.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { z } from 'zod';
import { WorkflowFailedError, WorkflowNotFoundError } from '@temporalio/client';
import { startRl } from '../../src/cli/stages';
import { controlCommand } from '../../src/cli/pipelineCommand';
import { ConfigError } from '../../src/run/config';
import { CheckpointManifest, stepFolder } from '../../src/storage/checkpoints';
import { connectClient } from '../../src/infra/temporal';
import { type ObjectStore } from '../../src/storage/store';
import { rlKeys, runKey, stageWorkflowId } from '../../src/run/layout';
import { exactnessBackends, testConfig, testStore, uniqueId } from '../helpers/env';
import { startChildWorker, writeConfigFile } from '../helpers/processes';
import { tinyRl, writeRlFixture } from '../helpers/rlFixture';
import { loadPolicy } from '../../src/storage/policyStore';
import { parseSafetensors } from '../../src/model/formats/safetensors';
import { replies, startFakeOpenAI } from '../helpers/fakeOpenAI';
import { judgeReply } from '../helpers/fakeJudge';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const temporal = (...args: string[]): string =>
  execFileSync(process.env['CM2_TEMPORAL_BIN'] ?? 'temporal', [...args, '--address', process.env['TEMPORAL_ADDRESS']!, '--namespace', 'default'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

const Row = z.looseObject({ step: z.number(), kind: z.string() });
async function metricRows(store: ObjectStore, runId: string) {
  return (await store.getText(runKey(runId, 'rl', 'metrics.jsonl'))).split('\n').filter(Boolean).map((l) => Row.parse(JSON.parse(l)));
}

test('RL workflow: steps across continue-as-new, checkpoints and metrics; steered with temporal workflow query|update|signal', async () => {
  const cfg = testConfig(uniqueId('rl'), { rl: tinyRl({ steps: 5 }), temporal: { activity: { heartbeatTimeout: '20s', maxRetryInterval: '1s' } } });
  const store = testStore(cfg);
  await writeRlFixture(cfg, store);
  const worker = await startChildWorker(writeConfigFile(cfg));
  try {
    const client = await connectClient(cfg);
    const handle = await startRl(client, cfg);
    const firstRun = (await handle.describe()).runId;
    const id = stageWorkflowId(cfg.run.id, 'rl');
    assert.equal(handle.workflowId, id);

    // Pause as soon as it runs; the query shows it; the current step finishes, then nothing moves.
    temporal('workflow', 'signal', '--workflow-id', id, '--name', 'pause');
    const status = () => JSON.parse(temporal('workflow', 'query', '--workflow-id', id, '--name', 'rlStatus', '--output', 'json')).queryResult[0] as { step: number; paused: boolean; phase: string; hp: { lr: number; granularity: string } };
    assert.equal(status().paused, true);

    // A validated update: a bad value is rejected, a good one is applied from the next step.
    assert.throws(() => temporal('workflow', 'update', 'execute', '--workflow-id', id, '--name', 'setHyperparameters', '--input', '{"lr": -1}'), /lr must be/);
    assert.throws(() => temporal('workflow', 'update', 'execute', '--workflow-id', id, '--name', 'setHyperparameters', '--input', '{"granularity": "episode"}'), /granularity must be/);
    const out = temporal('workflow', 'update', 'execute', '--workflow-id', id, '--name', 'setHyperparameters', '--input', '{"lr": 0.002, "granularity": "turn"}');
    assert.match(out, /0\.002/);
    // The reply names the first step that uses it: the one in progress if its advantages were not scheduled yet.
    const fromStep = Number(/"?fromStep"?\s*:\s*(\d+)/.exec(out)?.[1]);
    assert.ok(fromStep >= 1 && fromStep <= 2, `the update applies from step ${fromStep}: ${out}`);
    // The step in progress finishes first (on a busy machine that can take seconds): wait for the loop to reach the pause.
    for (const until = Date.now() + 60_000; status().phase !== 'paused'; await sleep(300)) {
      assert.ok(Date.now() < until, 'the loop reaches the pause within a minute');
    }
    const paused = status();
    assert.equal(paused.hp.lr, 0.002);
    assert.equal(paused.hp.granularity, 'turn');
    const stepWhilePaused = paused.step;
    await sleep(3000);
    assert.equal(status().step, stepWhilePaused, 'no step while paused');
    temporal('workflow', 'signal', '--workflow-id', id, '--name', 'resume');

    const result = await client.workflow.getHandle(id).result();
    assert.equal(result.steps, 5);
    assert.equal(result.stopped, false);
    assert.notEqual((await client.workflow.getHandle(id).describe()).runId, firstRun, 'continued as new');

    const rows = await metricRows(store, cfg.run.id);
    const steps = rows.filter((r) => r.kind === 'step').map((r) => r.step);
    assert.deepEqual(steps, [1, 2, 3, 4, 5], 'each step recorded exactly once');
    for (const r of rows.filter((x) => x.kind === 'step')) {
      const updated = r.step >= fromStep;
      assert.equal(r['lr'], updated ? 0.002 : 1e-3, `step ${r.step} ran with the ${updated ? 'updated' : 'initial'} lr`);
      assert.equal(r['granularity'], updated ? 'turn' : 'trajectory');
      for (const k of ['rollout', 'judge', 'advantages', 'train', 'checkpoint', 'orchestration']) {
        const v = (r['seconds'] as Record<string, number>)[k];
        assert.ok(typeof v === 'number' && Number.isFinite(v) && v >= 0, `step ${r.step}: seconds.${k} = ${v}`);
      }
    }
    const evals = rows.filter((r) => r.kind === 'eval').map((r) => r.step);
    assert.deepEqual(evals, [0, 2, 4, 5]);
    for (let s = 1; s <= 5; s++) {
      const m = await store.getJson(`${stepFolder(rlKeys.checkpoints(cfg.run.id), s)}/manifest.json`, CheckpointManifest);
      assert.equal(m.step, s);
      assert.ok(m.files['model.safetensors'] && m.files['optimizer.safetensors']);
    }

    // Stop: a running training ends after its current step, with a final evaluation.
    const cfg2 = { ...cfg, run: { id: `${cfg.run.id}-s` }, rl: { ...cfg.rl, steps: 50 } };
    await writeRlFixture(cfg2, store);
    const h2 = await startRl(client, cfg2);
    while (status2() < 1) await sleep(300);
    // `cm2 pause|unpause RUN` reach the RL workflow of a run started stage by stage (no pipeline workflow).
    await controlCommand(cfg2, cfg2.run.id, 'pause');
    while (!paused2()) await sleep(300);
    await controlCommand(cfg2, cfg2.run.id, 'unpause');
    while (paused2()) await sleep(300);
    assert.notEqual(process.exitCode, 1);
    temporal('workflow', 'signal', '--workflow-id', h2.workflowId, '--name', 'stop');
    const r2 = await h2.result();
    assert.equal(r2.stopped, true);
    assert.ok(r2.steps < 50);
    function paused2(): boolean {
      try {
        return JSON.parse(temporal('workflow', 'query', '--workflow-id', h2.workflowId, '--name', 'rlStatus', '--output', 'json')).queryResult[0].paused as boolean;
      } catch {
        return false;
      }
    }
    function status2(): number {
      try {
        return JSON.parse(temporal('workflow', 'query', '--workflow-id', h2.workflowId, '--name', 'rlStatus', '--output', 'json')).queryResult[0].step as number;
      } catch {
        return 0;
      }
    }
  } finally {
    await worker.kill('SIGTERM');
  }
});

const LORA = { rank: 4, alpha: 8 };
const killCases = [
  ...exactnessBackends().map((backend) => ({ backend, lora: null })),
  // LoRA on the first backend: the adapter and its AdamW state are what the checkpoint holds.
  { backend: exactnessBackends()[0]!, lora: LORA },
];
for (const { backend, lora } of killCases) test(`RL: a worker killed during a train step never applies an update twice or skips one (weights equal an uninterrupted run) [${backend}${lora ? ', LoRA' : ''}]`, async () => {
  const env = { CM2_BACKEND: backend };
  const over = { rl: tinyRl({ steps: 3, eval: { prompts: 0 }, lora }), temporal: { activity: { heartbeatTimeout: '4s', maxRetryInterval: '1s' } } };
  const a = testConfig(uniqueId('rla'), over);
  const b = testConfig(uniqueId('rlb'), over);
  const store = testStore(a);
  await writeRlFixture(a, store);
  await writeRlFixture(b, store);
  const client = await connectClient(a);

  let worker = await startChildWorker(writeConfigFile(a), undefined, env);
  let ra;
  try {
    ra = await (await startRl(client, a)).result();
    assert.match(worker.output(), new RegExp(`tfjs backend: ${backend} `), 'the worker trained on the backend under test');
  } finally {
    await worker.kill('SIGTERM');
  }

  worker = await startChildWorker(writeConfigFile(b), undefined, env);
  try {
    const hb = await startRl(client, b);
    // Kill the worker while step 2's update is running.
    for (;;) {
      const pending = (await hb.describe()).raw.pendingActivities ?? [];
      if (pending.some((p) => p.activityType?.name === 'rlTrain') && (await store.exists(`${stepFolder(rlKeys.checkpoints(b.run.id), 1)}/manifest.json`))) break;
      await sleep(5);
    }
    await worker.kill('SIGKILL');
    worker = await startChildWorker(writeConfigFile(b), undefined, env);
    const rb = await hb.result();
    assert.equal(rb.steps, ra.steps);
  } finally {
    await worker.kill('SIGTERM');
  }
  const shaOf = async (runId: string) => (await metricRows(store, runId)).filter((r) => r.kind === 'step').map((r) => [r.step, r['weightsSha256']]);
  assert.deepEqual(await shaOf(b.run.id), await shaOf(a.run.id), 'same weights after every step');
  const finalA = await store.getJson(`${stepFolder(rlKeys.checkpoints(a.run.id), 3)}/manifest.json`, CheckpointManifest);
  const finalB = await store.getJson(`${stepFolder(rlKeys.checkpoints(b.run.id), 3)}/manifest.json`, CheckpointManifest);
  const weights = lora ? 'adapter_model.safetensors' : 'model.safetensors';
  assert.ok(finalA.files[weights], `the checkpoint holds ${weights}`);
  if (lora) assert.equal(finalA.files['model.safetensors'], undefined, 'a LoRA checkpoint holds no full weights');
  assert.equal(finalB.files[weights]!.sha256, finalA.files[weights]!.sha256);
  assert.equal(finalB.files['optimizer.safetensors']!.sha256, finalA.files['optimizer.safetensors']!.sha256);
  if (lora) {
    // The RL policy of a LoRA run loads as its base with the adapter merged: a policy, like a full one.
    const model = await loadPolicy(store, { kind: 'ckpt', manifestKey: `${stepFolder(rlKeys.checkpoints(a.run.id), 3)}/manifest.json`, step: 3 });
    const base = await loadPolicy(store, { kind: 'hf', prefix: a.rl.policyPrefix ?? runKey(a.run.id, 'sft', 'final') });
    const baseWeights = base.namedWeights();
    const moved = [...model.namedWeights()].filter(([name, w]) => !w.data.every((x, i) => x === baseWeights.get(name)!.data[i])).map(([n]) => n);
    // (Whether any moved depends on the rewards: B starts at 0 and only a non-zero advantage moves it.)
    assert.ok(moved.every((n) => /_proj\.weight$/.test(n)), `only adapted projections moved: ${moved.slice(0, 4).join(', ')}`);
    const moments = parseSafetensors(await store.getVerified(finalA.files['optimizer.safetensors']!));
    assert.equal(moments.metadata?.['step'], '3', 'three LoRA updates in the AdamW state');
    assert.ok([...moments.tensors.keys()].every((n) => /^[mv]\.base_model\.model\..*(lora_A|lora_B)\.weight$/.test(n)), 'moments of the adapter only, by PEFT name');
    model.dispose();
    base.dispose();
  }
});

test('RL: a judge outage in the middle of a run (endpoint down, then back) delays it; no step lost, none duplicated, no sample failed', async () => {
  let down = false;
  let judged = 0;
  let refused = 0;
  const fake = await startFakeOpenAI({
    behaviour: (req) => {
      if (down) {
        refused++;
        return replies.status(503, { message: 'judge endpoint down' });
      }
      judged++;
      return judgeReply(req.body, () => true);
    },
  });
  const cfg = testConfig(uniqueId('rlj'), {
    rl: tinyRl({ steps: 4, eval: { prompts: 0 }, judge: { offlineChecks: 'never', batchItems: 4 } }),
    llm: { roles: { judge: { baseUrl: fake.url, model: 'fake-judge', maxTransportRetries: 0, timeoutMs: 5000 } } },
    temporal: { activity: { heartbeatTimeout: '20s', maxRetryInterval: '1s' } },
  });
  const store = testStore(cfg);
  await writeRlFixture(cfg, store);
  const worker = await startChildWorker(writeConfigFile(cfg));
  try {
    const client = await connectClient(cfg);
    const handle = await startRl(client, cfg);
    // Take the endpoint down once step 1 is recorded, for a few seconds.
    while (!(await store.exists(runKey(cfg.run.id, 'rl', 'metrics.jsonl')))) await sleep(50);
    down = true;
    while (refused < 3) await sleep(50);
    await sleep(3000);
    down = false;
    const result = await handle.result();
    assert.equal(result.steps, 4);
    assert.ok(refused >= 3 && judged > 0, `refused ${refused}, judged ${judged}`);
    const rows = (await metricRows(store, cfg.run.id)).filter((r) => r.kind === 'step');
    assert.deepEqual(rows.map((r) => r.step), [1, 2, 3, 4]);
    for (const r of rows) {
      assert.equal(r['failedSamples'], 0, `step ${r.step}: no sample failed because of the outage`);
      const judge = r['judge'] as { calls: number; failed: number };
      assert.equal(judge.failed, 0);
      assert.ok(judge.calls > 0, `step ${r.step} judged by the LLM`);
    }
  } finally {
    await worker.kill('SIGTERM');
    await fake.close();
  }
});

test('RL: `rl.steps: 0` only evaluates the policy; `rl.eval.atStart: false` skips the step-0 evaluation (studies evaluate a shared SFT policy once); `rl.eval.on: validation` evaluates on prompts that are neither held out nor trained on', async () => {
  const cfg = testConfig(uniqueId('rl-eval'), { rl: tinyRl({ steps: 0 }) });
  const store = testStore(cfg);
  await writeRlFixture(cfg, store);
  const worker = await startChildWorker(writeConfigFile(cfg));
  try {
    const client = await connectClient(cfg);
    const only = await (await startRl(client, cfg)).result();
    assert.equal(only.steps, 0);
    assert.deepEqual(only.evals.map((e) => e.step), [0]);
    assert.deepEqual((await metricRows(store, cfg.run.id)).map((r) => [r.kind, r.step]), [['eval', 0]]);
    assert.equal(await store.exists(`${stepFolder(rlKeys.checkpoints(cfg.run.id), 1)}/manifest.json`), false, 'no training step, no checkpoint');

    const cfg2 = { ...cfg, run: { id: `${cfg.run.id}-late` }, rl: { ...cfg.rl, steps: 2, eval: { ...cfg.rl.eval, every: 1, atStart: false } } };
    await writeRlFixture(cfg2, store);
    const late = await (await startRl(client, cfg2)).result();
    assert.equal(late.steps, 2);
    assert.deepEqual(late.evals.map((e) => e.step), [1, 2]);
    assert.deepEqual((await metricRows(store, cfg2.run.id)).map((r) => [r.kind, r.step]), [['step', 1], ['eval', 1], ['step', 2], ['eval', 2]]);

    // A hyperparameter search evaluates on the validation prompts (after the held-out ones); neither set is trained on.
    const cfg3 = { ...cfg, run: { id: `${cfg.run.id}-val` }, rl: { ...cfg.rl, steps: 3, promptsPerStep: 4, eval: { ...cfg.rl.eval, prompts: 2, validation: 3, on: 'validation' as const, every: 3 } } };
    await writeRlFixture(cfg3, store);
    const val = await (await startRl(client, cfg3)).result();
    assert.deepEqual(val.evals.map((e) => e.step), [0, 3]);
    const kept = (await store.getJsonl<{ uuid: string }>(rlKeys.folder(cfg3.run.id, 'data', 'examples.jsonl'))).map((e) => e.uuid);
    const uuidsOf = async (folder: string) => new Set((await store.getJson<{ rows: { id: string }[] }>(rlKeys.advantages(folder))).rows.map((r) => r.id.slice(0, r.id.lastIndexOf('#'))));
    assert.deepEqual([...(await uuidsOf(rlKeys.eval(cfg3.run.id, 0)))].sort(), kept.slice(2, 5).sort(), 'evaluated on the validation prompts');
    const trained = new Set<string>();
    for (let step = 1; step <= 3; step++) for (const u of await uuidsOf(rlKeys.step(cfg3.run.id, step))) trained.add(u);
    assert.ok(trained.size >= 4 && trained.size <= kept.length - 5, `${trained.size} training prompts`);
    for (const u of kept.slice(0, 5)) assert.ok(!trained.has(u), `held-out or validation prompt ${u} was trained on`);
    const evalRow = (await metricRows(store, cfg3.run.id)).find((r) => r.kind === 'eval') as Record<string, unknown>;
    assert.equal(evalRow.on, 'validation');
  } finally {
    await worker.kill('SIGTERM');
  }
});

test('RL on real (non-demo) data without a simulator endpoint fails at start-up naming llm.roles.simulator, never trains on zeros', async () => {
  const realData = { source: { kind: 'file', paths: ['/data/bank-and-shop.jsonl'] } };
  const cfg = testConfig(uniqueId('rl-nosim'), { rl: tinyRl({ steps: 1, eval: { prompts: 0 } }), data: realData });
  const store = testStore(cfg);
  const client = await connectClient(cfg);
  // No executable tool (the data is not the demo world's) and no simulator: refused before any workflow starts.
  assert.throws(() => startRl(client, cfg), (e: unknown) => e instanceof ConfigError && /llm\.roles\.simulator\.baseUrl: RL needs a tool simulator/.test(e.message));
  await assert.rejects(client.workflow.getHandle(stageWorkflowId(cfg.run.id, 'rl')).describe(), WorkflowNotFoundError);

  // The config names one demo-world tool as executable; the data (a real dataset: its own uuids, no demo `meta`)
  // offers others too, which nothing answers: the RL data preparation refuses the run, once, not retried.
  const named = { ...cfg, run: { id: `${cfg.run.id}-named` }, rl: { ...cfg.rl, executableTools: ['get_weather'] } };
  await writeRlFixture(named, store, 16, ({ meta: _meta, ...ex }) => ({ ...ex, uuid: `bank-${ex.uuid}` }));
  const worker = await startChildWorker(writeConfigFile(named));
  try {
    const err = await (await startRl(client, named)).result().then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof WorkflowFailedError, `the run fails: ${String(err)}`);
    const messages: string[] = [];
    for (let e: unknown = err; e instanceof Error; e = e.cause) messages.push(e.message);
    const why = messages.find((m) => m.includes('llm.roles.simulator has no endpoint'));
    assert.ok(why, `the failure names the role: ${messages.join(' | ')}`);
    assert.match(why, /no executable answers: \w+ \(\d+ of \d+ examples\)/);
    assert.doesNotMatch(why, /get_weather \(/, 'the tool the config names is executable');
    assert.equal(await store.exists(rlKeys.folder(named.run.id, 'data', 'result.json')), false, 'no RL data, no step');
  } finally {
    await worker.kill('SIGTERM');
  }
});
