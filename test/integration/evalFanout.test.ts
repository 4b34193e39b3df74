/**
 * The SFT format check and BFCL evaluation fan out over every gpu worker (issue 16), on Temporal + MinIO:
 * - run A on one worker process, run B on two (one of them gpu-only, SIGKILLed in the middle of a BFCL chunk): the
 *   same format-check results and the same BFCL results file (but time stamps), equal to one pass in this process
 *   (the format check without chunks; BFCL as `cm2 eval bfcl` cuts the same chunks);
 * - a worker loads a policy once for all its chunks; both processes ran chunks; the killed chunk was retried on the other worker and no finished chunk ran again
 *   (history: attempt 1 for every other chunk), and a repeated evaluation stage redoes no chunk (`once`).
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import type { Client } from '@temporalio/client';
import { loadChatTokenizer } from '../../src/chat/tokenize';
import { pipelineInput, startSft, startStage } from '../../src/cli/stages';
import { generateDemoDataset } from '../../src/demo/generator';
import { bfclDataDir } from '../../src/infra/binaries';
import { connectClient } from '../../src/infra/temporal';
import { selectBackend } from '../../src/model/net/backend';
import { loadStoredHfModel } from '../../src/storage/policyStore';
import { evalKeys, runKey, sftKeys } from '../../src/run/layout';
import type { Cm2Config } from '../../src/run/config';
import type { SftReport } from '../../src/stages/sft/shapes';
import { baseModel } from '../../src/stages/sft/trainActivity';
import { evaluateToolCalls } from '../../src/stages/sft/evaluate';
import { evalWorkflow } from '../../src/stages/eval/workflow';
import type { EvalResult } from '../../src/stages/eval/workflow';
import { evaluateBfcl, ModelPolicy } from '../../src/stages/eval/bfcl/runner';
import { BfclResults } from '../../src/stages/eval/bfcl/score';
import type { ObjectStore } from '../../src/storage/store';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { startChildWorker, writeConfigFile, type ChildWorker } from '../helpers/processes';

const root = path.resolve(__dirname, '..', '..');
const examples = generateDemoDataset({ seed: 41, count: 48, brokenRate: 0 });
const bfcl = { categories: ['simple_python', 'irrelevance'], limit: 5, maxNewTokens: 12, batchSize: 2, chunkSize: 2 };

function config(tag: string): Cm2Config {
  return testConfig(uniqueId(tag), {
    sft: {
      backend: 'auto',
      base: { kind: 'init', seed: 5, config: { model_type: 'qwen3', hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8, tie_word_embeddings: true, rope_theta: 10000, max_position_embeddings: 2048 } },
      epochs: 1, microBatch: 2, gradAccum: 2, maxSeqLen: 512, checkpointEvery: 10, peakLr: 5e-3,
      // 16 prompts in chunks of 8 (the generation batch): the same batches as one pass.
      eval: { prompts: 16, maxNewTokens: 12, chunkSize: 8 },
    },
    eval: { bfcl },
    temporal: { activity: { heartbeatTimeout: '4s', maxRetryInterval: '1s' } },
  });
}

async function prepareRun(cfg: Cm2Config, store: ObjectStore): Promise<void> {
  await store.putJsonl(runKey(cfg.run.id, 'data', 'cold_start.jsonl'), examples.slice(0, 8));
  await store.putJsonl(runKey(cfg.run.id, 'data', 'rl.jsonl'), examples.slice(8));
}

/** BFCL of the policy folder `prefix`, as the pipeline's evaluation stage runs it. */
async function runEval(client: Client, cfg: Cm2Config, prefix: string): Promise<EvalResult> {
  const evalInput = { ...pipelineInput(cfg).stages.eval!, policies: [{ label: 'sft', policy: { kind: 'hf' as const, prefix } }] };
  return (await startStage(client, cfg, evalWorkflow, 'eval', [evalInput], 'test BFCL')).result();
}

/** The SFT stage, then BFCL of `policyPrefix` (default: the SFT policy). */
async function runStages(client: Client, cfg: Cm2Config, policyPrefix?: string): Promise<{ sft: SftReport; evalResult: EvalResult }> {
  const sft = await (await startSft(client, cfg)).result();
  return { sft, evalResult: await runEval(client, cfg, policyPrefix ?? sft.train.finalPrefix) };
}

/** Attempts of each chunk activity of a workflow (from its history's started events). */
async function chunkAttempts(client: Client, workflowId: string, type: string): Promise<number[]> {
  const history = await client.workflow.getHandle(workflowId).fetchHistory();
  const scheduled = new Map<string, string>();
  const attempts: number[] = [];
  for (const e of history.events ?? []) {
    if (e.activityTaskScheduledEventAttributes?.activityType?.name === type) scheduled.set(String(e.eventId), type);
    const started = e.activityTaskStartedEventAttributes;
    if (started && scheduled.has(String(started.scheduledEventId))) attempts.push(started.attempt ?? 1);
  }
  return attempts;
}

const stableResults = (text: string) => {
  const r = BfclResults.parse(JSON.parse(text));
  return { ...r, createdAt: '', seconds: 0 };
};
const withoutTimings = <T extends { chunks?: unknown }>(r: T | undefined) => {
  const { chunks: _chunks, ...rest } = r!;
  return rest;
};

test('the format check and BFCL give the same results on one or two gpu workers, a killed chunk is redone alone', { timeout: 600_000 }, async () => {
  const a = config('fan-a');
  const b = { ...config('fan-b'), temporal: a.temporal }; // same task queues: run B's second worker joins run A's
  const store = testStore(a);
  await prepareRun(a, store);
  await prepareRun(b, store);
  const client = await connectClient(a);
  const workers: ChildWorker[] = [];
  try {
    // Run A: one worker process (workflows, api, gpu).
    workers.push(await startChildWorker(writeConfigFile(a)));
    const runA = await runStages(client, a);
    const policyPrefix = runA.sft.train.finalPrefix;
    // One worker: each policy loaded once for all its chunks (2 per format check, 5 for BFCL).
    const outA = workers[0]!.output();
    const loads = (re: RegExp) => outA.split('\n').filter((l) => re.test(l)).length;
    assert.equal(loads(new RegExp(`\\[sft ${a.run.id}\\] eval base: loading`)), 1);
    assert.equal(loads(new RegExp(`\\[sft ${a.run.id}\\] eval sft: loading`)), 1);
    assert.equal(loads(/\[eval\] loading policy .*sft\/final/), 1);

    // Run B: a second, gpu-only worker process; it is killed as soon as it starts a BFCL chunk.
    const second = await startChildWorker(writeConfigFile(b), 'gpu');
    workers.push(second);
    let killedInChunk: string | undefined;
    second.proc.stdout!.on('data', (d: Buffer) => {
      const m = /\[eval\] sft chunk (\d+): \d+ examples on/.exec(d.toString());
      if (m && !killedInChunk) {
        killedInChunk = m[1];
        second.proc.kill('SIGKILL');
      }
    });
    const runB = await runStages(client, b, policyPrefix);
    assert.ok(killedInChunk !== undefined, 'the second worker took a BFCL chunk');

    // The format check: the same results with one or two workers, and equal to one pass without chunks.
    assert.equal(runB.sft.train.model.sha256, runA.sft.train.model.sha256, 'same SFT weights');
    for (const which of ['base', 'sft'] as const) {
      assert.deepEqual(withoutTimings(runB.sft[which]), withoutTimings(runA.sft[which]), which);
      assert.equal(runA.sft[which]!.chunks!.length, 2);
    }
    const pids = new Set([workers[0]!.proc.pid, second.proc.pid].map(String));
    const sftWorkers = new Set([...runB.sft.base!.chunks!, ...runB.sft.sft!.chunks!].map((c) => c.worker.split(':').pop()!));
    assert.deepEqual(sftWorkers, pids, 'both worker processes ran format-check chunks');
    await selectBackend('auto');
    const tok = loadChatTokenizer(path.join(root, a.sft.tokenizerDir));
    const held = examples.slice(8).slice(0, a.sft.eval.prompts * 2);
    for (const [which, load] of [['base', async () => baseModel(a.sft, tok)], ['sft', () => loadStoredHfModel(store, policyPrefix)]] as const) {
      const model = await load();
      try {
        const one = await evaluateToolCalls(model, tok, held, { maxNewTokens: a.sft.eval.maxNewTokens, limit: a.sft.eval.prompts });
        const got = runA.sft[which]!;
        assert.deepEqual([got.prompts, got.wellFormedShare, got.correctNameShare, got.thinkShare], [one.prompts, one.wellFormedShare, one.correctNameShare, one.thinkShare], `${which}: one pass`);
        assert.deepEqual(got.examples, one.samples.slice(0, 6).map(({ closedThink: _t, ...s }) => s));
      } finally {
        model.dispose();
      }
    }

    // BFCL: the same results file with one or two workers (but time stamps), equal to `cm2 eval bfcl`'s chunks here.
    const [sumA, sumB] = [runA.evalResult.bfcl[0]!, runB.evalResult.bfcl[0]!];
    assert.equal(sumA.key, evalKeys.bfcl(a.run.id, 'sft'));
    assert.equal(sumA.chunks!.length, 5, '10 examples in chunks of 2');
    const [textA, textB] = [await store.getText(sumA.key), await store.getText(sumB.key)];
    assert.deepEqual(stableResults(textB), stableResults(textA));
    const model = await loadStoredHfModel(store, policyPrefix);
    try {
      const local = await evaluateBfcl(new ModelPolicy(model, tok, { kind: 'hf', prefix: policyPrefix }, bfcl), { ...bfcl, dataDir: bfclDataDir() });
      assert.deepEqual(stableResults(textA), { ...local, createdAt: '', seconds: 0 });
    } finally {
      model.dispose();
    }

    // The killed chunk ran again on the first worker; every other chunk ran once.
    const attempts = await chunkAttempts(client, `cm2-${b.run.id}-eval`, 'evalBfclChunk');
    assert.equal(attempts.length, 5);
    assert.deepEqual(attempts.filter((n) => n > 1).length, 1, `attempts ${attempts.join(',')}`);
    const redone = sumB.chunks!.find((c) => String(c.index) === killedInChunk)!;
    assert.equal(redone.worker.split(':').pop(), String(workers[0]!.proc.pid));

    // The evaluation stage again (its results lost): the chunks are not run again, the merge writes the same file.
    await store.remove(sumB.key);
    await store.remove(sumB.key.replace(/\.json$/, '.summary.json'));
    const again = (await runEval(client, b, policyPrefix)).bfcl[0]!;
    assert.deepEqual(again.chunks, sumB.chunks, 'stored chunks, same timings');
    assert.deepEqual(stableResults(await store.getText(again.key)), stableResults(textB));
    assert.ok(await store.exists(sftKeys.evalChunk(b.run.id, 'base', 1)));
  } finally {
    for (const w of workers) await w.kill('SIGTERM');
  }
});
