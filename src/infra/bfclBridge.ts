/**
 * The BFCL bridge process (issue 34; python/bfcl_bridge/bridge.py): PyPI's `bfcl-eval` in a long-lived Python process,
 * one per worker, spoken to in JSON lines. It executes a model's calls against BFCL's own multi-turn backends and
 * scores entries with BFCL's own checker; src/stages/eval/bfcl/multiTurn.ts drives the episodes.
 *
 * The Python comes from scripts/ensure-bfcl.mjs (a cached venv; `CM2_BFCL_PYTHON` names another interpreter with
 * `bfcl-eval` installed). The process gets a minimal environment (PATH, HOME, locale, TMPDIR), never the worker's:
 * BFCL evaluates the model's call strings with Python's `eval`, so nothing the model writes can read a secret from
 * its environment. A process that dies is started again on the next request, with the categories loaded before; the
 * requests it had in flight fail with the reason (sessions it held are gone: an episode that loses its session fails,
 * and its chunk is retried without the entries that finished).
 */
import path from 'node:path';
import { ensureBfcl } from '../../scripts/ensure-bfcl.mjs';
import { projectRoot } from './binaries';
import { BridgeError, PythonBridge } from './pythonBridge';

export class BfclBridgeError extends BridgeError {
  override readonly name = 'BfclBridgeError';
}

const SCRIPT = path.join(projectRoot, 'python', 'bfcl_bridge', 'bridge.py');

/** The interpreter to run the bridge with: CM2_BFCL_PYTHON, else the project's cached venv (made when missing). */
export function bfclPythonPath(env: NodeJS.ProcessEnv = process.env, log: (line: string) => void = (l) => console.error(l)): string {
  if (env['CM2_BFCL_PYTHON']) return env['CM2_BFCL_PYTHON'];
  const py = ensureBfcl(env, log);
  if (!py) throw new BfclBridgeError('the BFCL environment could not be made (node scripts/ensure-bfcl.mjs says why)');
  return py;
}

export interface BfclBridgeOptions {
  python?: string;
  log?: (line: string) => void;
}

/** A client of one bridge process (src/infra/pythonBridge.ts): a restarted process loads the categories again first. */
export class BfclBridge extends PythonBridge {
  /** Categories loaded so far: a restarted process loads them again before anything else. */
  private readonly loaded = new Set<string>();

  constructor(opts: BfclBridgeOptions = {}) {
    super({
      name: 'the BFCL bridge',
      script: SCRIPT,
      python: () => opts.python ?? bfclPythonPath(process.env, opts.log),
      error: BfclBridgeError,
      replay: () => [...this.loaded].map((category) => ({ op: 'load', category })),
      noise: /^-+$|^ID: /,
    });
  }

  override request<T extends Record<string, unknown> = Record<string, unknown>>(op: string, body: Record<string, unknown> = {}): Promise<T> {
    if (op === 'load' && typeof body['category'] === 'string') this.loaded.add(body['category']);
    return super.request<T>(op, body);
  }
}

let shared: BfclBridge | undefined;

/** The worker's bridge (one process per worker process). */
export function sharedBfclBridge(opts: BfclBridgeOptions = {}): BfclBridge {
  shared ??= new BfclBridge(opts);
  return shared;
}
