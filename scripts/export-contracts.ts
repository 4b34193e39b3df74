/**
 * Writes the train queue's activity contracts (src/activities/contracts.ts) to python/cm2_torch/cm2_torch/contracts.json,
 * the JSON Schemas the Python worker validates against. Run it after changing an activity's zod shape:
 *
 *   npx tsx scripts/export-contracts.ts [--check]     (--check: exit 1 when the committed file differs)
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { CONTRACTS_PATH, contractsText } from '../src/activities/contracts';
import { projectRoot, resolveFromRoot } from '../src/infra/binaries';

const CONTRACTS_FILE = resolveFromRoot(CONTRACTS_PATH);

const text = contractsText();
if (process.argv.includes('--check')) {
  const committed = existsSync(CONTRACTS_FILE) ? readFileSync(CONTRACTS_FILE, 'utf8') : '';
  if (committed !== text) {
    console.error(`${path.relative(projectRoot, CONTRACTS_FILE)} is not what the zod shapes give: run npx tsx scripts/export-contracts.ts`);
    process.exit(1);
  }
  console.log('contracts up to date');
} else {
  mkdirSync(path.dirname(CONTRACTS_FILE), { recursive: true });
  writeFileSync(CONTRACTS_FILE, text);
  console.log(`wrote ${path.relative(projectRoot, CONTRACTS_FILE)} (${text.length} bytes)`);
}
