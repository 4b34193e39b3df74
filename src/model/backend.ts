/**
 * Picks the TensorFlow.js backend: tfjs-node-gpu → tfjs-node → wasm → cpu in `auto` mode, or the one forced by
 * config. tfjs-node(-gpu) are optional peer dependencies; wasm and cpu always exist. The backend actually active
 * is checked with tf.getBackend() after setting it, because tfjs falls back silently (e.g. forced wasm threads).
 */
import * as tf from '@tensorflow/tfjs';

export type BackendPref = 'auto' | 'tfjs-node-gpu' | 'tfjs-node' | 'wasm' | 'cpu';
export const backendPrefs: readonly BackendPref[] = ['auto', 'tfjs-node-gpu', 'tfjs-node', 'wasm', 'cpu'];

/** tfjs backend names registered by each choice. */
const tfName: Record<Exclude<BackendPref, 'auto'>, string> = { 'tfjs-node-gpu': 'tensorflow', 'tfjs-node': 'tensorflow', wasm: 'wasm', cpu: 'cpu' };

export class BackendUnavailableError extends Error {}

async function tryBackend(choice: Exclude<BackendPref, 'auto'>): Promise<string | null> {
  // Loading the package registers its backend; a missing optional package throws here.
  if (choice === 'tfjs-node-gpu') require('@tensorflow/tfjs-node-gpu');
  else if (choice === 'tfjs-node') require('@tensorflow/tfjs-node');
  else if (choice === 'wasm') require('@tensorflow/tfjs-backend-wasm');
  const ok = await tf.setBackend(tfName[choice]);
  await tf.ready();
  return ok && tf.getBackend() === tfName[choice] ? choice : null;
}

/**
 * Activates a backend and returns its name (the choice that won, e.g. 'wasm'). `log` receives one line per attempt
 * and the final choice. A forced choice that cannot be activated throws BackendUnavailableError.
 */
export async function selectBackend(pref: BackendPref = 'auto', log: (line: string) => void = () => {}): Promise<Exclude<BackendPref, 'auto'>> {
  const order: Exclude<BackendPref, 'auto'>[] = pref === 'auto' ? ['tfjs-node-gpu', 'tfjs-node', 'wasm', 'cpu'] : [pref];
  for (const choice of order) {
    let reason = 'tf.getBackend() reports another backend after setBackend';
    try {
      if (await tryBackend(choice)) {
        log(`tfjs backend: ${choice}${pref === 'auto' ? ' (auto)' : ' (forced)'}`);
        return choice;
      }
    } catch (e) {
      reason = (e as Error).message.split('\n')[0] ?? String(e);
    }
    if (pref !== 'auto') {
      throw new BackendUnavailableError(`tfjs backend '${choice}' is not available: ${reason}` +
        (choice.startsWith('tfjs-node') ? ` (install @tensorflow/${choice}, an optional peer dependency)` : ''));
    }
    log(`tfjs backend ${choice} unavailable: ${reason}`);
  }
  throw new BackendUnavailableError('no tfjs backend could be activated');
}
