/**
 * The shapes a forward pass takes and keeps (types only): the KV cache of past positions (portable per-layer tensors, or
 * the native backend's one buffer), packed training rows, and the forward options. Shared by the model (./qwen.ts) and
 * its native inference path (./nativeInference.ts), which would otherwise import each other.
 */
import type * as tf from '@tensorflow/tfjs';

/**
 * The native KV cache: one zero-initialised buffer and views that alias it (no copies): per layer its rows
 * [2·B·K·capacity, d] (row ((j·B + b)·K + g)·capacity + slot for j = 0 keys, 1 values), which InplaceUpdate writes,
 * and its keys and values [B, K, capacity, d], which attention reads.
 */
export interface NativeCache {
  batch: number;
  capacity: number;
  buffer: tf.Tensor;
  layers: { rows: tf.Tensor; keys: tf.Tensor; values: tf.Tensor }[];
}

/**
 * Keys and values of past positions. wasm / cpu: per layer, k and v [B·kvHeads, S, headDim] (row b·kvHeads + g), grown by
 * concatenation. Native: one buffer [layers, 2 (k, v), B, kvHeads, capacity, headDim] allocated once, whose new rows
 * are written in place each step (NativeCache); slots past `length` are masked out of attention.
 */
export interface KVCache {
  length: number;
  layers: { k?: tf.Tensor3D; v?: tf.Tensor3D }[];
  native?: NativeCache;
  /** slots to allocate at once on native (prompt + new tokens); the cache grows past it when needed */
  reserve?: number;
}

/**
 * Several sequences with a shared prefix packed into each row (training only): the RoPE position of every token and
 * its segment (0 = the shared prefix, seen by all; k > 0 = one sequence, seen only by itself). See attentionBiasData.
 */
export interface PackedRows {
  positions: number[][];
  segments: number[][];
}

export interface ForwardOptions {
  /** RoPE position of every input token, [B][T]; default: cache length + t. */
  positions?: number[][];
  /** [B][S] over all keys (cached + current), 1 = attend, 0 = padding; default: all 1. Causality is always applied. */
  keyMask?: number[][];
  /** Past keys/values; the current ones are appended. */
  cache?: KVCache;
  /** Only compute logits for the last position of each sequence ([B, 1, V]). */
  lastOnly?: boolean;
}
