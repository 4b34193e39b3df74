/**
 * Replay safety: histories of real runs, recorded from the Temporal server with
 *   npx tsx scripts/record-histories.ts <workflow id>...     (→ test/fixtures/histories/<workflow id>.binpb.gz)
 * are replayed against today's workflow code. A change that would make a running workflow nondeterministic (an
 * activity added, removed or reordered without `patched`, a changed timer or child) fails here, before it reaches a
 * deployment where days-long RL runs are in flight. The rule for changing workflow code is in docs/decisions.md.
 *
 * Recorded: a whole SmolLM2 pipeline (`smollm2-full1`: pipeline, prepare, checklist, SFT from before the
 * `sft-import-base` patch, 8 RL steps, BFCL), a demo pipeline (`smoke3`), a demo RL run (`tbase3`) and an
 * evaluation-only RL run (`rl.steps: 0`, scripts/rl-study.ts).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { temporal } from '@temporalio/proto';
import { type ReplayWorkerOptions, Worker } from '@temporalio/worker';
import { WORKFLOW_TRACING_MODULE } from '../../../src/infra/telemetry';
import { FIXTURES } from '../../helpers/paths';

const dir = path.join(FIXTURES, 'histories');

async function replayAll(extra: Pick<ReplayWorkerOptions, 'interceptors' | 'sinks'> = {}): Promise<void> {
  const files = readdirSync(dir).filter((f) => f.endsWith('.binpb.gz')).sort();
  assert.ok(files.length >= 8, `histories in ${dir}`);
  const histories = files.map((f) => ({ workflowId: f.replace(/\.binpb\.gz$/, ''), history: temporal.api.history.v1.History.decode(gunzipSync(readFileSync(path.join(dir, f)))) }));
  const failures: string[] = [];
  let replayed = 0;
  for await (const r of Worker.runReplayHistories({ workflowsPath: require.resolve('../../../src/workflows'), bundlerOptions: { ignoreModules: [] }, ...extra }, histories)) {
    replayed++;
    if (r.error) failures.push(`${r.workflowId}: ${r.error.message}`);
  }
  assert.equal(replayed, files.length);
  assert.deepEqual(failures, []);
}

test('recorded histories of real runs replay against the current workflow code', { timeout: 300_000 }, () => replayAll());

// Turning tracing on (src/infra/telemetry.ts) adds the SDK's OpenTelemetry interceptor module to the workflow bundle:
// workflows started without it (every recorded history) must replay with it, so tracing can be switched on under
// running RL runs. During a replay the interceptors create no spans, so the span sink is never called.
test('the same histories replay with the OpenTelemetry workflow interceptors in the bundle (tracing on)', { timeout: 300_000 }, async () => {
  let exported = 0;
  await replayAll({
    interceptors: { workflowModules: [require.resolve(WORKFLOW_TRACING_MODULE)] },
    sinks: { exporter: { export: { fn: () => void exported++ } } },
  });
  assert.equal(exported, 0, 'no spans from a replay');
});
