/**
 * Records workflow histories from the Temporal server as replay fixtures (test/unit/run/workflowReplay.test.ts):
 *
 *   npx tsx scripts/record-histories.ts <workflow id>...     (the local infrastructure's server, or TEMPORAL_ADDRESS)
 *
 * Each history (the latest run of the id) is written as binary protobuf, gzipped, to
 * test/fixtures/histories/<workflow id>.binpb.gz. Binary, not the CLI's JSON: in SDK 1.24 `historyFromJSON` loads a
 * protobufjs other than the one the history types were built with and rejects every JSON history ("type must be a
 * Type"). Histories hold workflow inputs and results (configs, S3 keys, metrics), never secrets: cm2 keeps those in
 * the environment of workers.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { temporal } from '@temporalio/proto';
import { loadConfig } from '../src/run/config';
import { useLocalInfraEnv } from '../src/infra/localInfra';
import { connectClient } from '../src/infra/temporal';

async function main(): Promise<void> {
  const ids = process.argv.slice(2);
  if (!ids.length) throw new Error('usage: npx tsx scripts/record-histories.ts <workflow id>...');
  useLocalInfraEnv();
  const client = await connectClient(loadConfig('config/demo.yaml'));
  const dir = path.join(__dirname, '..', 'test', 'fixtures', 'histories');
  mkdirSync(dir, { recursive: true });
  for (const id of ids) {
    const history = await client.workflow.getHandle(id).fetchHistory();
    const bytes = temporal.api.history.v1.History.encode(history).finish();
    const out = path.join(dir, `${id}.binpb.gz`);
    writeFileSync(out, gzipSync(bytes, { level: 9 }));
    console.log(`${out}: ${history.events?.length ?? 0} events`);
  }
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  },
);
