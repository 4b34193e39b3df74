/**
 * Fan-out of the checklist stage over many examples: wall time, examples per second, and the size of the workflow
 * history (events, bytes) — the number that must stay small however many examples there are.
 *
 *   npx tsx bench/checklist-fanout.ts [--examples 2000] [--shard-size 50] [--concurrency 4]
 *
 * Uses the local infrastructure (started if needed, like `cm2 infra up`) and the offline annotator of the demo
 * world, so it measures orchestration and S3 cost, not an LLM. Each invocation is a fresh run id.
 */
import { parseArgs } from 'node:util';
import { temporal } from '@temporalio/proto';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { loadConfig } from '../src/run/config';
import { infraEnv, startInfra } from '../src/infra/localInfra';
import { ObjectStore } from '../src/storage/store';
import { prepareKeys } from '../src/run/layout';
import { connectClient } from '../src/infra/temporal';
import { startWorkers } from '../src/workers';
import { startChecklist } from '../src/cli/stages';
import { generateDemoDataset } from '../src/demo/generator';

async function main() {
  const { values } = parseArgs({ options: { examples: { type: 'string', default: '2000' }, 'shard-size': { type: 'string', default: '50' }, concurrency: { type: 'string', default: '4' } } });
  const n = Number(values.examples);
  const state = await startInfra({ log: (l) => console.log(l) });
  for (const [k, v] of Object.entries(infraEnv(state))) process.env[k] ??= v;
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  const runId = `bench-ckl-${Date.now().toString(36)}`;
  const cfg = loadConfig('config/demo.yaml', { overrides: { run: { id: runId }, checklist: { shardSize: Number(values['shard-size']), shardConcurrency: Number(values.concurrency) } } });
  const store = ObjectStore.fromConfig(cfg.s3);
  const t0 = Date.now();
  await store.putJsonl(prepareKeys.rl(runId), generateDemoDataset({ seed: 99, count: n, brokenRate: 0 }));
  const seeded = Date.now();
  const workers = await startWorkers(cfg);
  try {
    const client = await connectClient(cfg);
    const t1 = Date.now();
    const handle = await startChecklist(client, cfg);
    const report = await handle.result();
    const t2 = Date.now();
    const history = await handle.fetchHistory();
    const events = history.events?.length ?? 0;
    // Wire size (protobuf), as the server counts it against its history size limit.
    const bytes = temporal.api.history.v1.History.encode(history).finish().length;
    const t3 = Date.now();
    const again = await (await startChecklist(client, cfg)).result();
    const t4 = Date.now();
    console.log(`\nchecklist fan-out (offline annotator, ${cfg.checklist.shardSize} examples/shard, ${cfg.checklist.shardConcurrency} shards in parallel)`);
    console.log(`examples              ${n} (seeded in ${((seeded - t0) / 1000).toFixed(1)} s)`);
    console.log(`annotated / failed    ${report.annotated} / ${report.failed}  (${report.items} items, ${report.meanItemsPerTurn.toFixed(2)} per turn)`);
    console.log(`stage wall time       ${((t2 - t1) / 1000).toFixed(1)} s  (${(n / ((t2 - t1) / 1000)).toFixed(0)} examples/s)`);
    console.log(`history               ${events} events, ${(bytes / 1024).toFixed(0)} KiB  (${(events / Math.max(1, n)).toFixed(3)} events/example)`);
    console.log(`re-run (all done)     ${((t4 - t3) / 1000).toFixed(1)} s, ${again.annotated} annotated, nothing re-annotated`);
  } finally {
    await workers.shutdown();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
