// The experiment trackers' Python environment (issue 35; python/trackers/requirements.txt): MLflow's tracking server,
// TensorBoard and W&B's client: W&B runs are written by W&B's own client (python/trackers/wandb_batch.py, run by the
// api worker that syncs); the tracking tests start a real `mlflow server` and read TensorBoard's and W&B's files back
// with their own readers; and users who want them beside cm2 (`$(node scripts/ensure-trackers.mjs --print) -m mlflow
// server`, `… -m tensorboard.main --logdir <dir>`). Made once per machine and set of pins in the project cache
// (<cache>/trackers/venv-<first 12 hex of the pins' sha256>; setup-util.mjs `cachedVenv`).
//
//   node scripts/ensure-trackers.mjs [--print]     make sure it exists; --print: its python
//
// Plain Node, no npm dependencies.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { cachedVenv, run } from './setup-util.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const REQUIREMENTS = path.join(root, 'python', 'trackers', 'requirements.txt');
const venv = cachedVenv('trackers', REQUIREMENTS);

/** The venv's python when the environment is complete, else undefined. */
export const trackersPython = (env = process.env) => venv.python(env);

/** Makes the environment if it is missing; returns its python. */
export function ensureTrackers(env = process.env, log = (l) => console.error(l)) {
  const pip = ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '--no-input'];
  return venv.ensure({
    what: 'trackers environment (MLflow, TensorBoard, W&B)',
    size: `${path.relative(root, REQUIREMENTS)}; ~1 GB from PyPI`,
    install: (py) => run(py, [...pip, '-r', REQUIREMENTS], { stdio: ['ignore', 'pipe', 'pipe'] }),
    check: (py) => run(py, ['-c', [
      'from importlib.metadata import version as v',
      'import mlflow.server',
      'from tensorboard.backend.event_processing.event_accumulator import EventAccumulator',
      'import wandb',
      'print("mlflow", v("mlflow"), "tensorboard", v("tensorboard"), "wandb", v("wandb"))',
    ].join('; ')]),
  }, env, log);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    const py = ensureTrackers();
    if (process.argv.includes('--print')) console.log(py);
  } catch (e) {
    console.error(`trackers environment: ${e.message}`);
    process.exit(1);
  }
}
