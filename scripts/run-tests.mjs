// The test command. Starts an isolated Temporal dev server and MinIO (fresh temp folder, free ports),
// runs every test file with node's test runner against them, stops them, and closes with the line
// "N passed, N failed". `--unit` runs the unit tests only, without servers; other arguments filter files
// by substring (e.g. `npm test -- filters`).
//
// Run as: node --import tsx scripts/run-tests.mjs [--unit] [filter...]
import { run } from 'node:test';
import { spec } from 'node:test/reporters';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const unitOnly = args.includes('--unit');
const filters = args.filter((a) => !a.startsWith('--'));

function collect(dir) {
  const out = [];
  for (const name of readdirSync(dir)) {
    const full = path.join(dir, name);
    if (statSync(full).isDirectory()) out.push(...collect(full));
    else if (name.endsWith('.test.ts')) out.push(full);
  }
  return out.sort();
}

let files = collect(path.join(root, 'test', 'unit'));
if (!unitOnly) files.push(...collect(path.join(root, 'test', 'integration')));
if (filters.length) files = files.filter((f) => filters.some((s) => f.includes(s)));
// The longest files first (CI, 2026-12-03: 4–11 minutes each, against ~1 for most): with two at a time, a long file
// started last ran alone at the end while the other slot stood idle. The rest keep their order.
const LONGEST = ['chaos', 'realLlmServer', 'bfclMultiTurnServer', 'tau2Server', 'demoGpuKill', 'vllmEngine', 'tracking', 'torchTrain'];
const rank = (f) => {
  const i = LONGEST.indexOf(path.basename(f, '.test.ts'));
  return i < 0 ? LONGEST.length : i;
};
files = files.map((f, i) => [f, i]).sort((a, b) => rank(a[0]) - rank(b[0]) || a[1] - b[1]).map(([f]) => f);

let infra;
let infraDir;
const needsServers = files.some((f) => f.includes(`${path.sep}integration${path.sep}`));
if (needsServers) {
  const { ensureBinaries } = await import('../src/infra/binaries.ts');
  const bins = await ensureBinaries();
  process.env.CM2_TEMPORAL_BIN ??= bins.temporal;
  process.env.CM2_MINIO_BIN ??= bins.minio;
  const { startInfra, freePort, infraEnv, stopInfra } = await import('../src/infra/localInfra.ts');
  infraDir = mkdtempSync(path.join(tmpdir(), 'cm2-test-infra-'));
  const [temporalPort, uiPort, minioPort, minioConsolePort] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const t0 = Date.now();
  infra = await startInfra({ dir: infraDir, temporalPort, uiPort, minioPort, minioConsolePort });
  Object.assign(process.env, infraEnv(infra, {}), { CM2_TEST_INFRA_DIR: infraDir });
  console.log(`test infrastructure up in ${((Date.now() - t0) / 1000).toFixed(1)}s: Temporal ${infra.temporal.address}, MinIO ${infra.minio.endpoint}`);
  const stop = async () => {
    await stopInfra(infraDir);
    rmSync(infraDir, { recursive: true, force: true });
  };
  process.on('SIGINT', () => stop().finally(() => process.exit(130)));
  infra.stop = stop;
}

let passed = 0;
let failed = 0;
let skipped = 0;
// Per test file; CM2_TEST_TIMEOUT_MIN raises it for the long bench versions (e.g. CM2_CHAOS_STEPS=400).
// CM2_TEST_NAME=regex runs only the tests whose names match (node:test's testNamePatterns).
const namePattern = process.env.CM2_TEST_NAME ? { testNamePatterns: [new RegExp(process.env.CM2_TEST_NAME)] } : {};
const stream = run({ files, concurrency: Number(process.env.CM2_TEST_CONCURRENCY ?? 2), timeout: Number(process.env.CM2_TEST_TIMEOUT_MIN ?? 15) * 60_000, ...namePattern });
// Count tests, not suites (a describe block is reported as a test of type 'suite').
const isSuite = (e) => e.details?.type === 'suite';
stream.on('test:pass', (e) => {
  if (isSuite(e)) return;
  if (e.skip || e.todo) skipped++;
  else passed++;
});
stream.on('test:fail', (e) => {
  // A failing suite whose tests all passed is a hook or load failure: count it too.
  if (!isSuite(e) || e.details?.error?.failureType !== 'subtestsFailed') failed++;
});
stream.compose(spec).pipe(process.stdout);
await new Promise((resolve) => stream.on('end', resolve));
// Let the reporter flush.
await new Promise((resolve) => setTimeout(resolve, 100));
if (infra) await infra.stop();
console.log(`\n${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
process.exitCode = failed > 0 || passed === 0 ? 1 : 0;
