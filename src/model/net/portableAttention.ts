/**
 * Attention on the wasm / cpu paths (plain 2-D matmuls per sequence and head for training, a concatenated KV cache for
 * decoding) and the additive attention bias (causality and key padding) every path uses.
 */
import * as tf from '@tensorflow/tfjs';
import type { QwenDims } from './qwenConfig';
import { causalChunks } from './layer';
import { matMul2d } from './ops';

const MASKED = -1e9;

/**
 * The additive attention bias, [B][T][S] flattened: 0 where query t (at slot past + t) may see key slot s (causal,
 * keyMask 1), else -1e9. S may exceed past + T (unused cache slots, masked by causality).
 *
 * `segments` (training, past = 0) packs several sequences that share a prefix into one row (GRPO's G samples of one
 * prompt, src/stages/rl/grpo.ts): segment 0 is the shared prefix, every position attends to it; a position of segment
 * k > 0 attends to segment k too, never to another one.
 */
export function attentionBiasData(B: number, T: number, past: number, S: number, keyMask?: number[][], segments?: number[][]): Float32Array {
  const data = new Float32Array(B * T * S);
  for (let b = 0; b < B; b++) {
    const row = keyMask?.[b];
    if (keyMask && (!row || row.length !== past + T)) throw new Error(`keyMask rows must cover ${past + T} keys (cache + input)`);
    const seg = segments?.[b];
    if (segments && (!seg || seg.length !== past + T)) throw new Error(`segment rows must cover ${past + T} positions`);
    for (let t = 0; t < T; t++) {
      const base = (b * T + t) * S;
      const own = seg ? seg[past + t]! : 0;
      for (let s = 0; s < S; s++) if (s > past + t || (row && row[s] === 0) || (seg && seg[s] !== 0 && seg[s] !== own)) data[base + s] = MASKED;
    }
  }
  return data;
}

/** The training attention bias cut into the query chunks of layer.ts, each [B, 1, b − a, 1, b]. */
export function attentionBiasChunks(B: number, T: number, keyMask?: number[][], segments?: number[][]): tf.Tensor[] {
  const full = attentionBiasData(B, T, 0, T, keyMask, segments);
  return causalChunks(T).map(([a, b]) => {
    const n = b - a;
    const data = new Float32Array(B * n * b);
    for (let s = 0; s < B; s++) for (let t = 0; t < n; t++) data.set(full.subarray((s * T + a + t) * T, (s * T + a + t) * T + b), (s * n + t) * b);
    return tf.tensor(data, [B, 1, n, 1, b]);
  });
}

/** Additive attention bias per sequence, [T, S] (wasm / cpu paths). */
export function attentionBiasPerSequence(B: number, T: number, past: number, keyMask?: number[][], segments?: number[][]): tf.Tensor2D[] {
  const S = past + T;
  const data = attentionBiasData(B, T, past, S, keyMask, segments);
  if (!keyMask && !segments) {
    const one = tf.tensor2d(data.subarray(0, T * S), [T, S]);
    return Array<tf.Tensor2D>(B).fill(one);
  }
  return Array.from({ length: B }, (_, b) => tf.tensor2d(data.subarray(b * T * S, (b + 1) * T * S), [T, S]));
}

/** [B·T, heads·d] → one [T, d] slice per (sequence, head), ordered b·heads + h. */
function splitHeads(d: QwenDims, x: tf.Tensor2D, B: number, T: number, heads: number): tf.Tensor2D[] {
  const hd = d.headDim;
  const perHead = tf.reshape(tf.transpose(tf.reshape(x, [B, T, heads, hd]), [0, 2, 1, 3]), [B * heads * T, hd]);
  return B * heads === 1 ? [perHead as tf.Tensor2D] : (tf.split(perHead, B * heads, 0) as tf.Tensor2D[]);
}

/**
 * Grouped-query causal attention, per (sequence × head) slice: plain 2-D matmuls, the fast path for training on wasm.
 * Head h uses kv head floor(h / (heads / kvHeads)), as HF's repeat_kv.
 */
export function slicedAttention(d: QwenDims, q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D, B: number, T: number, bias: tf.Tensor2D[]): tf.Tensor2D {
  const qs = splitHeads(d, q, B, T, d.heads);
  const ks = splitHeads(d, k, B, T, d.kvHeads);
  const vs = splitHeads(d, v, B, T, d.kvHeads);
  const group = d.heads / d.kvHeads;
  const scale = 1 / Math.sqrt(d.headDim);
  const rows: tf.Tensor2D[] = [];
  for (let b = 0; b < B; b++) {
    const heads: tf.Tensor2D[] = [];
    for (let h = 0; h < d.heads; h++) {
      const kv = b * d.kvHeads + Math.floor(h / group);
      const scores = tf.add(tf.mul(matMul2d(qs[b * d.heads + h]!, tf.transpose(ks[kv]!)), scale), bias[b]!);
      heads.push(matMul2d(tf.softmax(scores) as tf.Tensor2D, vs[kv]!));
    }
    rows.push(heads.length === 1 ? heads[0]! : tf.concat(heads, 1));
  }
  return rows.length === 1 ? rows[0]! : tf.concat(rows, 0);
}

/**
 * Attention against a concatenated cache, batched over (sequence, kv head), with the heads of a group stacked along
 * the rows. [B, H, T, d] is [B, kvHeads, group, T, d] in memory, hence the reshapes to [B·kvHeads, group·T, d].
 */
export function concatCacheAttention(d: QwenDims, q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D, B: number, T: number, bias: tf.Tensor2D[], cache: { k?: tf.Tensor3D; v?: tf.Tensor3D }): tf.Tensor2D {
  const hd = d.headDim;
  const group = d.heads / d.kvHeads;
  const toHeads = (x: tf.Tensor2D, heads: number): tf.Tensor3D =>
    tf.reshape(tf.transpose(tf.reshape(x, [B, T, heads, hd]), [0, 2, 1, 3]), [B * d.kvHeads, (heads / d.kvHeads) * T, hd]);
  let k3 = toHeads(k, d.kvHeads);
  let v3 = toHeads(v, d.kvHeads);
  if (cache.k && cache.v) {
    k3 = tf.concat([cache.k, k3], 1);
    v3 = tf.concat([cache.v, v3], 1);
    tf.dispose([cache.k, cache.v]);
  }
  cache.k = tf.keep(k3);
  cache.v = tf.keep(v3);
  const S = k3.shape[1];
  const scores = tf.mul(tf.matMul(toHeads(q, d.heads), k3, false, true), 1 / Math.sqrt(hd)); // [B·kv, group·T, S]
  const masked = tf.add(tf.reshape(scores, [B, d.heads, T, S]), tf.reshape(tf.stack(bias), [B, 1, T, S]));
  const p = tf.reshape(tf.softmax(masked), [B * d.kvHeads, group * T, S]);
  const out = tf.reshape(tf.matMul(p, v3), [B, d.heads, T, hd]);
  return tf.reshape(tf.transpose(out, [0, 2, 1, 3]), [B * T, d.heads * hd]);
}
