/**
 * KV caches put together from rows of other caches: the decoding session (./decodeSession.ts) keeps one cache for the
 * live sequences of a round and builds the next round's from it (the sequences that go on) and from a prefill of the
 * new ones (a group's shared prompt once, its row copied to each member). Every row keeps its slots where they were;
 * a part shorter than the result gets empty slots after its own, which the caller masks out (keyMask 0).
 *
 * On native the result is allocated once and each part's rows are copied into it layer by layer (a gather of one
 * layer's rows, written in place at their destination rows): besides the parts and the result, a copy of one layer of
 * one part exists at a time (issue 30: a gather, slice, pad and concat of whole caches made four full-size copies,
 * and the evaluation of 64 held-out prompts was killed by the kernel).
 */
import * as tf from '@tensorflow/tfjs';
import type { QwenDims } from './qwenConfig';
import { CACHE_CHUNK, nativeCacheOf } from './nativeInference';
import { rawOps } from './native';
import type { KVCache, NativeCache } from './forwardTypes';

/** Bytes of keys and values per cached slot of one sequence (float32, every layer). */
export const kvBytesPerSlot = (d: QwenDims): number => d.layers * 2 * d.kvHeads * d.headDim * 4;

/** Bytes a cache's tensors hold: its allocated slots on native, its used ones otherwise. */
export function cacheBytes(d: QwenDims, cache: KVCache | undefined, rows: number): number {
  if (!cache) return 0;
  return (cache.native ? cache.native.batch * cache.native.capacity : rows * cache.length) * kvBytesPerSlot(d);
}

/** The rows of one cache that go into the assembled one (a row may repeat: a shared prompt), and where they go. */
export interface CachePart {
  cache: KVCache;
  rows: readonly number[];
  /** the result's row of each of `rows` (default: the parts' rows one after the other, in order) */
  at?: readonly number[];
}

/** Each part's destination rows; checks that they cover 0..B−1 once each. */
function destinations(parts: readonly CachePart[], B: number): number[][] {
  let next = 0;
  const at = parts.map((p) => {
    const a = p.at ? [...p.at] : p.rows.map(() => next++);
    if (a.length !== p.rows.length) throw new Error('assembleCache: a part needs as many destination rows as rows');
    return a;
  });
  const seen = new Set(at.flat());
  if (seen.size !== B || [...seen].some((b) => b < 0 || b >= B || !Number.isInteger(b))) throw new Error('assembleCache: destination rows must cover the result once each');
  return at;
}

/**
 * Copies slots [0, `slots`) of `rows` of the native cache `src` into rows `at` of the native cache `dest`, in place
 * (dest's buffer and every view of it see them), one layer at a time. `src` may be `dest` (the rows are gathered
 * before they are written).
 */
export function copyCacheRows(d: QwenDims, src: NativeCache, rows: readonly number[], dest: NativeCache, at: readonly number[], slots: number): void {
  if (rows.length === 0 || slots === 0) return;
  if (slots > src.capacity || slots > dest.capacity) throw new Error('copyCacheRows: more slots than a cache holds');
  if (rows.length !== at.length) throw new Error('copyCacheRows: as many destination rows as rows');
  const K = d.kvHeads;
  const n = 2 * rows.length * K * slots;
  const from = new Int32Array(n);
  const to = new Int32Array(n);
  let o = 0;
  for (let j = 0; j < 2; j++) {
    for (let i = 0; i < rows.length; i++) {
      for (let g = 0; g < K; g++) {
        const a = ((j * src.batch + rows[i]!) * K + g) * src.capacity;
        const b = ((j * dest.batch + at[i]!) * K + g) * dest.capacity;
        for (let s = 0; s < slots; s++, o++) {
          from[o] = a + s;
          to[o] = b + s;
        }
      }
    }
  }
  const r = rawOps();
  const fromT = tf.tensor1d(from, 'int32');
  const toT = tf.tensor1d(to, 'int32');
  try {
    for (let l = 0; l < d.layers; l++) {
      const picked = r.gatherRows(src.layers[l]!.rows, fromT);
      try {
        r.inplaceUpdate(dest.layers[l]!.rows, toT, picked);
      } finally {
        picked.dispose();
      }
    }
  } finally {
    fromT.dispose();
    toT.dispose();
  }
}

/**
 * A new cache of Σ rows with `slots` used slots (≥ every part's length), room for `reserve` more on native. The parts
 * are left as they are (the caller disposes them). Both layouts: native ([layers, 2, B, K, capacity, d], one buffer)
 * and wasm/cpu (per layer k, v [B·K, S, d]). A part whose cache was never written (length 0) gives empty rows.
 */
export function assembleCache(d: QwenDims, parts: readonly CachePart[], slots: number, reserve = 0): KVCache {
  const used = parts.filter((p) => p.rows.length > 0);
  const B = used.reduce((n, p) => n + p.rows.length, 0);
  if (used.some((p) => p.cache.length > slots)) throw new Error('assembleCache: a part has more slots than the result');
  const at = destinations(used, B);
  const out: KVCache = { length: slots, layers: Array.from({ length: d.layers }, () => ({})), reserve };
  if (B === 0 || slots === 0) return { ...out, length: 0 };
  const K = d.kvHeads;
  const native = used.some((p) => p.cache.native);
  if (native) {
    const capacity = Math.ceil(Math.max(slots + reserve, 1) / CACHE_CHUNK) * CACHE_CHUNK;
    out.native = nativeCacheOf(d, B, capacity, () => rawOps().zeros([d.layers, 2, B, K, capacity, d.headDim]));
    try {
      used.forEach((p, i) => {
        if (p.cache.native && p.cache.length > 0) copyCacheRows(d, p.cache.native, p.rows, out.native!, at[i]!, p.cache.length);
      });
    } catch (e) {
      tf.dispose([out.native.buffer, ...out.native.layers.flatMap((l) => [l.rows, l.keys, l.values])]);
      throw e;
    }
    return out;
  }
  // wasm / cpu: the parts one after the other, then their rows put where they go.
  const order = at.flat();
  const inOrder = order.every((b, i) => b === i);
  const inverse = new Array<number>(B);
  order.forEach((b, j) => (inverse[b] = j));
  const index = (rows: readonly number[]) => tf.tensor1d(rows.flatMap((b) => Array.from({ length: K }, (_, g) => b * K + g)), 'int32');
  for (let l = 0; l < d.layers; l++) {
    for (const which of ['k', 'v'] as const) {
      out.layers[l]![which] = tf.keep(tf.tidy(() => {
        const joined = tf.concat(used.map((p) => {
          const t = p.cache.layers[l]?.[which];
          if (!t || p.cache.length === 0) return tf.zeros([p.rows.length * K, slots, d.headDim]);
          const picked = tf.gather(t, index(p.rows), 0);
          return p.cache.length === slots ? picked : tf.pad(picked, [[0, 0], [0, slots - p.cache.length], [0, 0]]);
        }), 0);
        return inOrder ? joined : tf.gather(joined, index(inverse), 0);
      }) as tf.Tensor3D);
    }
  }
  return out;
}
