// The BFCL bridge's Python environment (issue 34; python/bfcl_bridge): a virtual environment with PyPI's `bfcl-eval`
// (installed without its dependencies: they are every vendor SDK it benchmarks) and the small set of pins in
// python/bfcl_bridge/requirements.txt that its multi-turn backends, its checker and its prompting decoder import,
// made once per machine and set of pins in the project cache (<cache>/bfcl/venv-<first 12 hex of the pins' sha256>;
// setup-util.mjs `cachedVenv`). BFCL's data (the multi-turn questions, possible answers and function docs) come with
// the package: nothing of it is copied into this repository.
//
//   node scripts/ensure-bfcl.mjs [--print]     make sure it exists; --print: the venv's python
//
// Plain Node, no npm dependencies.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { cachedVenv, run } from './setup-util.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const REQUIREMENTS = path.join(root, 'python', 'bfcl_bridge', 'requirements.txt');
const venv = cachedVenv('bfcl', REQUIREMENTS);

/** The bfcl-eval release the requirements name (`# BFCL_WHEEL: bfcl-eval==X`), installed without its dependencies. */
export function bfclWheel() {
  const m = /^# BFCL_WHEEL: (\S+)$/m.exec(readFileSync(REQUIREMENTS, 'utf8'));
  if (!m) throw new Error(`${REQUIREMENTS}: no "# BFCL_WHEEL: name==version" line`);
  return m[1];
}

/** The venv folder for the current pins (present or not). */
export const bfclVenv = (env = process.env) => venv.dir(env);

/** The venv's python when the environment is complete, else undefined. */
export const bfclPython = (env = process.env) => venv.python(env);

/** Makes the environment if it is missing; returns its python. */
export function ensureBfcl(env = process.env, log = (l) => console.error(l)) {
  const pip = ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '--no-input'];
  return venv.ensure({
    what: 'BFCL environment',
    size: `${path.relative(root, REQUIREMENTS)} and ${bfclWheel()}; ~150 MB from PyPI`,
    install: (py) => {
      run(py, [...pip, '-r', REQUIREMENTS], { stdio: ['ignore', 'pipe', 'pipe'] });
      run(py, [...pip, '--no-deps', bfclWheel()], { stdio: ['ignore', 'pipe', 'pipe'] });
    },
    check: (py) => run(py, ['-c', [
      'from importlib.metadata import version as v',
      'import bfcl_eval.model_handler.utils',
      'from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker',
      'print("bfcl-eval", v("bfcl-eval"))',
    ].join('; ')]),
  }, env, log);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    const py = ensureBfcl();
    if (process.argv.includes('--print')) console.log(py);
  } catch (e) {
    console.error(`BFCL environment: ${e.message}`);
    process.exit(1);
  }
}
