/**
 * KV caches put together from rows of other caches: the decoding session (./decodeSession.ts) keeps one cache for the
 * live sequences of a round and builds the next round's from it (the sequences that go on) and from a prefill of the
 * new ones (a group's shared prompt once, its row copied to each member). Every row keeps its slots where they were;
 * a part shorter than the result gets empty slots after its own, which the caller masks out (keyMask 0).
 */
import * as tf from '@tensorflow/tfjs';
import type { QwenDims } from './qwenConfig';
import { CACHE_CHUNK, nativeCacheOf } from './nativeInference';
import type { KVCache } from './forwardTypes';

/** Bytes of keys and values per cached slot of one sequence (float32, every layer). */
export const kvBytesPerSlot = (d: QwenDims): number => d.layers * 2 * d.kvHeads * d.headDim * 4;

/** The rows of one cache that go into the assembled one, in order (a row may repeat: a shared prompt). */
export interface CachePart {
  cache: KVCache;
  rows: readonly number[];
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
  const out: KVCache = { length: slots, layers: Array.from({ length: d.layers }, () => ({})), reserve };
  if (B === 0 || slots === 0) return { ...out, length: 0 };
  const K = d.kvHeads;
  const native = used.some((p) => p.cache.native);
  if (native) {
    const capacity = Math.ceil(Math.max(slots + reserve, 1) / CACHE_CHUNK) * CACHE_CHUNK;
    out.native = nativeCacheOf(d, B, capacity, () => tf.concat(used.map((p) => {
      const n = p.cache.native;
      if (!n || p.cache.length === 0) return tf.zeros([d.layers, 2, p.rows.length, K, capacity, d.headDim]);
      const picked = tf.gather(n.buffer, tf.tensor1d(p.rows as number[], 'int32'), 2);
      const kept = tf.slice(picked, [0, 0, 0, 0, 0, 0], [-1, -1, -1, -1, p.cache.length, -1]);
      return tf.pad(kept, [[0, 0], [0, 0], [0, 0], [0, 0], [0, capacity - p.cache.length], [0, 0]]);
    }), 2));
    return out;
  }
  const index = (rows: readonly number[]) => tf.tensor1d(rows.flatMap((b) => Array.from({ length: K }, (_, g) => b * K + g)), 'int32');
  for (let l = 0; l < d.layers; l++) {
    for (const which of ['k', 'v'] as const) {
      out.layers[l]![which] = tf.keep(tf.tidy(() => tf.concat(used.map((p) => {
        const t = p.cache.layers[l]?.[which];
        if (!t || p.cache.length === 0) return tf.zeros([p.rows.length * K, slots, d.headDim]);
        const picked = tf.gather(t, index(p.rows), 0);
        return p.cache.length === slots ? picked : tf.pad(picked, [[0, 0], [0, slots - p.cache.length], [0, 0]]);
      }), 0)) as tf.Tensor3D);
    }
  }
  return out;
}
