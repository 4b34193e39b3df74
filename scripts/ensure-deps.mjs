// First step of `npm test` and `npm run demo` on a fresh clone: install the npm dependencies when they are
// missing or older than the lockfile. Plain Node, no dependencies (it runs before they exist).
import { execSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const marker = path.join(root, 'node_modules', '.package-lock.json');
const lock = path.join(root, 'package-lock.json');
const stale = !existsSync(marker) || (existsSync(lock) && statSync(lock).mtimeMs > statSync(marker).mtimeMs + 1000);
if (stale) {
  console.log('installing npm dependencies (npm ci)...');
  execSync(existsSync(lock) ? 'npm ci --no-audit --no-fund' : 'npm install --no-audit --no-fund', { cwd: root, stdio: 'inherit' });
}

// Then TensorFlow's native runtime for @tensorflow/tfjs-node(-gpu), from PyPI's wheel (once per machine, cached);
// on any failure the WebAssembly backend stays in use and the reason is printed once.
const { ensureNative } = await import('./ensure-native.mjs');
ensureNative();
