/**
 * Picks the TensorFlow.js backend. `auto`: the native TensorFlow backend that `scripts/ensure-native.mjs` installed
 * (tfjs-node-gpu when a GPU was visible, else tfjs-node; it records the outcome in node_modules/.cm2-native.json),
 * then wasm, then cpu. A forced choice is tried as asked; the environment variable CM2_BACKEND turns `auto` into a
 * forced choice for the whole process (e.g. a worker: CM2_BACKEND=wasm). The backend actually active is checked with
 * tf.getBackend() after setting it, because tfjs falls back silently (e.g. forced wasm threads).
 */
import * as tf from '@tensorflow/tfjs';
import { readFileSync } from 'node:fs';
import path from 'node:path';

export type BackendPref = 'auto' | 'tfjs-node-gpu' | 'tfjs-node' | 'wasm' | 'cpu';
export const backendPrefs: readonly BackendPref[] = ['auto', 'tfjs-node-gpu', 'tfjs-node', 'wasm', 'cpu'];
export type BackendName = Exclude<BackendPref, 'auto'>;

/** tfjs backend names registered by each choice. */
const tfName: Record<BackendName, string> = { 'tfjs-node-gpu': 'tensorflow', 'tfjs-node': 'tensorflow', wasm: 'wasm', cpu: 'cpu' };

export class BackendUnavailableError extends Error {}

/** What scripts/ensure-native.mjs recorded (node_modules/.cm2-native.json). */
export interface NativeStatus {
  ok: boolean;
  backend: 'tfjs-node' | 'tfjs-node-gpu' | null;
  reason?: string;
  tensorflow?: string;
  package?: string;
  libDir?: string;
  cudaLibraryDirs?: string[];
  checkedAt?: string;
  /** the revision of cm2's patch compiled into the addon (per-session thread pools), when it applied */
  addon?: string;
}

export const nativeStatusFile = path.resolve(__dirname, '..', '..', '..', 'node_modules', '.cm2-native.json');

export function readNativeStatus(): NativeStatus {
  try {
    return JSON.parse(readFileSync(nativeStatusFile, 'utf8')) as NativeStatus;
  } catch {
    return { ok: false, backend: null, reason: 'not installed (run `npm test` or `npm run demo` once, or `node scripts/ensure-native.mjs`)' };
  }
}

async function tryBackend(choice: BackendName): Promise<string | null> {
  // TensorFlow's C++ logging (oneDNN and CPU-feature notices) is noise here; the user's own setting wins.
  if (choice.startsWith('tfjs-node')) process.env['TF_CPP_MIN_LOG_LEVEL'] ??= '2';
  // Without it the first process on a GPU reserves nearly all its memory and the next one (another worker, a cm2
  // command) runs out.
  if (choice === 'tfjs-node-gpu') process.env['TF_FORCE_GPU_ALLOW_GROWTH'] ??= 'true';
  // Every TensorFlow session gets an intra-op pool of its own (read once, when TensorFlow creates its first device),
  // so the KV-cached decoding graph can run on one thread while training keeps every core (decodeThreads in
  // decodeGraph.ts; the addon takes a session's thread count through cm2's patch, scripts/ensure-native.mjs).
  if (choice.startsWith('tfjs-node')) process.env['TF_OVERRIDE_GLOBAL_THREADPOOL'] ??= '1';
  // Loading the package registers its backend; a missing optional package throws here.
  if (choice === 'tfjs-node-gpu') require('@tensorflow/tfjs-node-gpu');
  else if (choice === 'tfjs-node') require('@tensorflow/tfjs-node');
  else if (choice === 'wasm') require('@tensorflow/tfjs-backend-wasm');
  const ok = await tf.setBackend(tfName[choice]);
  await tf.ready();
  return ok && tf.getBackend() === tfName[choice] ? choice : null;
}

/** The order `auto` tries, and why native is not in it when it isn't. */
export function autoOrder(status: NativeStatus = readNativeStatus()): { order: BackendName[]; note?: string } {
  if (status.ok && status.backend) return { order: [status.backend, 'wasm', 'cpu'] };
  return { order: ['wasm', 'cpu'], note: `native TensorFlow unavailable: ${status.reason ?? 'unknown reason'}` };
}

let active: { name: BackendName; why: string } | undefined;

/** The backend this process activated, and why (undefined before selectBackend). */
export function activeBackend(): { name: BackendName; why: string } | undefined {
  return active;
}

/**
 * Activates a backend and returns its name (the choice that won, e.g. 'tfjs-node'). `log` receives one line per
 * failed attempt and the final choice with its reason. A forced choice that cannot be activated throws
 * BackendUnavailableError.
 */
export async function selectBackend(pref: BackendPref = 'auto', log: (line: string) => void = () => {}): Promise<BackendName> {
  const fromEnv = process.env['CM2_BACKEND'];
  if (pref === 'auto' && fromEnv && fromEnv !== 'auto') {
    if (!(backendPrefs as readonly string[]).includes(fromEnv)) throw new BackendUnavailableError(`CM2_BACKEND=${fromEnv}: expected one of ${backendPrefs.join(', ')}`);
    pref = fromEnv as BackendPref;
  }
  const { order, note } = pref === 'auto' ? autoOrder() : { order: [pref] };
  if (note) log(note);
  for (const choice of order) {
    let reason = 'tf.getBackend() reports another backend after setBackend';
    try {
      if (await tryBackend(choice)) {
        const why = pref !== 'auto' ? (fromEnv === pref ? 'forced by CM2_BACKEND' : 'forced') : choice.startsWith('tfjs-node') ? `auto: native TensorFlow ${readNativeStatus().tensorflow ?? ''} installed`.trim() : `auto: ${note ?? 'fallback'}`;
        active = { name: choice, why };
        log(`tfjs backend: ${choice} (${why})`);
        return choice;
      }
    } catch (e) {
      reason = (e as Error).message.split('\n')[0] ?? String(e);
    }
    if (pref !== 'auto') {
      throw new BackendUnavailableError(`tfjs backend '${choice}' is not available: ${reason}` +
        (choice.startsWith('tfjs-node') ? ` (node scripts/ensure-native.mjs installs it; status: ${readNativeStatus().reason ?? 'ok'})` : ''));
    }
    log(`tfjs backend ${choice} unavailable: ${reason}`);
  }
  throw new BackendUnavailableError('no tfjs backend could be activated');
}
