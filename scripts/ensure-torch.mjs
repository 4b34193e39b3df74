// The PyTorch worker's Python environment (issue 32; python/cm2_torch): a virtual environment with exactly the pins of
// python/cm2_torch/requirements.txt, made once per machine and set of pins in the project cache
// (<cache>/torch/venv-<first 12 hex of the pins' sha256>; CM2_CACHE_DIR, default ~/.cache/cm2, as the other set-up
// scripts). A venv is used only once complete: it is built beside its final name and renamed into place, so a killed
// install never leaves a half environment, and one install runs at a time (a lock folder with the owner's pid, taken
// over when that pid is gone).
//
//   node scripts/ensure-torch.mjs [--print]     make sure it exists; --print: the venv's python
//
// Plain Node, no npm dependencies.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { acquireLock, cacheRoot, python, run } from './setup-util.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const REQUIREMENTS = path.join(root, 'python', 'cm2_torch', 'requirements.txt');

/** The venv folder for the current pins (present or not). */
export function torchVenv(env = process.env) {
  const pins = readFileSync(REQUIREMENTS);
  const id = createHash('sha256').update(pins).digest('hex').slice(0, 12);
  return path.join(cacheRoot(env), 'torch', `venv-${id}`);
}

/** The venv's python when the environment is complete, else undefined. */
export function torchPython(env = process.env) {
  const venv = torchVenv(env);
  const py = path.join(venv, 'bin', 'python');
  return existsSync(path.join(venv, '.complete')) && existsSync(py) ? py : undefined;
}

/** Makes the environment if it is missing; returns its python. */
export function ensureTorch(env = process.env, log = (l) => console.error(l)) {
  const done = torchPython(env);
  if (done) return done;
  const venv = torchVenv(env);
  mkdirSync(path.dirname(venv), { recursive: true });
  const lock = `${venv}.lock`;
  if (!acquireLock(lock, { pollMs: 2000, ready: () => torchPython(env) !== undefined })) return torchPython(env);
  try {
    const already = torchPython(env);
    if (already) return already;
    const staging = `${venv}.partial-${process.pid}`;
    rmSync(staging, { recursive: true, force: true });
    const t0 = Date.now();
    log(`PyTorch worker environment: creating ${venv} (${path.relative(root, REQUIREMENTS)}; several GB from PyPI, once per machine)...`);
    run(python('to make the PyTorch environment'), ['-m', 'venv', staging]);
    const py = path.join(staging, 'bin', 'python');
    run(py, ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '--no-input', '-r', REQUIREMENTS], { stdio: ['ignore', 'pipe', 'pipe'] });
    const versions = run(py, ['-c', 'import torch, temporalio, safetensors, jsonschema; from importlib.metadata import version as v; print(torch.__version__, v("temporalio"))']).trim();
    writeFileSync(path.join(staging, '.complete'), `${versions}\n`);
    // After the rename, bin/python works (a venv finds itself from pyvenv.cfg beside it) but the console scripts'
    // shebangs still name the staging folder: tools are run as modules (`python -m torch.distributed.run`, not torchrun).
    renameSync(staging, venv);
    log(`PyTorch worker environment ready in ${((Date.now() - t0) / 1000).toFixed(0)}s: torch, temporalio ${versions}`);
    return torchPython(env);
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    const py = ensureTorch();
    if (process.argv.includes('--print')) console.log(py);
  } catch (e) {
    console.error(`PyTorch worker environment: ${e.message}`);
    process.exit(1);
  }
}
