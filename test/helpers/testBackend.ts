/** Switching the tensor backend for a block of tests: the wasm/cpu op path or native TensorFlow (tfjs-node). */
import assert from 'node:assert/strict';
import * as tf from '@tensorflow/tfjs';
import { readNativeStatus } from '../../src/model/net/backend';

export type TestBackend = 'cpu' | 'native';

/** The `skip` option of a describe block for `backend` (native needs tfjs-node installed). */
export const skipBackend = (backend: TestBackend): string | false => (backend === 'native' && !readNativeStatus().ok ? 'native TensorFlow is not installed' : false);

/** Activates `backend`; returns the backend active before, for `tf.setBackend` in an `after` hook. */
export async function activateBackend(backend: TestBackend): Promise<string> {
  const previous = tf.getBackend() ?? 'cpu';
  if (backend === 'native') {
    process.env.TF_OVERRIDE_GLOBAL_THREADPOOL ??= '1'; // as selectBackend does: sessions get their own thread pools
    require('@tensorflow/tfjs-node');
    assert.ok(await tf.setBackend('tensorflow'), 'tensorflow backend did not activate');
  } else await tf.setBackend('cpu');
  return previous;
}
