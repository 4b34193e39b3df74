/**
 * Tensor operations with gradients written for the wasm backend's fast path: every matmul is a plain 2-D,
 * non-transposed tf.matMul (XNNPACK), with transposes made explicit, including in the gradients. The same code runs
 * (and is exact) on every backend. See docs: shared notes tfjs-wasm.md.
 */
import * as tf from '@tensorflow/tfjs';

let referenceOps = false;

/**
 * Tests only: with `on`, matMul2d is tf.matMul and embeddingLookup is tf.gather, i.e. tf's own gradients, to check the
 * custom ones against.
 */
export function useReferenceOps(on: boolean): void {
  referenceOps = on;
}

/** a [m,k] @ b [k,n]; gradients da = dy @ bᵀ and db = aᵀ @ dy, each a plain 2-D matmul of an explicit transpose. */
const fastMatMul = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
  const [a, b, save] = args as [tf.Tensor2D, tf.Tensor2D, tf.GradSaveFunc];
  save([a, b]);
  return {
    value: tf.matMul(a, b),
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
      const [sa, sb] = saved as [tf.Tensor2D, tf.Tensor2D];
      return [tf.matMul(dy as tf.Tensor2D, tf.transpose(sb)), tf.matMul(tf.transpose(sa), dy as tf.Tensor2D)];
    },
  };
});

export function matMul2d(a: tf.Tensor2D, b: tf.Tensor2D): tf.Tensor2D {
  return referenceOps ? tf.matMul(a, b) : (fastMatMul(a, b) as tf.Tensor2D);
}

/** x [n, in] @ w [in, out] (+ b [out]). */
export function linear(x: tf.Tensor2D, w: tf.Tensor2D, b?: tf.Tensor1D): tf.Tensor2D {
  const y = matMul2d(x, w);
  return b ? tf.add(y, b) : y;
}

/** RMSNorm over the last axis: x / sqrt(mean(x²) + eps) * w. */
export function rmsNorm(x: tf.Tensor2D, w: tf.Tensor1D, eps: number): tf.Tensor2D {
  const variance = tf.mean(tf.square(x), -1, true);
  return tf.mul(tf.mul(x, tf.rsqrt(tf.add(variance, eps))), w);
}

/** Adds the rows of dy [n, h] into a [vocab, h] matrix at rows ids (the gradient of an embedding lookup). */
export function scatterAddRows(ids: ArrayLike<number>, dy: Float32Array, vocab: number, h: number): Float32Array {
  const out = new Float32Array(vocab * h);
  for (let n = 0; n < ids.length; n++) {
    const row = ids[n] as number;
    for (let j = 0; j < h; j++) out[row * h + j]! += dy[n * h + j]!;
  }
  return out;
}

/**
 * Embedding lookup table [vocab, h] → rows [n, h]. Forward is tf.gather; the gradient is UnsortedSegmentSum where
 * the backend has that kernel and otherwise (wasm) a scatter-add of the incoming rows, which avoids materialising an
 * [n, vocab] one-hot matrix.
 */
export function embeddingLookup(table: tf.Tensor2D, ids: number[]): tf.Tensor2D {
  const [vocab, h] = table.shape;
  const idsT = tf.tensor1d(ids, 'int32');
  if (referenceOps) return tf.gather(table, idsT);
  const lookup = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const [t, save] = args as [tf.Tensor2D, tf.GradSaveFunc];
    save([idsT]); // saved tensors outlive the forward pass's tidy
    return {
      value: tf.gather(t, idsT),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        if (tf.getKernel('UnsortedSegmentSum', tf.getBackend())) return tf.unsortedSegmentSum(dy, saved[0] as tf.Tensor1D, vocab);
        return tf.tensor2d(scatterAddRows(ids, dy.dataSync() as Float32Array, vocab, h), [vocab, h]);
      },
    };
  });
  return lookup(table) as tf.Tensor2D;
}

/**
 * The [d, d] matrix R with x @ R = rotate_half(x) = concat(-x[d/2:], x[:d/2]) (HF's RoPE helper), so the rotation is
 * one more plain 2-D matmul instead of slices.
 */
export function rotateHalfMatrix(d: number): Float32Array {
  const r = new Float32Array(d * d);
  const half = d / 2;
  for (let j = 0; j < half; j++) r[(j + half) * d + j] = -1;
  for (let j = half; j < d; j++) r[(j - half) * d + j] = 1;
  return r;
}

/**
 * RoPE cos/sin tables [n, d] for the given absolute positions, computed in float32 steps as HF does
 * (inv_freq = 1 / θ^(2i/d), angle = pos · inv_freq, emb = concat(angle, angle)).
 */
export function ropeTables(positions: number[], d: number, theta: number): { cos: Float32Array; sin: Float32Array } {
  const half = d / 2;
  const invFreq = new Float32Array(half);
  for (let i = 0; i < half; i++) invFreq[i] = Math.fround(1 / Math.fround(Math.pow(theta, Math.fround((2 * i) / d))));
  const cos = new Float32Array(positions.length * d);
  const sin = new Float32Array(positions.length * d);
  positions.forEach((pos, n) => {
    for (let i = 0; i < half; i++) {
      const angle = Math.fround(invFreq[i]! * pos);
      const c = Math.cos(angle);
      const s = Math.sin(angle);
      cos[n * d + i] = c;
      cos[n * d + i + half] = c;
      sin[n * d + i] = s;
      sin[n * d + i + half] = s;
    }
  });
  return { cos, sin };
}
