/**
 * Tensor operations with hand-written gradients.
 *
 * - matMul2d / linear: on wasm every matmul is a plain 2-D, non-transposed tf.matMul (XNNPACK), with transposes made
 *   explicit, including in the gradients (see shared notes tfjs-wasm.md); on native TensorFlow it is tf.matMul with
 *   tf's own gradient (transposes are flags of BatchMatMulV2 there, free).
 * - rmsNorm, swiGlu, rope, attention, targetLogprobs: one tf.customGrad each, which keeps only what the backward
 *   pass needs (e.g. x and 1/rms for RMSNorm, gate and up for SwiGLU, no one-hot matrix for the cross-entropy) and
 *   needs fewer kernels than tf's gradients of the same expressions.
 *
 * `useReferenceOps(true)` swaps every one of them for the plain tfjs expression with tf's own gradients; the tests
 * compare the two.
 */
import * as tf from '@tensorflow/tfjs';
import { isNative, softmaxTargetLogprobs, targetIndex, targetLogprobsGrad } from './native';

let referenceOps = false;

/**
 * Tests only: with `on`, matMul2d is tf.matMul and embeddingLookup is tf.gather, i.e. tf's own gradients, to check the
 * custom ones against.
 */
export function useReferenceOps(on: boolean): void {
  referenceOps = on;
}

/** Whether useReferenceOps is on. */
export function usingReferenceOps(): boolean {
  return referenceOps;
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
  return referenceOps || isNative() ? tf.matMul(a, b) : (fastMatMul(a, b) as tf.Tensor2D);
}

/** x [n, in] @ w [in, out] (+ b [out]). */
export function linear(x: tf.Tensor2D, w: tf.Tensor2D, b?: tf.Tensor1D): tf.Tensor2D {
  const y = matMul2d(x, w);
  return b ? tf.add(y, b) : y;
}

/** RMSNorm over the last axis: x / sqrt(mean(x²) + eps) * w. */
export function rmsNorm(x: tf.Tensor2D, w: tf.Tensor1D, eps: number): tf.Tensor2D {
  if (referenceOps) return tf.mul(tf.mul(x, tf.rsqrt(tf.add(tf.mean(tf.square(x), -1, true), eps))), w);
  const norm = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const [xi, wi, save] = args as [tf.Tensor2D, tf.Tensor1D, tf.GradSaveFunc];
    const r = tf.rsqrt(tf.add(tf.mean(tf.square(xi), -1, true), eps));
    save([xi, wi, r]);
    return {
      value: tf.mul(tf.mul(xi, r), wi),
      // y = x·r·w with r = (mean(x²) + eps)^-½:  dw = Σ_rows dy·x·r,  dx = r·(g − x·r·mean(g·x·r)) with g = dy·w.
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [sx, sw, sr] = saved as [tf.Tensor2D, tf.Tensor1D, tf.Tensor2D];
        const xr = tf.mul(sx, sr);
        const g = tf.mul(dy, sw);
        const dx = tf.mul(sr, tf.sub(g, tf.mul(xr, tf.mean(tf.mul(g, xr), -1, true))));
        return [dx, tf.sum(tf.mul(dy, xr), 0)];
      },
    };
  });
  return norm(x, w) as tf.Tensor2D;
}

/** silu(gate) · up, element-wise (the SwiGLU activation); the backward pass keeps gate and up only. */
export function swiGlu(gate: tf.Tensor2D, up: tf.Tensor2D): tf.Tensor2D {
  if (referenceOps) return tf.mul(tf.mul(gate, tf.sigmoid(gate)), up);
  const f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const [g, u, save] = args as [tf.Tensor2D, tf.Tensor2D, tf.GradSaveFunc];
    save([g, u]);
    return {
      value: tf.mul(tf.mul(g, tf.sigmoid(g)), u),
      // d/dg silu(g) = s·(1 + g·(1 − s)) with s = sigmoid(g).
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [sg, su] = saved as [tf.Tensor2D, tf.Tensor2D];
        const s = tf.sigmoid(sg);
        const silu = tf.mul(sg, s);
        const dg = tf.mul(tf.mul(dy, su), tf.add(s, tf.mul(silu, tf.sub(1, s))));
        return [dg, tf.mul(dy, silu)];
      },
    };
  });
  return f(gate, up) as tf.Tensor2D;
}

/**
 * RoPE on rows x [N, heads·d]: x·cos + rotate_half(x)·sin per head, with cos/sin [N, d] and rotate_half as the
 * matmul with `rotate` (rotateHalfMatrix). Its backward pass is the inverse rotation (Rᵀ = −R); it keeps nothing.
 */
export function rope(x: tf.Tensor2D, heads: number, cos: tf.Tensor2D, sin: tf.Tensor2D, rotate: tf.Tensor2D): tf.Tensor2D {
  const [N, width] = x.shape;
  const hd = width / heads;
  const c3 = tf.reshape(cos, [N, 1, hd]);
  const s3 = tf.reshape(sin, [N, 1, hd]);
  const apply = (v: tf.Tensor2D): tf.Tensor2D => {
    const rows = tf.reshape(v, [N * heads, hd]) as tf.Tensor2D;
    const rotated = tf.reshape(tf.matMul(rows, rotate), [N, heads, hd]);
    return tf.reshape(tf.add(tf.mul(tf.reshape(rows, [N, heads, hd]), c3), tf.mul(rotated, s3)), [N, width]) as tf.Tensor2D;
  };
  if (referenceOps) return apply(x);
  const f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const [xi, save] = args as [tf.Tensor2D, tf.GradSaveFunc];
    save([c3, s3]); // the tables outlive the forward pass's tidy this way
    return {
      value: apply(xi),
      // y = x·C + (x·R)·S  ⇒  dx = dy·C + (dy·S)·Rᵀ = dy·C − (dy·S)·R
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [sc, ss] = saved as [tf.Tensor3D, tf.Tensor3D];
        const ds = tf.reshape(tf.mul(tf.reshape(dy, [N, heads, hd]), ss), [N * heads, hd]) as tf.Tensor2D;
        const back = tf.reshape(tf.matMul(ds, rotate), [N, heads, hd]);
        return tf.reshape(tf.sub(tf.mul(tf.reshape(dy, [N, heads, hd]), sc), back), [N, width]);
      },
    };
  });
  return f(x) as tf.Tensor2D;
}

/**
 * Grouped-query causal attention for training on native TensorFlow, batched over sequences and heads: rows
 * q [B·T, H·d], k and v [B·T, K·d] (RoPE applied), additive bias [B, 1, T, T] → [B·T, H·d]. Query head h reads kv head
 * floor(h / (H/K)) (HF's repeat_kv), which is a reshape: [B, H, T, d] is [B, K, (H/K)·T, d] in memory. The backward
 * pass keeps q, k, v and the attention probabilities and uses BatchMatMulV2's transpose flags.
 */
export function attention(q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D, B: number, T: number, heads: number, kvHeads: number, bias: tf.Tensor4D): tf.Tensor2D {
  const hd = q.shape[1] / heads;
  const group = heads / kvHeads;
  const scale = 1 / Math.sqrt(hd);
  // [B·T, n·d] → [B, n, T, d] → [B, K, (n/K)·T, d]
  const toHeads = (x: tf.Tensor, n: number): tf.Tensor4D =>
    tf.reshape(tf.transpose(tf.reshape(x, [B, T, n, hd]), [0, 2, 1, 3]), [B, kvHeads, (n / kvHeads) * T, hd]);
  const fromHeads = (x: tf.Tensor, n: number): tf.Tensor2D =>
    tf.reshape(tf.transpose(tf.reshape(x, [B, n, T, hd]), [0, 2, 1, 3]), [B * T, n * hd]);
  const probs = (q4: tf.Tensor4D, k4: tf.Tensor4D): tf.Tensor4D => {
    const scores = tf.reshape(tf.mul(tf.matMul(q4, k4, false, true), scale), [B, heads, T, T]);
    return tf.reshape(tf.softmax(tf.add(scores, bias)), [B, kvHeads, group * T, T]);
  };
  if (referenceOps) {
    const k4 = toHeads(k, kvHeads);
    return fromHeads(tf.matMul(probs(toHeads(q, heads), k4), toHeads(v, kvHeads)), heads);
  }
  const f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const [qi, ki, vi, save] = args as [tf.Tensor2D, tf.Tensor2D, tf.Tensor2D, tf.GradSaveFunc];
    const q4 = toHeads(qi, heads);
    const k4 = toHeads(ki, kvHeads);
    const v4 = toHeads(vi, kvHeads);
    const p = probs(q4, k4);
    save([q4, k4, v4, p]);
    return {
      value: fromHeads(tf.matMul(p, v4), heads),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [sq, sk, sv, sp] = saved as [tf.Tensor4D, tf.Tensor4D, tf.Tensor4D, tf.Tensor4D];
        const dO = toHeads(dy, heads);
        const dV = tf.matMul(sp, dO, true, false); // [B, K, T, d]: summed over the group's heads
        const dP = tf.matMul(dO, sv, false, true);
        const dS = tf.mul(tf.mul(sp, tf.sub(dP, tf.sum(tf.mul(dP, sp), -1, true))), scale);
        const dQ = tf.matMul(dS, sk);
        const dK = tf.matMul(dS, sq, true, false);
        return [fromHeads(dQ, heads), fromHeads(dK, kvHeads), fromHeads(dV, kvHeads)];
      },
    };
  });
  return f(q, k, v) as tf.Tensor2D;
}

/**
 * log softmax(logits)[n, targets[n]] for rows logits [N, V], [N], without a one-hot matrix: on native TensorFlow from its
 * Softmax (native.ts softmaxTargetLogprobs; the probabilities are kept for the gradient), elsewhere log-sum-exp and a
 * gather; the gradient dy·(onehot − softmax) is built by a scatter.
 */
export function targetLogprobs(logits: tf.Tensor2D, targets: number[]): tf.Tensor1D {
  const [N, V] = logits.shape;
  if (targets.length !== N) throw new Error(`targetLogprobs: ${targets.length} targets for ${N} rows`);
  if (referenceOps) return tf.sum(tf.mul(tf.logSoftmax(logits), tf.cast(tf.oneHot(tf.tensor1d(targets, 'int32'), V), 'float32')), -1);
  if (isNative()) {
    const at = targetIndex(targets);
    const f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
      const [l, save] = args as [tf.Tensor2D, tf.GradSaveFunc];
      const { logp, probs } = softmaxTargetLogprobs(l, at);
      save([probs, at]);
      return {
        value: logp,
        gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => targetLogprobsGrad(saved[0] as tf.Tensor2D, saved[1] as tf.Tensor2D, dy),
      };
    });
    return f(logits) as tf.Tensor1D;
  }
  const at = tf.tensor2d(targets.flatMap((t, n) => [n, t]), [N, 2], 'int32');
  const f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const [l, save] = args as [tf.Tensor2D, tf.GradSaveFunc];
    const lse = tf.logSumExp(l, -1);
    save([l, lse, at]);
    return {
      value: tf.sub(tf.gatherND(l, at), lse),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [sl, slse, sat] = saved as [tf.Tensor2D, tf.Tensor1D, tf.Tensor2D];
        const p = tf.exp(tf.sub(sl, tf.expandDims(slse, 1)));
        return tf.sub(tf.scatterND(sat, dy, [N, V]), tf.mul(p, tf.expandDims(dy, 1)));
      },
    };
  });
  return f(logits) as tf.Tensor1D;
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

/**
 * The LM head and the log-probability of each row's target in one step, native TensorFlow only: logits = x·Wᵀ (tied:
 * W is the embedding [V, hidden]) or x·W (W [hidden, V]), then softmaxTargetLogprobs. The logits are freed at once;
 * the backward pass keeps x and the softmax ([N, V], freed when used).
 */
export function headLogprobs(x: tf.Tensor2D, w: tf.Tensor2D, tied: boolean, targets: number[]): tf.Tensor1D {
  const at = targetIndex(targets);
  const f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const [xi, wi, save] = args as [tf.Tensor2D, tf.Tensor2D, tf.GradSaveFunc];
    const logits = tf.matMul(xi, wi, false, tied) as tf.Tensor2D;
    const { logp, probs } = softmaxTargetLogprobs(logits, at);
    logits.dispose();
    save([xi, probs, at]);
    return {
      value: logp,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [sx, probs, sat] = saved as [tf.Tensor2D, tf.Tensor2D, tf.Tensor2D];
        const dLogits = targetLogprobsGrad(probs, sat, dy);
        probs.dispose();
        const grads = tf.tidy(() => [
          tied ? tf.matMul(dLogits, wi) : tf.matMul(dLogits, wi, false, true),
          tied ? tf.matMul(dLogits, sx, true, false) : tf.matMul(sx, dLogits, true, false),
        ]);
        dLogits.dispose();
        return grads;
      },
    };
  });
  return f(x, w) as tf.Tensor1D;
}
