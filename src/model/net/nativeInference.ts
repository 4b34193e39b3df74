/**
 * Inference on native TensorFlow (tfjs-node) for QwenModel: q|k|v weights fused into one matmul (rebuilt when a weight
 * changes), RoPE and QK-norm on all heads at once, a KV cache of one buffer updated in place, and the decoding-step
 * graph (one graph run per generated token). The model owns the weights; this owns what is derived from them.
 */
import * as tf from '@tensorflow/tfjs';
import type { QwenDims } from './qwenConfig';
import { buildDecodeGraph, weightPlan, type DecodeGraph, type WeightPlan } from './decodeGraph';
import type { GraphSession } from './graph';
import { rawOps } from './native';
import { attentionBiasData } from './portableAttention';
import { ropeTables, rotateHalfMatrix } from './ops';
import type { ForwardOptions, KVCache, NativeCache } from './forwardTypes';

/** Native KV cache capacity is a multiple of this many slots. */
export const CACHE_CHUNK = 64;

/** The variables of one decoder layer. */
export interface LayerVars {
  inNorm: tf.Variable<tf.Rank.R1>;
  q: tf.Variable<tf.Rank.R2>;
  k: tf.Variable<tf.Rank.R2>;
  v: tf.Variable<tf.Rank.R2>;
  qb?: tf.Variable<tf.Rank.R1>;
  kb?: tf.Variable<tf.Rank.R1>;
  vb?: tf.Variable<tf.Rank.R1>;
  o: tf.Variable<tf.Rank.R2>;
  ob?: tf.Variable<tf.Rank.R1>;
  qNorm?: tf.Variable<tf.Rank.R1>;
  kNorm?: tf.Variable<tf.Rank.R1>;
  postNorm: tf.Variable<tf.Rank.R1>;
  gate: tf.Variable<tf.Rank.R2>;
  up: tf.Variable<tf.Rank.R2>;
  down: tf.Variable<tf.Rank.R2>;
}

/**
 * Inference weights of one layer derived from its variables (native), every matrix in the weight plan's layout
 * (decodeGraph.ts weightPlan): 'in-out' [in, out] as the variables are stored (o, gate, up and down are the variables
 * themselves), 'out-in' transposed copies [out, in]. Kept while the weights stay the same (across generate calls);
 * dropped by the first training forward pass.
 */
interface FusedLayer {
  /** the variables' data ids when this was built (a changed id = a changed weight) */
  source: object[];
  /** the tensors this allocated (the others are the model's variables) */
  owned: tf.Tensor[];
  /** [Wq | Wk | Wv] with the input norm's weight folded in: [hidden, (H + 2K)·d] ('in-out') or its transpose */
  wqkv: tf.Tensor;
  bqkv?: tf.Tensor;
  /** [H + 2K, d]: q_norm on the query heads, k_norm on the key heads, 1 on the value heads */
  headNorm?: tf.Tensor;
  o: tf.Tensor;
  gate: tf.Tensor;
  up: tf.Tensor;
  down: tf.Tensor;
}


const dataIdOf = (t: tf.Tensor): object => t.dataId as object;
const defined = <T>(xs: (T | undefined)[]): T[] => xs.filter((x): x is T => x !== undefined);

/** What native inference needs of the model. */
export interface InferenceHost {
  readonly dims: QwenDims;
  readonly layerVars: readonly LayerVars[];
  readonly rotate: tf.Tensor2D;
  weight(name: string): tf.Tensor;
  /** RoPE position of every input row (row = b·T + t). */
  positionsOf(B: number, T: number, past: number, positions?: number[][]): number[];
  disposeCache(cache: KVCache): void;
}

/**
 * A native cache around the buffer `make` returns ([layers, 2, B, K, capacity, d], made inside a tidy scope) with
 * its views; kept, so that it outlives whatever tidy scope it is made in.
 */
export function nativeCacheOf(d: QwenDims, B: number, capacity: number, make: () => tf.Tensor): NativeCache {
  const r = rawOps();
  const K = d.kvHeads;
  const next = tf.tidy(() => {
    const buffer = make();
    const perLayer = d.layers === 1 ? [r.reshape(buffer, buffer.shape.slice(1))] : r.unstack(buffer);
    const layers = perLayer.map((l) => {
      const [keys, values] = r.unstack(l) as [tf.Tensor, tf.Tensor];
      return { rows: r.reshape(l, [2 * B * K * capacity, d.headDim]), keys, values };
    });
    return { buffer, layers } as unknown as tf.TensorContainer;
  }) as unknown as { buffer: tf.Tensor; layers: NativeCache['layers'] };
  tf.keep(next.buffer);
  for (const l of next.layers) [l.rows, l.keys, l.values].forEach((t) => tf.keep(t));
  return { batch: B, capacity, ...next };
}

export class NativeInference {
  private fused: (FusedLayer | undefined)[] = [];
  /** a tied LM head's transposed copy [hidden, V] (weights.headCopy), with the embedding's data id it was made from */
  private headCopy?: { source: object; t: tf.Tensor };
  /** the inference matmuls' weight layout, fixed for this model's life */
  private readonly weights: WeightPlan = weightPlan();
  /** the native decoding-step graph: undefined until first needed, null when unavailable or switched off */
  private decodeGraph?: DecodeGraph | null;
  /** native inference constants (headConstants) */
  private headConst?: { a: tf.Tensor; c: tf.Tensor; m: tf.Tensor; e: tf.Tensor; eps: tf.Tensor };

  constructor(private readonly m: InferenceHost) {}

  /** Drops the native inference weights (rebuilt on the next inference call). */
  releaseFused(): void {
    for (const f of this.fused) if (f) this.disposeFused(f);
    this.fused = [];
    this.headCopy?.t.dispose();
    this.headCopy = undefined;
  }

  private disposeFused(f: FusedLayer): void {
    tf.dispose(f.owned);
  }

  /**
   * The LM head as a [hidden, V] matrix for x·W: lm_head's weight when untied, a transposed copy of the embedding when
   * tied and the plan says so (rebuilt when the embedding changes); undefined: the head is x·embedᵀ.
   */
  private headMatrix(): tf.Tensor | undefined {
    if (!this.m.dims.tied) return this.m.weight('lm_head.weight');
    if (!this.weights.headCopy) return undefined;
    const embed = this.m.weight('model.embed_tokens.weight');
    if (this.headCopy?.source === dataIdOf(embed)) return this.headCopy.t;
    this.headCopy?.t.dispose();
    this.headCopy = { source: dataIdOf(embed), t: tf.keep(rawOps().transpose(embed, [1, 0])) };
    return this.headCopy.t;
  }

  /** Layer i's fused inference weights, rebuilt when one of its variables changed since they were built. */
  private fusedLayer(i: number): FusedLayer {
    const L = this.m.layerVars[i]!;
    const source = defined<tf.Tensor>([L.inNorm, L.q, L.k, L.v, L.qb, L.kb, L.vb, L.qNorm, L.kNorm, L.o, L.gate, L.up, L.down]).map(dataIdOf);
    const have = this.fused[i];
    if (have && have.source.length === source.length && have.source.every((id, j) => id === source[j])) return have;
    if (have) this.disposeFused(have);
    const d = this.m.dims;
    const { qb, kb, vb, qNorm, kNorm } = L;
    const outIn = this.weights.layout === 'out-in';
    const owned: tf.Tensor[] = [];
    const own = <T extends tf.Tensor | undefined>(t: T): T => {
      if (t) owned.push(tf.keep(t));
      return t;
    };
    // 'in-out': the variable itself (not in `owned`); 'out-in': a transposed copy
    const oriented = (w: tf.Tensor): tf.Tensor => (outIn ? own(tf.transpose(w)) : w);
    const built = tf.tidy(() => {
      const rows = (w: tf.Tensor1D, n: number): tf.Tensor => tf.tile(tf.reshape(w, [1, -1]), [n, 1]);
      // diag(input_layernorm) · [Wq | Wk | Wv]: the norm's weight folded into the projection
      const wqkv = tf.mul(tf.reshape(L.inNorm, [-1, 1]), tf.concat([L.q, L.k, L.v], 1));
      return {
        source,
        owned,
        wqkv: own(outIn ? tf.transpose(wqkv) : wqkv),
        bqkv: own(qb && kb && vb ? tf.concat([qb, kb, vb]) : undefined),
        headNorm: own(qNorm && kNorm ? tf.concat([rows(qNorm, d.heads), rows(kNorm, d.kvHeads), tf.ones([d.kvHeads, d.headDim])]) : undefined),
        o: oriented(L.o),
        gate: oriented(L.gate),
        up: oriented(L.up),
        down: oriented(L.down),
      } satisfies FusedLayer as unknown as tf.TensorContainer;
    }) as unknown as FusedLayer;
    this.fused[i] = built;
    return built;
  }

  /**
   * Per-head constants of the native inference path, each [1, H + 2K, 1] over the heads of q|k|v: RoPE multipliers
   * (C = cos·a + c, S = sin·a with a = 1/√d on query heads, the attention scale folded in, 1 on key heads, 0 on value
   * heads, and c = 1 on value heads, which RoPE thus leaves as they are), and for QK-norm m = 1 on q/k heads and 0 on
   * value heads, e = eps on q/k heads and 1 on value heads (rsqrt(mean(x²)·m + e) is 1 there).
   */
  private headConstants(): { a: tf.Tensor; c: tf.Tensor; m: tf.Tensor; e: tf.Tensor; eps: tf.Tensor } {
    if (this.headConst) return this.headConst;
    const d = this.m.dims;
    const scale = 1 / Math.sqrt(d.headDim);
    const n = d.heads + 2 * d.kvHeads;
    const per = (f: (kind: 'q' | 'k' | 'v') => number): tf.Tensor =>
      tf.keep(tf.tensor3d(Array.from({ length: n }, (_, h) => f(h < d.heads ? 'q' : h < d.heads + d.kvHeads ? 'k' : 'v')), [1, n, 1]));
    this.headConst = {
      a: per((k) => (k === 'q' ? scale : k === 'k' ? 1 : 0)),
      c: per((k) => (k === 'v' ? 1 : 0)),
      m: per((k) => (k === 'v' ? 0 : 1)),
      e: per((k) => (k === 'v' ? 1 : d.eps)),
      eps: tf.keep(tf.scalar(d.eps)),
    };
    return this.headConst;
  }

  /** The native cache, allocated or grown (copied into a larger buffer) to hold `needed` slots for B sequences. */
  nativeCache(cache: KVCache, B: number, needed: number): NativeCache {
    const d = this.m.dims;
    const have = cache.native;
    if (have && have.batch !== B) throw new Error('forward: cache batch size differs');
    if (have && have.capacity >= needed) return have;
    const r = rawOps();
    const want = Math.max(needed, cache.reserve ?? 0, have ? Math.ceil(have.capacity * 1.5) : 0);
    const capacity = Math.ceil(want / CACHE_CHUNK) * CACHE_CHUNK;
    const next = nativeCacheOf(d, B, capacity, () => (have
      ? tf.pad(have.buffer, [[0, 0], [0, 0], [0, 0], [0, 0], [0, capacity - have.capacity], [0, 0]])
      : r.zeros([d.layers, 2, B, d.kvHeads, capacity, d.headDim])));
    if (have) this.m.disposeCache({ length: 0, layers: [], native: have });
    cache.native = next;
    return cache.native;
  }

  /** The decoding-step graph, built on first use (CM2_TF_GRAPH=0 switches it off; a build failure is reported once). */
  private stepGraph(): DecodeGraph | null {
    if (this.decodeGraph !== undefined) return this.decodeGraph;
    if (process.env.CM2_TF_GRAPH === '0') return (this.decodeGraph = null);
    try {
      this.decodeGraph = buildDecodeGraph(this.m.dims, rotateHalfMatrix(this.m.dims.headDim), this.weights);
    } catch (e) {
      console.warn(`decoding graph unavailable, decoding op by op: ${(e as Error).message.split('\n')[0]}`);
      this.decodeGraph = null;
    }
    return this.decodeGraph;
  }

  /**
   * One KV-cached step with one token per sequence through the decoding graph; returns the fetched tensors, or
   * undefined when the graph does not apply (not cached, more than one token, graph unavailable).
   */
  graphStep(ids: number[][], opts: ForwardOptions, fetch: string[]): tf.Tensor[] | undefined {
    const cache = opts.cache;
    if (!cache || ids[0]!.length !== 1 || cache.length === 0) return undefined;
    const graph = this.stepGraph();
    if (!graph) return undefined;
    const d = this.m.dims;
    const B = ids.length;
    let session: GraphSession;
    try {
      session = graph.session(B);
    } catch (e) {
      console.warn(`decoding graph unavailable, decoding op by op: ${(e as Error).message.split('\n')[0]}`);
      graph.dispose();
      this.decodeGraph = null;
      return undefined;
    }
    const past = cache.length;
    const store = this.nativeCache(cache, B, past + 1);
    const K = d.kvHeads;
    const S = store.capacity;
    const { cos, sin } = ropeTables(this.m.positionsOf(B, 1, past, opts.positions), d.headDim, d.ropeTheta);
    const slots = new Int32Array(B * 2 * K);
    for (let b = 0, o = 0; b < B; b++) for (let j = 0; j < 2; j++) for (let g = 0; g < K; g++) slots[o++] = ((j * B + b) * K + g) * S + past;
    const step = [
      tf.tensor1d(ids.map((r) => r[0]!), 'int32'),
      tf.tensor3d(cos, [B, 1, d.headDim]),
      tf.tensor3d(sin, [B, 1, d.headDim]),
      tf.tensor4d(attentionBiasData(B, 1, past, S, opts.keyMask), [B, 1, 1, S]),
      tf.tensor1d(slots, 'int32'),
    ];
    const feeds: tf.Tensor[] = [...step, rawOps().ints([2, B, K, S, d.headDim]), this.m.weight('model.embed_tokens.weight'), this.m.weight('model.norm.weight')];
    if (graph.headMatrix) feeds.push(this.headMatrix()!);
    this.m.layerVars.forEach((L, i) => {
      const F = this.fusedLayer(i);
      feeds.push(F.wqkv);
      if (graph.layer.bqkv) feeds.push(F.bqkv!);
      if (graph.layer.headNorm) feeds.push(F.headNorm!);
      feeds.push(F.o);
      if (graph.layer.ob) feeds.push(L.ob!);
      feeds.push(L.postNorm, F.gate, F.up, F.down, store.layers[i]!.rows);
    });
    try {
      return session.run(feeds, fetch);
    } finally {
      tf.dispose(step);
      cache.length = past + 1;
    }
  }

  /**
   * Inference on native TensorFlow, in TensorFlow ops called directly (RawOps): one q|k|v matmul with the input norm's
   * weight folded in, QK-norm and RoPE for all heads at once, attention batched over sequences and heads against the
   * in-place cache (or the current keys only without a cache). About 40 ops per layer and decoding step.
   */
  forward(ids: number[][], opts: ForwardOptions): tf.Tensor3D {
    const d = this.m.dims;
    const B = ids.length;
    const T = ids[0]!.length;
    const fromGraph = this.graphStep(ids, opts, ['logits']);
    if (fromGraph) {
      const out = tf.reshape(fromGraph[0]!, [B, 1, d.vocab]) as tf.Tensor3D;
      fromGraph[0]!.dispose();
      return out;
    }
    const cache = opts.cache;
    const past = cache?.length ?? 0;
    const store = cache ? this.nativeCache(cache, B, past + T) : undefined;
    const fused = this.m.layerVars.map((_, i) => this.fusedLayer(i));
    const hc = this.headConstants();
    const r = rawOps();
    r.trim();
    const out = tf.tidy(() => {
      const hd = d.headDim;
      const K = d.kvHeads;
      const H = d.heads;
      const G = H / K;
      const nh = H + 2 * K;
      // Attention reads the cache's used slots only when a piece of a prompt is fed (T > 1): its scores and
      // probabilities are [B, H, T, S], and a long prompt fed in pieces into a cache sized for the whole of it would
      // otherwise attend over every empty slot too (3× the work for the demo's prompts). A decoding step (T = 1)
      // reads the whole capacity, as the decoding graph does: a copy of the used slots would cost more than it saves.
      const S = store ? (T > 1 ? Math.min(store.capacity, Math.ceil((past + T) / CACHE_CHUNK) * CACHE_CHUNK) : store.capacity) : T;
      const N = B * T;
      const { cos, sin } = ropeTables(this.m.positionsOf(B, T, past, opts.positions), hd, d.ropeTheta);
      const C = r.add(r.mul(tf.tensor3d(cos, [N, 1, hd]), hc.a), hc.c);
      const Sn = r.mul(tf.tensor3d(sin, [N, 1, hd]), hc.a);
      const bias = tf.tensor4d(attentionBiasData(B, T, past, S, opts.keyMask), [B, 1, T, S]);
      // Cache rows of the new keys and values, in the order of k|v rows [B·T·2·K, d] from q|k|v.
      let slots: tf.Tensor | undefined;
      if (store) {
        const idx = new Int32Array(N * 2 * K);
        let o = 0;
        for (let b = 0; b < B; b++) for (let t = 0; t < T; t++) for (let j = 0; j < 2; j++) for (let g = 0; g < K; g++) idx[o++] = ((j * B + b) * K + g) * store.capacity + past + t;
        slots = tf.tensor1d(idx, 'int32');
      }
      const norm = (x: tf.Tensor): tf.Tensor => r.mul(x, r.rsqrt(r.add(r.meanLast(r.square(x)), hc.eps)));
      const tb = this.weights.layout === 'out-in';
      let x = r.gatherRows(this.m.weight('model.embed_tokens.weight'), tf.tensor1d(ids.flat(), 'int32'));
      // A tidy per layer: a long prompt's scores and probabilities ([B, K, G·T, S] each) are freed layer by layer, not
      // held for all layers until the logits (a 30-layer model on 4 × 800 tokens reached 17 GB that way).
      this.m.layerVars.forEach((L, i) => x = tf.tidy(() => {
        const F = fused[i]!;
        let qkv = r.matMul(norm(x), F.wqkv, false, tb);
        if (F.bqkv) qkv = r.add(qkv, F.bqkv);
        let heads = r.reshape(qkv, [N, nh, hd]);
        if (F.headNorm) heads = r.mul(r.mul(heads, r.rsqrt(r.add(r.mul(r.meanLast(r.square(heads)), hc.m), hc.e))), F.headNorm);
        heads = r.add(r.mul(heads, C), r.mul(r.matMul(heads, this.m.rotate), Sn));
        const [q, kv] = r.split(heads, [H, 2 * K], 1) as [tf.Tensor, tf.Tensor];
        let keys: tf.Tensor;
        let values: tf.Tensor;
        if (store) {
          const view = store.layers[i]!;
          r.inplaceUpdate(view.rows, slots!, r.reshape(kv, [N * 2 * K, hd]));
          keys = S === store.capacity ? view.keys : tf.slice(view.keys, [0, 0, 0, 0], [B, K, S, hd]);
          values = S === store.capacity ? view.values : tf.slice(view.values, [0, 0, 0, 0], [B, K, S, hd]);
        } else {
          [keys, values] = r.unstack(r.transpose(r.reshape(kv, [B, T, 2, K, hd]), [2, 0, 3, 1, 4])) as [tf.Tensor, tf.Tensor];
        }
        // [B, K, G·T, S] scores (query head h = kv head · G + g; the scale is in q), bias over [B, H, T, S], softmax, ·v
        const q4 = T === 1 ? r.reshape(q, [B, K, G, hd]) : r.reshape(r.transpose(r.reshape(q, [B, T, H, hd]), [0, 2, 1, 3]), [B, K, G * T, hd]);
        const scores = r.matMul(q4, keys, false, true);
        const p = T === 1 ? r.softmax(r.add(scores, bias)) : r.reshape(r.softmax(r.add(r.reshape(scores, [B, H, T, S]), bias)), [B, K, G * T, S]);
        const o = r.matMul(p, values);
        const attn = T === 1 ? r.reshape(o, [N, H * hd]) : r.reshape(r.transpose(r.reshape(o, [B, H, T, hd]), [0, 2, 1, 3]), [N, H * hd]);
        let proj = r.matMul(attn, F.o, false, tb);
        if (L.ob) proj = r.add(proj, L.ob);
        const x2 = r.add(x, proj);
        const h2 = r.mul(norm(x2), L.postNorm);
        const gate = r.matMul(h2, F.gate, false, tb);
        return r.add(x2, r.matMul(r.mul(r.mul(gate, r.sigmoid(gate)), r.matMul(h2, F.up, false, tb)), F.down, false, tb));
      }));
      if (opts.lastOnly && T > 1) x = r.gatherRows(x, tf.tensor1d(Array.from({ length: B }, (_, b) => b * T + T - 1), 'int32'));
      x = r.mul(norm(x), this.m.weight('model.norm.weight'));
      const head = this.headMatrix();
      const logits = head ? r.matMul(x, head) : r.matMul(x, this.m.weight('model.embed_tokens.weight'), false, true);
      return r.reshape(logits, [B, opts.lastOnly ? 1 : T, d.vocab]) as tf.Tensor3D;
    });
    if (cache) cache.length = past + T;
    return out;
  }

  dispose(): void {
    this.releaseFused();
    this.decodeGraph?.dispose();
    this.decodeGraph = undefined;
    if (this.headConst) tf.dispose(Object.values(this.headConst));
    this.headConst = undefined;
  }
}
