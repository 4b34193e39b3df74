// Writes the configuration reference, generated from the zod schema (src/cli/configReference.ts), into README.md
// between `<!-- config-reference:start -->` and `<!-- config-reference:end -->` (inserted at the end of the
// `## Configuration` section when absent). Only what lies between the markers is replaced.
//
// Run as: npm run docs:config [-- --check]
//   --check  change nothing; exit 1 when README.md is out of date
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { configReference, readmeWithReference } from '../src/cli/configReference';

const readmePath = path.resolve(__dirname, '..', 'README.md');
const check = process.argv.slice(2).includes('--check');

const current = readFileSync(readmePath, 'utf8');
const reference = configReference();
const next = readmeWithReference(current, reference);
const size = `${reference.trimEnd().split('\n').length} lines, ${Buffer.byteLength(reference)} bytes`;

if (next === current) {
  console.log(`README.md: the configuration reference is up to date (${size})`);
} else if (check) {
  console.error('README.md: the configuration reference is out of date with the config schema; run `npm run docs:config`');
  process.exitCode = 1;
} else {
  writeFileSync(readmePath, next);
  console.log(`README.md: configuration reference written (${size})`);
}
