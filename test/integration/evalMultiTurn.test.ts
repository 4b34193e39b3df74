/**
 * BFCL multi-turn in the evaluation stage (issue 34 item 2), on Temporal + MinIO with the real bfcl-eval: a policy's
 * multi-turn entries are played in chunks on the gpu workers, each finished entry's transcript and verdict stored in
 * S3 at once; a worker SIGKILLed in the middle of a chunk leaves the entries it finished, and the chunk's retry (on
 * another worker) plays only the others; the results file names the bfcl-eval that scored it.
 *
 * The policy is a tiny random Qwen3 (its answers are not calls; the point is the bookkeeping) whose context holds a
 * multi-turn prompt (~8k tokens of function docs with the demo tokenizer).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { pipelineInput, startStage } from '../../src/cli/stages';
import { connectClient } from '../../src/infra/temporal';
import { evalKeys } from '../../src/run/layout';
import type { Cm2Config } from '../../src/run/config';
import { evalWorkflow, type EvalResult } from '../../src/stages/eval/workflow';
import { BfclResults, type ExampleResult } from '../../src/stages/eval/bfcl/score';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { startChildWorker, writeConfigFile, type ChildWorker } from '../helpers/processes';
import { writeTinySftPolicy } from '../helpers/rlFixture';
import path from 'node:path';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';

const bfcl = { categories: ['multi_turn_base', 'multi_turn_miss_func'], limit: 3, maxNewTokens: 6, batchSize: 2, chunkSize: 4 };

function config(tag: string): Cm2Config {
  return testConfig(uniqueId(tag), { eval: { bfcl }, temporal: { activity: { heartbeatTimeout: '6s', maxRetryInterval: '1s' } } });
}

test('multi-turn entries play in chunks; a worker killed mid-chunk leaves its finished entries, which the retry does not play again', { timeout: 600_000 }, async () => {
  const cfg = config('evmt');
  const store = testStore(cfg);
  const prefix = await writeTinySftPolicy(cfg, store, 16384);
  const client = await connectClient(cfg);
  const workers: ChildWorker[] = [];
  const logs = mkdtempSync(path.join(tmpdir(), 'cm2-evmt-'));
  console.log(`worker logs: ${logs}`);
  try {
    workers.push(await startChildWorker(writeConfigFile(cfg), 'workflows,api', {}, [], { logFile: path.join(logs, 'workflows.log') }));
    // a gpu worker that is killed once it has stored two episodes of its first chunk
    const first = await startChildWorker(writeConfigFile(cfg), 'gpu', {}, [], { logFile: path.join(logs, 'gpu-1.log') });
    workers.push(first);
    const resultKey = evalKeys.bfcl(cfg.run.id, 'sft');
    const chunk0 = (id: string) => evalKeys.bfclEpisode(resultKey, 0, id);
    const evalInput = { ...pipelineInput(cfg).stages.eval!, policies: [{ label: 'sft', policy: { kind: 'hf' as const, prefix } }] };
    const handle = await startStage(client, cfg, evalWorkflow, 'eval', [evalInput], 'test multi-turn BFCL');
    const ids = ['multi_turn_base_0', 'multi_turn_base_1', 'multi_turn_base_2', 'multi_turn_miss_func_0'];
    let stored: string[] = [];
    for (let i = 0; i < 600 && stored.length < 2; i++) {
      stored = [];
      for (const id of ids) if (await store.exists(chunk0(id))) stored.push(id);
      await new Promise((r) => setTimeout(r, 250));
    }
    assert.ok(stored.length >= 2 && stored.length < ids.length, `episodes stored before the kill: ${stored.join(', ')}`);
    first.proc.kill('SIGKILL');
    // Mark one finished entry's stored verdict: if the retry played it again, the mark would be gone.
    const marked = stored[0]!;
    const raw = JSON.parse(await store.getText(chunk0(marked))) as { result: ExampleResult; transcript: unknown };
    await store.putJson(chunk0(marked), { ...raw, result: { ...raw.result, detail: 'stored before the kill' } });
    workers.push(await startChildWorker(writeConfigFile(cfg), 'gpu', {}, [], { logFile: path.join(logs, 'gpu-2.log') }));
    const result = (await handle.result()) as EvalResult;
    const summary = result.bfcl[0]!;
    const results = BfclResults.parse(JSON.parse(await store.getText(summary.key)));
    assert.deepEqual(Object.keys(results.categories), bfcl.categories);
    assert.equal(results.overall.total, 6);
    assert.ok(results.multiTurn?.bfclEval, 'the results name the bfcl-eval that scored them');
    assert.equal(results.examples.find((e) => e.id === marked)!.detail, 'stored before the kill', 'a finished entry was not played again');
    for (const e of results.examples) {
      assert.equal((e.calls as unknown[]).length > 0, true, `${e.id}: its turns are recorded`);
      assert.ok(e.valid || e.bfcl?.startsWith('multi_turn:'), JSON.stringify(e));
    }
    assert.equal(summary.chunks!.length, 2, '6 entries in chunks of 4');
    // every entry's transcript is in S3 beside its verdict
    for (const e of results.examples) {
      const index = results.examples.indexOf(e) < 4 ? 0 : 1;
      const ep = JSON.parse(await store.getText(evalKeys.bfclEpisode(resultKey, index, e.id))) as { transcript: { id: string; messages: unknown[] } };
      assert.equal(ep.transcript.id, e.id);
      assert.ok(ep.transcript.messages.length > 0);
    }
  } finally {
    for (const w of workers) await w.kill('SIGTERM');
    await client.connection.close();
  }
});
