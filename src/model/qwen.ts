/**
 * A Qwen2 / Qwen3 decoder in TensorFlow.js, parameter for parameter the same as HF `transformers`
 * (Qwen2ForCausalLM / Qwen3ForCausalLM): RMSNorm, RoPE, grouped-query attention, SwiGLU MLP, optional per-head
 * QK-norm (Qwen3), q/k/v bias (Qwen2), tied or untied LM head.
 *
 * API
 *   QwenModel.init(config, seed)             deterministic random init (normal(0, initializer_range), norms = 1, biases = 0)
 *   QwenModel.fromWeights(config, weights)   from HF-named tensors in HF layout (Linear weights [out, in])
 *   model.namedWeights()                     HF name → {shape, data} in HF layout (for safetensors)
 *   model.assignWeights(weights)             overwrite some parameters (HF names, HF layout)
 *   model.trainableVariables()               tf.Variables, for optimizer.minimize / tf.variableGrads
 *   model.namedVariables()                   HF name → tf.Variable (internal layout)
 *   model.forward(ids, opts?)                logits [B, T, V]; opts: positions, keyMask, cache (see ForwardOptions)
 *   model.loss(ids, targets, mask)           mean cross-entropy over positions with mask = 1 (a scalar)
 *   model.dispose()
 *
 * Layout: the batch is flattened to rows (row = b·T + t) and every projection is a plain 2-D matmul x[n, in] @ W[in, out]
 * (Linear weights are kept transposed, [in, out], internally), with gradients that are plain 2-D matmuls too
 * (ops.matMul2d). Attention runs per (sequence × head) slice: scores = q[T, d] @ kᵀ[d, S].
 */
import * as tf from '@tensorflow/tfjs';
import { parseQwenConfig, qwenDims, type QwenConfig, type QwenDims } from './config';
import { embeddingLookup, linear, matMul2d, rmsNorm, ropeTables, rotateHalfMatrix } from './ops';
import { Rng } from './random';

type ParamKind = 'embed' | 'linear' | 'bias' | 'norm';
interface ParamSpec {
  name: string;
  /** shape in HF layout */
  shape: number[];
  kind: ParamKind;
}

/** The parameters of a config, in a fixed order, with HF names and HF shapes. */
export function paramSpecs(d: QwenDims): ParamSpec[] {
  const specs: ParamSpec[] = [{ name: 'model.embed_tokens.weight', shape: [d.vocab, d.hidden], kind: 'embed' }];
  const qDim = d.heads * d.headDim;
  const kvDim = d.kvHeads * d.headDim;
  for (let i = 0; i < d.layers; i++) {
    const p = `model.layers.${i}.`;
    const lin = (name: string, out: number, inp: number, bias: boolean): void => {
      specs.push({ name: `${p}${name}.weight`, shape: [out, inp], kind: 'linear' });
      if (bias) specs.push({ name: `${p}${name}.bias`, shape: [out], kind: 'bias' });
    };
    specs.push({ name: `${p}input_layernorm.weight`, shape: [d.hidden], kind: 'norm' });
    lin('self_attn.q_proj', qDim, d.hidden, d.qkvBias);
    lin('self_attn.k_proj', kvDim, d.hidden, d.qkvBias);
    lin('self_attn.v_proj', kvDim, d.hidden, d.qkvBias);
    lin('self_attn.o_proj', d.hidden, qDim, d.oBias);
    if (d.qkNorm) {
      specs.push({ name: `${p}self_attn.q_norm.weight`, shape: [d.headDim], kind: 'norm' });
      specs.push({ name: `${p}self_attn.k_norm.weight`, shape: [d.headDim], kind: 'norm' });
    }
    specs.push({ name: `${p}post_attention_layernorm.weight`, shape: [d.hidden], kind: 'norm' });
    lin('mlp.gate_proj', d.intermediate, d.hidden, false);
    lin('mlp.up_proj', d.intermediate, d.hidden, false);
    lin('mlp.down_proj', d.hidden, d.intermediate, false);
  }
  specs.push({ name: 'model.norm.weight', shape: [d.hidden], kind: 'norm' });
  if (!d.tied) specs.push({ name: 'lm_head.weight', shape: [d.vocab, d.hidden], kind: 'linear' });
  return specs;
}

/** [rows, cols] row-major → [cols, rows]. */
function transposeData(data: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(data.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = data[r * cols + c]!;
  return out;
}

/** Keys and values of past positions, per layer: k and v are [B·kvHeads, S, headDim] (row b·kvHeads + g). */
export interface KVCache {
  length: number;
  layers: { k?: tf.Tensor3D; v?: tf.Tensor3D }[];
}

export interface ForwardOptions {
  /** RoPE position of every input token, [B][T]; default: cache length + t. */
  positions?: number[][];
  /** [B][S] over all keys (cached + current), 1 = attend, 0 = padding; default: all 1. Causality is always applied. */
  keyMask?: number[][];
  /** Past keys/values; the current ones are appended (the cache's tensors are replaced, the old ones disposed). */
  cache?: KVCache;
  /** Only compute logits for the last position of each sequence ([B, 1, V]). */
  lastOnly?: boolean;
}

const MASKED = -1e9;

export class QwenModel {
  readonly config: QwenConfig;
  readonly dims: QwenDims;
  private readonly specs: ParamSpec[];
  private readonly params = new Map<string, tf.Variable>();
  private readonly rotate: tf.Tensor2D;

  private constructor(config: QwenConfig, values: (spec: ParamSpec) => Float32Array) {
    this.config = parseQwenConfig(config);
    this.dims = qwenDims(this.config);
    this.specs = paramSpecs(this.dims);
    for (const spec of this.specs) {
      const data = values(spec);
      const size = spec.shape.reduce((a, b) => a * b, 1);
      if (data.length !== size) throw new Error(`weight ${spec.name}: ${data.length} values, expected ${size} (shape [${spec.shape.join(', ')}])`);
      this.params.set(spec.name, tf.variable(this.toInternal(spec, data), true));
    }
    this.rotate = tf.keep(tf.tensor2d(rotateHalfMatrix(this.dims.headDim), [this.dims.headDim, this.dims.headDim]));
  }

  /** Deterministic random initialisation, as HF's _init_weights: normal(0, initializer_range) matrices, unit norms, zero biases. */
  static init(config: QwenConfig, seed = 0): QwenModel {
    const rng = new Rng(seed);
    const std = config.initializer_range ?? 0.02;
    return new QwenModel(config, (spec) => {
      const size = spec.shape.reduce((a, b) => a * b, 1);
      const data = new Float32Array(size);
      if (spec.kind === 'norm') data.fill(1);
      else if (spec.kind !== 'bias') for (let i = 0; i < size; i++) data[i] = rng.normal() * std;
      return data;
    });
  }

  /** From HF-named weights in HF layout. Extra names are an error, except lm_head.weight for a tied model. */
  static fromWeights(config: QwenConfig, weights: Map<string, Float32Array>): QwenModel {
    const model = new QwenModel(config, (spec) => {
      const data = weights.get(spec.name);
      if (!data) throw new Error(`weight ${spec.name} is missing`);
      return data;
    });
    const known = new Set(model.specs.map((s) => s.name));
    const extra = [...weights.keys()].filter((k) => !known.has(k) && !(model.dims.tied && k === 'lm_head.weight') && !k.endsWith('rotary_emb.inv_freq'));
    if (extra.length > 0) {
      model.dispose();
      throw new Error(`unexpected weights: ${extra.slice(0, 5).join(', ')}${extra.length > 5 ? ', …' : ''}`);
    }
    return model;
  }

  /**
   * Built one tensor at a time: `load(name, shape)` gives each parameter (HF name, HF shape and layout) when it is
   * needed, so a large checkpoint is never held whole next to the model (src/model/checkpoint.ts streams it from disk).
   * Built inside tf.tidy, so the initial tensor of every variable is released once the variable holds its data (else
   * it keeps a reference and dispose() frees nothing); tensors the model keeps as fields are returned, hence kept.
   */
  static fromLoader(config: QwenConfig, load: (name: string, shape: number[]) => Float32Array): QwenModel {
    const build = () => new QwenModel(config, (spec) => load(spec.name, [...spec.shape])) as unknown as tf.TensorContainer;
    return tf.tidy(build) as unknown as QwenModel;
  }

  /**
   * The parameters as HF names, HF shapes and HF layout, each materialised only when its `data()` is called (one at a
   * time, for streaming saves). The array may be the backend's own memory: read it, don't keep or change it.
   */
  *weightEntries(): Iterable<{ name: string; shape: number[]; data: () => Float32Array }> {
    for (const spec of this.specs) {
      yield {
        name: spec.name,
        shape: [...spec.shape],
        data: () => {
          const data = this.w(spec.name).dataSync() as Float32Array;
          return spec.kind === 'linear' ? transposeData(data, spec.shape[1]!, spec.shape[0]!) : data;
        },
      };
    }
  }

  private toInternal(spec: ParamSpec, data: Float32Array): tf.Tensor {
    if (spec.kind === 'linear') {
      const [out, inp] = spec.shape as [number, number];
      return tf.tensor2d(transposeData(data, out, inp), [inp, out]);
    }
    return tf.tensor(data, spec.shape);
  }

  /** All parameters, HF names and HF layout. */
  namedWeights(): Map<string, { shape: number[]; data: Float32Array }> {
    const out = new Map<string, { shape: number[]; data: Float32Array }>();
    for (const spec of this.specs) {
      let data = this.w(spec.name).dataSync() as Float32Array;
      if (spec.kind === 'linear') data = transposeData(data, spec.shape[1]!, spec.shape[0]!);
      out.set(spec.name, { shape: [...spec.shape], data: Float32Array.from(data) });
    }
    return out;
  }

  /** Overwrites the named parameters (HF names, HF layout). */
  assignWeights(weights: Map<string, Float32Array>): void {
    for (const [name, data] of weights) {
      const spec = this.specs.find((s) => s.name === name);
      if (!spec) throw new Error(`unknown weight ${name}`);
      const t = this.toInternal(spec, data);
      this.w(name).assign(t);
      t.dispose();
    }
  }

  trainableVariables(): tf.Variable[] {
    return [...this.params.values()];
  }

  /** HF name → tf.Variable (internal layout: Linear weights [in, out]). */
  namedVariables(): Map<string, tf.Variable> {
    return new Map(this.params);
  }

  numParams(): number {
    return this.specs.reduce((n, s) => n + s.shape.reduce((a, b) => a * b, 1), 0);
  }

  private w<R extends tf.Rank = tf.Rank>(name: string): tf.Variable<R> {
    const v = this.params.get(name);
    if (!v) throw new Error(`no parameter ${name}`);
    return v as tf.Variable<R>;
  }

  /** An empty KV cache for `batch` sequences. */
  emptyCache(): KVCache {
    return { length: 0, layers: Array.from({ length: this.dims.layers }, () => ({})) };
  }

  disposeCache(cache: KVCache): void {
    for (const l of cache.layers) tf.dispose([l.k, l.v].filter((t): t is tf.Tensor3D => t !== undefined));
    cache.layers = [];
  }

  /** Logits [B, T, V] (or [B, 1, V] with lastOnly). All sequences must have the same length T (pad them). */
  forward(ids: number[][], opts: ForwardOptions = {}): tf.Tensor3D {
    return tf.tidy(() => {
      const B = ids.length;
      const T = ids[0]?.length ?? 0;
      if (B === 0 || T === 0 || ids.some((r) => r.length !== T)) throw new Error('forward: ids must be a non-empty [B][T] array');
      const d = this.dims;
      const past = opts.cache?.length ?? 0;
      const S = past + T;
      if (opts.cache && opts.cache.length > 0 && opts.cache.layers[0]!.k?.shape[0] !== B * d.kvHeads) throw new Error('forward: cache batch size differs');

      const positions = ids.flatMap((row, b) => row.map((_, t) => opts.positions?.[b]?.[t] ?? past + t));
      const { cos, sin } = ropeTables(positions, d.headDim, d.ropeTheta);
      const rope = { cos: tf.tensor2d(cos, [B * T, d.headDim]), sin: tf.tensor2d(sin, [B * T, d.headDim]) };
      const bias = this.attentionBias(B, T, past, opts.keyMask);

      let x = embeddingLookup(this.w<tf.Rank.R2>('model.embed_tokens.weight'), ids.flat());
      for (let i = 0; i < d.layers; i++) x = this.layer(i, x, B, T, rope, bias, opts.cache);
      if (opts.cache) opts.cache.length = S;

      if (opts.lastOnly) x = tf.gather(x, Array.from({ length: B }, (_, b) => b * T + T - 1));
      x = rmsNorm(x, this.w<tf.Rank.R1>('model.norm.weight'), d.eps);
      const head = d.tied ? tf.transpose(this.w<tf.Rank.R2>('model.embed_tokens.weight')) : this.w<tf.Rank.R2>('lm_head.weight');
      return tf.reshape(matMul2d(x, head), [B, opts.lastOnly ? 1 : T, d.vocab]);
    });
  }

  /**
   * Mean cross-entropy of targets[b][t] given ids[b][..t], over the positions with mask[b][t] = 1 (0 when none).
   * Uses the trainable path only (2-D matmuls, embedding gradient without gather's kernel), so it works inside
   * tf.variableGrads / optimizer.minimize on every backend.
   */
  loss(ids: number[][], targets: number[][], mask: number[][]): tf.Scalar {
    return tf.tidy(() => {
      const V = this.dims.vocab;
      const logits = tf.reshape(this.forward(ids), [-1, V]) as tf.Tensor2D;
      const logp = tf.logSoftmax(logits);
      const onehot = tf.cast(tf.oneHot(tf.tensor1d(targets.flat(), 'int32'), V), 'float32');
      const tokenLogp = tf.sum(tf.mul(logp, onehot), -1);
      const m = tf.tensor1d(mask.flat(), 'float32');
      const count = mask.flat().reduce((a, b) => a + b, 0);
      return tf.div(tf.neg(tf.sum(tf.mul(tokenLogp, m))), Math.max(count, 1)) as tf.Scalar;
    });
  }

  /**
   * Log-probability of targets[b][t] given ids[b][..t], [B, T] (the policy-gradient path: same trainable ops as
   * `loss`, so it works inside tf.variableGrads on every backend). `keyMask` masks right padding out of attention.
   */
  tokenLogprobs(ids: number[][], targets: number[][], keyMask?: number[][]): tf.Tensor2D {
    return tf.tidy(() => {
      const V = this.dims.vocab;
      const B = ids.length;
      const T = ids[0]?.length ?? 0;
      const logits = tf.reshape(this.forward(ids, keyMask ? { keyMask } : {}), [-1, V]) as tf.Tensor2D;
      const logp = tf.logSoftmax(logits);
      const onehot = tf.cast(tf.oneHot(tf.tensor1d(targets.flat(), 'int32'), V), 'float32');
      return tf.reshape(tf.sum(tf.mul(logp, onehot), -1), [B, T]) as tf.Tensor2D;
    });
  }

  /** Additive attention bias per sequence, [T, S]: 0 where query t may see key s (causal, not padding), else -1e9. */
  private attentionBias(B: number, T: number, past: number, keyMask?: number[][]): tf.Tensor2D[] {
    const S = past + T;
    const make = (row?: number[]): tf.Tensor2D => {
      const data = new Float32Array(T * S);
      for (let t = 0; t < T; t++) for (let s = 0; s < S; s++) {
        if (s > past + t || (row && row[s] === 0)) data[t * S + s] = MASKED;
      }
      return tf.tensor2d(data, [T, S]);
    };
    if (!keyMask) return Array<tf.Tensor2D>(B).fill(make());
    return keyMask.map((row) => {
      if (row.length !== S) throw new Error(`keyMask rows must cover ${S} keys (cache + input)`);
      return make(row);
    });
  }

  /** One decoder layer on rows x [B·T, hidden]. */
  private layer(i: number, x: tf.Tensor2D, B: number, T: number, rope: { cos: tf.Tensor2D; sin: tf.Tensor2D }, bias: tf.Tensor2D[], cache?: KVCache): tf.Tensor2D {
    const d = this.dims;
    const p = `model.layers.${i}.`;
    const w2 = (n: string): tf.Variable<tf.Rank.R2> => this.w<tf.Rank.R2>(p + n);
    const b1 = (n: string): tf.Variable<tf.Rank.R1> | undefined => (this.params.get(p + n) as tf.Variable<tf.Rank.R1> | undefined);

    // Self-attention block.
    const h = rmsNorm(x, this.w<tf.Rank.R1>(`${p}input_layernorm.weight`), d.eps);
    let q = linear(h, w2('self_attn.q_proj.weight'), b1('self_attn.q_proj.bias'));
    let k = linear(h, w2('self_attn.k_proj.weight'), b1('self_attn.k_proj.bias'));
    const v = linear(h, w2('self_attn.v_proj.weight'), b1('self_attn.v_proj.bias'));
    q = this.headsRope(q, d.heads, rope, d.qkNorm ? this.w<tf.Rank.R1>(`${p}self_attn.q_norm.weight`) : undefined);
    k = this.headsRope(k, d.kvHeads, rope, d.qkNorm ? this.w<tf.Rank.R1>(`${p}self_attn.k_norm.weight`) : undefined);
    const attn = cache ? this.cachedAttention(q, k, v, B, T, bias, cache.layers[i]!) : this.attention(q, k, v, B, T, bias);
    x = tf.add(x, linear(attn, w2('self_attn.o_proj.weight'), b1('self_attn.o_proj.bias')));

    // SwiGLU MLP block.
    const h2 = rmsNorm(x, this.w<tf.Rank.R1>(`${p}post_attention_layernorm.weight`), d.eps);
    const gate = linear(h2, w2('mlp.gate_proj.weight'));
    const up = linear(h2, w2('mlp.up_proj.weight'));
    const act = tf.mul(tf.mul(gate, tf.sigmoid(gate)), up) as tf.Tensor2D; // silu(gate) * up
    return tf.add(x, linear(act, w2('mlp.down_proj.weight')));
  }

  /** [N, heads·d] → optional per-head RMSNorm (Qwen3 QK-norm) → RoPE: x·cos + rotate_half(x)·sin. */
  private headsRope(x: tf.Tensor2D, heads: number, rope: { cos: tf.Tensor2D; sin: tf.Tensor2D }, norm?: tf.Tensor1D): tf.Tensor2D {
    const N = x.shape[0];
    const hd = this.dims.headDim;
    let rows = tf.reshape(x, [N * heads, hd]) as tf.Tensor2D;
    if (norm) rows = rmsNorm(rows, norm, this.dims.eps);
    const rotated = matMul2d(rows, this.rotate);
    const x3 = tf.reshape(rows, [N, heads, hd]);
    const r3 = tf.reshape(rotated, [N, heads, hd]);
    const cos = tf.reshape(rope.cos, [N, 1, hd]);
    const sin = tf.reshape(rope.sin, [N, 1, hd]);
    return tf.reshape(tf.add(tf.mul(x3, cos), tf.mul(r3, sin)), [N, heads * hd]) as tf.Tensor2D;
  }

  /** [B·T, heads·d] → one [T, d] slice per (sequence, head), ordered b·heads + h. */
  private splitHeads(x: tf.Tensor2D, B: number, T: number, heads: number): tf.Tensor2D[] {
    const hd = this.dims.headDim;
    const perHead = tf.reshape(tf.transpose(tf.reshape(x, [B, T, heads, hd]), [0, 2, 1, 3]), [B * heads * T, hd]);
    return B * heads === 1 ? [perHead as tf.Tensor2D] : (tf.split(perHead, B * heads, 0) as tf.Tensor2D[]);
  }

  /**
   * Grouped-query causal attention, per (sequence × head) slice: plain 2-D matmuls, the fast path for training on wasm.
   * Head h uses kv head floor(h / (heads / kvHeads)), as HF's repeat_kv.
   */
  private attention(q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D, B: number, T: number, bias: tf.Tensor2D[]): tf.Tensor2D {
    const d = this.dims;
    const qs = this.splitHeads(q, B, T, d.heads);
    const ks = this.splitHeads(k, B, T, d.kvHeads);
    const vs = this.splitHeads(v, B, T, d.kvHeads);
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
   * The same attention for decoding with a KV cache (inference only): batched over (sequence, kv head), with the heads
   * of a group stacked along the rows, so a step with one token per sequence costs a few ops instead of B × heads.
   * [B, H, T, d] is [B, kvHeads, group, T, d] in memory, hence the reshapes to [B·kvHeads, group·T, d].
   */
  private cachedAttention(q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D, B: number, T: number, bias: tf.Tensor2D[], cache: { k?: tf.Tensor3D; v?: tf.Tensor3D }): tf.Tensor2D {
    const d = this.dims;
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

  dispose(): void {
    tf.dispose([...this.params.values()]);
    this.params.clear();
    this.rotate.dispose();
  }
}
