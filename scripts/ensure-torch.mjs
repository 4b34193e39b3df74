// The PyTorch worker's Python environment (issue 32; python/cm2_torch): a virtual environment with exactly the pins of
// python/cm2_torch/requirements.txt, made once per machine and set of pins in the project cache
// (<cache>/torch/venv-<first 12 hex of the pins' sha256>; CM2_CACHE_DIR, default ~/.cache/cm2, as the other set-up
// scripts; setup-util.mjs `cachedVenv` says how it is made safe against killed and concurrent installs).
//
//   node scripts/ensure-torch.mjs [--print]     make sure it exists; --print: the venv's python
//
// Plain Node, no npm dependencies.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { cachedVenv, run } from './setup-util.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const REQUIREMENTS = path.join(root, 'python', 'cm2_torch', 'requirements.txt');
const venv = cachedVenv('torch', REQUIREMENTS);

/** The venv folder for the current pins (present or not). */
export const torchVenv = (env = process.env) => venv.dir(env);

/** The venv's python when the environment is complete, else undefined. */
export const torchPython = (env = process.env) => venv.python(env);

/** Makes the environment if it is missing; returns its python. */
export function ensureTorch(env = process.env, log = (l) => console.error(l)) {
  return venv.ensure({
    what: 'PyTorch worker environment',
    size: `${path.relative(root, REQUIREMENTS)}; several GB from PyPI`,
    install: (py) => run(py, ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '--no-input', '-r', REQUIREMENTS], { stdio: ['ignore', 'pipe', 'pipe'] }),
    check: (py) => run(py, ['-c', 'import torch, temporalio, safetensors, jsonschema; from importlib.metadata import version as v; print(torch.__version__, v("temporalio"))']),
  }, env, log);
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
