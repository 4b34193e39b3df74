// The npm registry mirror reachable from this project's machines carries only the Linux builds of
// platform-specific optional packages (e.g. @swc/core-darwin-arm64 answers 404). `npm install` then writes a
// lock file without those entries, and `npm ci` refuses it as "out of sync". This script adds an entry for
// each missing platform package (version, os, cpu, optional) so the lock file is complete for every platform;
// npm skips them on a non-matching platform and fetches them by name and version where they match.
// Run it after any `npm install` that changes package-lock.json.
import { readFileSync, writeFileSync } from 'node:fs';

const PLATFORM = {
  'darwin-arm64': { os: ['darwin'], cpu: ['arm64'] },
  'darwin-x64': { os: ['darwin'], cpu: ['x64'] },
  'linux-arm-gnueabihf': { os: ['linux'], cpu: ['arm'] },
  'linux-arm64-gnu': { os: ['linux'], cpu: ['arm64'] },
  'linux-arm64-musl': { os: ['linux'], cpu: ['arm64'] },
  'linux-ppc64-gnu': { os: ['linux'], cpu: ['ppc64'] },
  'linux-s390x-gnu': { os: ['linux'], cpu: ['s390x'] },
  'linux-x64-gnu': { os: ['linux'], cpu: ['x64'] },
  'linux-x64-musl': { os: ['linux'], cpu: ['x64'] },
  'win32-arm64-msvc': { os: ['win32'], cpu: ['arm64'] },
  'win32-ia32-msvc': { os: ['win32'], cpu: ['ia32'] },
  'win32-x64-msvc': { os: ['win32'], cpu: ['x64'] },
};

const file = new URL('../package-lock.json', import.meta.url);
const lock = JSON.parse(readFileSync(file, 'utf8'));
let added = 0;
for (const [path, entry] of Object.entries({ ...lock.packages })) {
  for (const [dep, version] of Object.entries(entry.optionalDependencies ?? {})) {
    const base = path === '' ? '' : `${path}/`;
    const candidates = [`${base}node_modules/${dep}`, `node_modules/${dep}`];
    if (candidates.some((c) => lock.packages[c])) continue;
    const suffix = Object.keys(PLATFORM).find((p) => dep.endsWith(`-${p}`));
    if (!suffix) {
      console.warn(`lock-platform-stubs: ${dep} missing and not a known platform package; left alone`);
      continue;
    }
    lock.packages[`node_modules/${dep}`] = { version, optional: true, ...PLATFORM[suffix] };
    added++;
  }
}
lock.packages = Object.fromEntries(Object.entries(lock.packages).sort(([a], [b]) => (a === '' ? -1 : b === '' ? 1 : a < b ? -1 : a > b ? 1 : 0)));
writeFileSync(file, `${JSON.stringify(lock, null, 2)}\n`);
console.log(`lock-platform-stubs: added ${added} entr${added === 1 ? 'y' : 'ies'}`);
