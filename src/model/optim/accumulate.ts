/** Gradient accumulation over micro-batches, shared by the SFT and GRPO trainers. */
import * as tf from '@tensorflow/tfjs';

/** Adds one micro-batch's gradients into `sums` (by parameter name), then disposes them. */
export function accumulateGradients(sums: Map<string, tf.Tensor>, params: ReadonlyMap<string, tf.Variable>, grads: tf.NamedTensorMap): void {
  for (const [name, v] of params) {
    const g = grads[v.name];
    if (!g) continue;
    const prev = sums.get(name);
    sums.set(name, prev ? tf.tidy(() => tf.add(prev, g)) : tf.clone(g));
    prev?.dispose();
  }
  for (const g of Object.values(grads)) g.dispose();
}

/**
 * Lets the event loop run between micro-batches, so that a worker keeps heartbeating and polling while a large model
 * trains (one micro-batch of a real model is seconds of synchronous tensor work).
 */
export const yieldToEventLoop = (): Promise<void> => new Promise((r) => setImmediate(r));
