// First step of `npm test` and `npm run demo` on a fresh clone: install the npm dependencies when they are
// missing or older than the lockfile. Plain Node, no dependencies (it runs before they exist).
//
// Two of these starting at once (a test run and a demo, two terminals) would each run `npm ci`, and one would delete
// node_modules under the other: the install holds a lock (a folder created atomically beside node_modules), and a
// second caller waits for it and then re-checks instead of installing again. A lock left by a killed process is taken
// over after 10 minutes or when its owner's pid is gone.
import { execSync } from 'node:child_process';
import { existsSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { acquireLock } from './setup-util.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const marker = path.join(root, 'node_modules', '.package-lock.json');
const lock = path.join(root, 'package-lock.json');
const lockDir = path.join(root, '.npm-install.lock');
const stale = () => !existsSync(marker) || (existsSync(lock) && statSync(lock).mtimeMs > statSync(marker).mtimeMs + 1000);

// A fresh machine's longest step, the MinIO build (about 10 minutes on 2 cores), starts first, in the background, so it
// overlaps the npm install and the TensorFlow fetch; `cm2 demo` and the test runner wait for it with progress lines.
// (The demo and the integration tests need the servers; `--no-servers` or CM2_NO_SERVER_BUILD=1 leaves them to when they
// are first needed.)
const t0 = Date.now();
if (!process.argv.includes('--no-servers') && process.env.CM2_NO_SERVER_BUILD !== '1') {
  const { startServerBuilds } = await import('./ensure-servers.mjs');
  try {
    startServerBuilds();
  } catch (e) {
    console.log(`could not start the server builds in the background (${e?.message ?? e}); they are built when first needed`);
  }
}

if (stale()) {
  acquireLock(lockDir, { staleMs: 10 * 60_000 });
  try {
    if (stale()) {
      console.log('installing npm dependencies (npm ci, once per checkout)...');
      const t = Date.now();
      execSync(existsSync(lock) ? 'npm ci --no-audit --no-fund' : 'npm install --no-audit --no-fund', { cwd: root, stdio: 'inherit' });
      console.log(`npm dependencies installed in ${((Date.now() - t) / 1000).toFixed(0)}s`);
    }
  } finally {
    rmSync(lockDir, { recursive: true, force: true });
  }
}

// Then TensorFlow's native runtime for @tensorflow/tfjs-node(-gpu), from PyPI's wheel (once per machine, cached);
// on any failure the WebAssembly backend stays in use and the reason is printed once.
const { ensureNative } = await import('./ensure-native.mjs');
ensureNative();
if (Date.now() - t0 > 5000) console.log(`set-up so far: ${((Date.now() - t0) / 1000).toFixed(0)}s`);
