/**
 * A Qwen2 / Qwen3 / Llama decoder in TensorFlow.js, parameter for parameter the same as HF `transformers`
 * (Qwen2ForCausalLM / Qwen3ForCausalLM / LlamaForCausalLM): RMSNorm, RoPE, grouped-query attention, SwiGLU MLP,
 * optional per-head QK-norm (Qwen3), q/k/v bias (Qwen2; Qwen3 and Llama with attention_bias), tied or untied LM head.
 * Llama (SmolLM2, Llama 2/3 without rope scaling) is Qwen3 without the QK-norm: the same weight names and math.
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
 *   model.tokenLogprobs(ids, targets)        log p(target) per position, [B, T]
 *   model.dispose()
 *
 * Layout: one variable per HF parameter, Linear weights kept transposed ([in, out]) so a projection is x[n, in] @ W;
 * the batch is flattened to rows (row = b·T + t) for projections and norms.
 *
 * Two implementations of the same math, chosen per call by the active backend:
 * - native TensorFlow (tfjs-node): attention batched over sequences and heads (4-D batched matmuls, GQA as a reshape),
 *   tf.matMul with transpose flags. Inference (forward, generation) uses q|k|v weights fused into one matmul
 *   (rebuilt when a weight changes), RoPE on all heads at once and a KV cache of TensorFlow resource variables that
 *   each step updates in place with one scatter per layer.
 * - wasm / cpu: plain 2-D non-transposed matmuls with explicit transposes in the gradients (ops.matMul2d, the wasm fast
 *   path), attention per (sequence × head) slice for training, a concatenated KV cache for decoding.
 * Both train through the same hand-written gradients (ops.ts: RMSNorm, SwiGLU, RoPE, cross-entropy without a one-hot
 * matrix) and give the same numbers within float32 rounding.
 */
import * as tf from '@tensorflow/tfjs';
import { parseQwenConfig, qwenDims, type QwenConfig, type QwenDims } from './config';
import { buildDecodeGraph, type DecodeGraph } from './decodeGraph';
import type { GraphSession } from './graph';
import { greedyNll, isNative, materialize, rawOps, targetIndex } from './native';
import { causalChunks, decoderLayer, type LayerContext, PARAM_NAMES } from './layer';
import { graphLength, type HeadDims, type StackGraph, StackGraphCache } from './trainGraph';
import { attention as batchedAttention, embeddingLookup, headLogprobs, linear, matMul2d, rmsNorm, rope, ropeTables, rotateHalfMatrix, swiGlu, targetLogprobs, usingReferenceOps } from './ops';
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

const MASKED = -1e9;
/** Native KV cache capacity is a multiple of this many slots. */
const CACHE_CHUNK = 64;

/**
 * The native KV cache: one zero-initialised buffer and views that alias it (no copies): per layer its rows
 * [2·B·K·capacity, d] (row ((j·B + b)·K + g)·capacity + slot for j = 0 keys, 1 values), which InplaceUpdate writes,
 * and its keys and values [B, K, capacity, d], which attention reads.
 */
interface NativeCache {
  batch: number;
  capacity: number;
  buffer: tf.Tensor;
  layers: { rows: tf.Tensor; keys: tf.Tensor; values: tf.Tensor }[];
}

/** The variables of one decoder layer. */
interface LayerVars {
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
 * Inference weights of one layer derived from its variables (native), every matrix transposed to [out, in]: for the
 * few rows of a decoding step TensorFlow's matmul reads [out, in] weights (x·Wᵀ) ~30% faster than [in, out] ones.
 * Kept while the weights stay the same (across generate calls); dropped by the first training forward pass.
 */
interface FusedLayer {
  /** the variables' data ids when this was built (a changed id = a changed weight) */
  source: object[];
  /** [(H + 2K)·d, hidden]: ([Wq | Wk | Wv] with the input norm's weight folded in)ᵀ */
  wqkv: tf.Tensor;
  bqkv?: tf.Tensor;
  /** [H + 2K, d]: q_norm on the query heads, k_norm on the key heads, 1 on the value heads */
  headNorm?: tf.Tensor;
  o: tf.Tensor;
  gate: tf.Tensor;
  up: tf.Tensor;
  down: tf.Tensor;
}

/** True while a gradient is being recorded (tf.grad / variableGrads / minimize). */
function taping(): boolean {
  return ((tf.engine() as unknown as { state: { gradientDepth: number } }).state.gradientDepth ?? 0) > 0;
}

const dataIdOf = (t: tf.Tensor): object => t.dataId as object;
const defined = <T>(xs: (T | undefined)[]): T[] => xs.filter((x): x is T => x !== undefined);

export class QwenModel {
  readonly config: QwenConfig;
  readonly dims: QwenDims;
  private readonly specs: ParamSpec[];
  private readonly params = new Map<string, tf.Variable>();
  private readonly layerVars: LayerVars[] = [];
  private readonly rotate: tf.Tensor2D;
  private fused: (FusedLayer | undefined)[] = [];
  /** the native decoding-step graph: undefined until first needed, null when unavailable or switched off */
  private decodeGraph?: DecodeGraph | null;
  private stackGraphs?: StackGraphCache | null;
  /** layer contexts by batch shape (layerContext) */
  private readonly contexts = new Map<string, LayerContext>();
  /** native inference constants (headConstants) */
  private headConst?: { a: tf.Tensor; c: tf.Tensor; m: tf.Tensor; e: tf.Tensor; eps: tf.Tensor };

  private constructor(config: QwenConfig, values: (spec: ParamSpec) => Float32Array) {
    this.config = parseQwenConfig(config);
    this.dims = qwenDims(this.config);
    this.specs = paramSpecs(this.dims);
    for (const spec of this.specs) {
      const data = values(spec);
      const size = spec.shape.reduce((a, b) => a * b, 1);
      if (data.length !== size) throw new Error(`weight ${spec.name}: ${data.length} values, expected ${size} (shape [${spec.shape.join(', ')}])`);
      const initial = this.toInternal(spec, data);
      const variable = tf.variable(initial, true);
      initial.dispose(); // the variable holds the data; the initial tensor's reference would keep it forever
      materialize(variable); // native: into TensorFlow's memory now, so the JS array can go
      this.params.set(spec.name, variable);
    }
    for (let i = 0; i < this.dims.layers; i++) {
      const p = `model.layers.${i}.`;
      const get = <R extends tf.Rank>(n: string): tf.Variable<R> => this.w<R>(p + n);
      const opt = <R extends tf.Rank>(n: string): tf.Variable<R> | undefined => this.params.get(p + n) as tf.Variable<R> | undefined;
      this.layerVars.push({
        inNorm: get('input_layernorm.weight'),
        q: get('self_attn.q_proj.weight'), k: get('self_attn.k_proj.weight'), v: get('self_attn.v_proj.weight'),
        qb: opt('self_attn.q_proj.bias'), kb: opt('self_attn.k_proj.bias'), vb: opt('self_attn.v_proj.bias'),
        o: get('self_attn.o_proj.weight'), ob: opt('self_attn.o_proj.bias'),
        qNorm: opt('self_attn.q_norm.weight'), kNorm: opt('self_attn.k_norm.weight'),
        postNorm: get('post_attention_layernorm.weight'),
        gate: get('mlp.gate_proj.weight'), up: get('mlp.up_proj.weight'), down: get('mlp.down_proj.weight'),
      });
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
   * needed, so a large checkpoint is never held whole next to the model (src/model/checkpoint.ts streams it from disk;
   * the constructor moves each tensor into the backend at once, so its array can go before the next is read).
   */
  static fromLoader(config: QwenConfig, load: (name: string, shape: number[]) => Float32Array): QwenModel {
    return new QwenModel(config, (spec) => load(spec.name, [...spec.shape]));
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
      materialize(this.w(name));
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

  /**
   * An empty KV cache. On native, `reserve` slots (prompt + new tokens) are allocated at the first forward call, so
   * decoding never reallocates; without it the cache grows in chunks.
   */
  emptyCache(reserve?: number): KVCache {
    return { length: 0, layers: Array.from({ length: this.dims.layers }, () => ({})), reserve };
  }

  disposeCache(cache: KVCache): void {
    for (const l of cache.layers) tf.dispose([l.k, l.v].filter((t): t is tf.Tensor3D => t !== undefined));
    cache.layers = [];
    if (cache.native) tf.dispose([cache.native.buffer, ...cache.native.layers.flatMap((l) => [l.rows, l.keys, l.values])]);
    cache.native = undefined;
  }

  /** Logits [B, T, V] (or [B, 1, V] with lastOnly). All sequences must have the same length T (pad them). */
  forward(ids: number[][], opts: ForwardOptions = {}): tf.Tensor3D {
    const B = ids.length;
    const T = ids[0]?.length ?? 0;
    if (B === 0 || T === 0 || ids.some((r) => r.length !== T)) throw new Error('forward: ids must be a non-empty [B][T] array');
    if (isNative() && !taping()) return this.forwardNative(ids, opts);
    if (opts.cache) return this.forwardCachedPortable(ids, opts);
    return tf.tidy(() => {
      let x = this.hidden(ids, opts.positions, opts.keyMask);
      if (opts.lastOnly) x = tf.gather(x, Array.from({ length: B }, (_, b) => b * T + T - 1));
      return tf.reshape(this.head(x), [B, opts.lastOnly ? 1 : T, this.dims.vocab]);
    });
  }

  /**
   * Mean cross-entropy of targets[b][t] given ids[b][..t], over the positions with mask[b][t] = 1 (0 when none).
   * The trainable path: works inside tf.variableGrads / optimizer.minimize on every backend.
   */
  loss(ids: number[][], targets: number[][], mask: number[][]): tf.Scalar {
    return tf.tidy(() => {
      const logp = this.logprobs(ids, targets);
      const m = tf.tensor1d(mask.flat(), 'float32');
      const count = mask.flat().reduce((a, b) => a + b, 0);
      return tf.div(tf.neg(tf.sum(tf.mul(logp, m))), Math.max(count, 1)) as tf.Scalar;
    });
  }

  /**
   * Log-probability of targets[b][t] given ids[b][..t], [B, T] (the policy-gradient path: same trainable ops as
   * `loss`, so it works inside tf.variableGrads on every backend). `keyMask` masks right padding out of attention.
   * `temperature` T gives log softmax(logits / T)[target]: the policy that sampled at temperature T (as VeRL's actor).
   */
  tokenLogprobs(ids: number[][], targets: number[][], keyMask?: number[][], temperature = 1): tf.Tensor2D {
    if (!(temperature > 0)) throw new Error(`tokenLogprobs: temperature must be > 0, got ${temperature}`);
    return tf.tidy(() => {
      const B = ids.length;
      const T = ids[0]?.length ?? 0;
      return tf.reshape(this.logprobs(ids, targets, keyMask, temperature), [B, T]) as tf.Tensor2D;
    });
  }

  /**
   * log p(targets[b][t]) given ids[b][..t], flattened [B·T], through the trainable path: on native TensorFlow with
   * graphs on, the stack graph with the head (embedding lookup eager, everything after it two graph runs), else the
   * final-normed hidden states, then the head.
   */
  private logprobs(ids: number[][], targets: number[][], keyMask?: number[][], temperature = 1): tf.Tensor1D {
    if (isNative() && !usingReferenceOps()) {
      const viaGraph = this.graphLogprobs(ids, targets, keyMask, temperature);
      if (viaGraph) return viaGraph;
    }
    // logits / T = (final-normed hidden / T) · headᵀ.
    const hidden = this.hidden(ids, undefined, keyMask);
    return this.targetLogprobs(temperature === 1 ? hidden : tf.div(hidden, temperature), targets.flat());
  }

  /** logprobs through the stack graph with the head (right-padded to graphLength(T), as nativeStack); null without one. */
  private graphLogprobs(ids: number[][], targets: number[][], keyMask?: number[][], temperature = 1): tf.Tensor1D | null {
    if (this.stackGraphCache() === null) return null;
    const d = this.dims;
    const B = ids.length;
    const T = ids[0]!.length;
    const Tg = graphLength(T);
    const graph = this.stackGraph(B, Tg, { vocab: d.vocab, tied: d.tied });
    if (!graph) return null;
    this.releaseFused();
    const pad = (row: number[]): number[] => (Tg === T ? row : [...row, ...new Array<number>(Tg - T).fill(0)]);
    const ctx = this.layerContext(B, Tg, undefined, keyMask?.map(pad));
    const embed = this.w<tf.Rank.R2>('model.embed_tokens.weight');
    const x = embeddingLookup(embed, ids.flatMap(pad));
    const head = d.tied ? embed : this.w<tf.Rank.R2>('lm_head.weight');
    // logits / T: the final norm's weight / T scales every logit by 1/T (its gradient follows through the division).
    const norm = this.w<tf.Rank.R1>('model.norm.weight');
    const logp = this.stackLogprobsThroughGraph(graph, x, ctx, temperature === 1 ? norm : tf.div(norm, temperature), head, targetIndex(targets.flatMap(pad)));
    if (Tg === T) return logp;
    return tf.reshape(tf.slice(tf.reshape(logp, [B, Tg]), [0, 0], [B, T]), [B * T]) as tf.Tensor1D;
  }

  /** log p(target) per row of final hidden states [N, hidden] (the LM head included). */
  private targetLogprobs(x: tf.Tensor2D, targets: number[]): tf.Tensor1D {
    if (isNative() && !usingReferenceOps()) {
      const w = this.dims.tied ? this.w<tf.Rank.R2>('model.embed_tokens.weight') : this.w<tf.Rank.R2>('lm_head.weight');
      return headLogprobs(x, w, this.dims.tied, targets);
    }
    return targetLogprobs(this.head(x), targets);
  }

  /** LM head: rows [N, hidden] → logits [N, V]. */
  private head(x: tf.Tensor2D): tf.Tensor2D {
    const embed = this.w<tf.Rank.R2>('model.embed_tokens.weight');
    if (isNative()) return this.dims.tied ? tf.matMul(x, embed, false, true) : tf.matMul(x, this.w<tf.Rank.R2>('lm_head.weight'));
    return matMul2d(x, this.dims.tied ? tf.transpose(embed) : this.w<tf.Rank.R2>('lm_head.weight'));
  }

  /** RoPE position of every input row (row = b·T + t). */
  private positionsOf(B: number, T: number, past: number, positions?: number[][]): number[] {
    const out = new Array<number>(B * T);
    for (let b = 0; b < B; b++) for (let t = 0; t < T; t++) out[b * T + t] = positions?.[b]?.[t] ?? past + t;
    return out;
  }

  /**
   * Final-normed hidden states [B·T, hidden] through the trainable path (no cache). Leaves the inference weights of
   * the native path behind (they would be stale after the update this is for, and cost memory while training).
   */
  private hidden(ids: number[][], positions?: number[][], keyMask?: number[][]): tf.Tensor2D {
    this.releaseFused();
    const d = this.dims;
    const finalNorm = this.w<tf.Rank.R1>('model.norm.weight');
    const native = isNative();
    if (native && !usingReferenceOps()) return rmsNorm(this.nativeStack(ids, positions, keyMask), finalNorm, d.eps);
    const B = ids.length;
    const T = ids[0]!.length;
    const { cos, sin } = ropeTables(this.positionsOf(B, T, 0, positions), d.headDim, d.ropeTheta);
    const cosT = tf.tensor2d(cos, [B * T, d.headDim]);
    const sinT = tf.tensor2d(sin, [B * T, d.headDim]);
    let x = embeddingLookup(this.w<tf.Rank.R2>('model.embed_tokens.weight'), ids.flat());
    const bias = native ? tf.tensor4d(this.biasData(B, T, 0, T, keyMask), [B, 1, T, T]) : this.attentionBias(B, T, 0, keyMask);
    for (const L of this.layerVars) {
      // A tidy per layer frees what the gradient tape did not save as soon as the layer is done.
      x = tf.tidy(() => this.block(x, L, B * T, cosT, sinT, (q, k, v) =>
        native ? batchedAttention(q, k, v, B, T, d.heads, d.kvHeads, bias as tf.Tensor4D) : this.slicedAttention(q, k, v, B, T, bias as tf.Tensor2D[])));
    }
    return rmsNorm(x, finalNorm, d.eps);
  }

  /**
   * The decoder stack's output [B·T, hidden] on native TensorFlow (before the final norm): as one graph run forward
   * and one backward (trainGraph.ts) when graphs are on, with the sequences right-padded to graphLength(T) so that a
   * few graphs serve every length (causal attention: the padding changes no real position's result or gradient);
   * else layer by layer, one customGrad each (layer.ts).
   */
  private nativeStack(ids: number[][], positions?: number[][], keyMask?: number[][]): tf.Tensor2D {
    const d = this.dims;
    const B = ids.length;
    const T = ids[0]!.length;
    const useGraph = this.stackGraphCache() !== null;
    const Tg = useGraph ? graphLength(T) : T;
    const pad = (row: number[]): number[] => (Tg === T ? row : [...row, ...new Array<number>(Tg - T).fill(0)]);
    const ctx = this.layerContext(B, Tg, positions, keyMask?.map(pad));
    let x = embeddingLookup(this.w<tf.Rank.R2>('model.embed_tokens.weight'), ids.flatMap(pad));
    const graph = useGraph ? this.stackGraph(B, Tg) : null;
    if (graph) x = this.stackThroughGraph(graph, x, ctx);
    else for (const L of this.layerVars) x = decoderLayer(x, L, ctx);
    if (Tg === T) return x;
    return tf.reshape(tf.slice(tf.reshape(x, [B, Tg, d.hidden]), [0, 0, 0], [B, T, d.hidden]), [B * T, d.hidden]);
  }

  /**
   * What every layer of a training pass shares: RoPE tables and the attention bias chunks. Without positions and key
   * mask (SFT, the benches) they depend on (B, T) only and are kept for the next pass of the same shape.
   */
  private layerContext(B: number, T: number, positions?: number[][], keyMask?: number[][]): LayerContext {
    const d = this.dims;
    const key = `${B}x${T}`;
    const shared = !positions && !keyMask;
    const have = shared ? this.contexts.get(key) : undefined;
    if (have) return have;
    const { cos, sin } = ropeTables(this.positionsOf(B, T, 0, positions), d.headDim, d.ropeTheta);
    const scale = 1 / Math.sqrt(d.headDim);
    const c3 = tf.tensor3d(cos, [B * T, 1, d.headDim]);
    const s3 = tf.tensor3d(sin, [B * T, 1, d.headDim]);
    const ctx: LayerContext = {
      B, T, heads: d.heads, kvHeads: d.kvHeads, headDim: d.headDim, eps: d.eps,
      cosQ: tf.mul(c3, scale), sinQ: tf.mul(s3, scale), cosK: c3, sinK: s3, rotate: this.rotate,
      biasChunks: this.biasChunks(B, T, keyMask),
    };
    if (shared) {
      tf.keep(ctx.cosQ);
      tf.keep(ctx.sinQ);
      tf.keep(c3);
      tf.keep(s3);
      ctx.biasChunks.forEach((t) => tf.keep(t));
      this.contexts.set(key, ctx);
      for (const [k, old] of this.contexts) {
        if (this.contexts.size <= 8) break;
        this.disposeContext(old);
        this.contexts.delete(k);
      }
    }
    return ctx;
  }

  private disposeContext(ctx: LayerContext): void {
    tf.dispose([ctx.cosQ, ctx.sinQ, ctx.cosK, ctx.sinK, ...ctx.biasChunks]);
  }

  /**
   * The training graphs of the decoder stack by batch shape (trainGraph.ts), built on first use; null when graphs are
   * off (CM2_TF_GRAPH=0) or one could not be built (reported once; training then runs layer by layer, eagerly).
   */
  private stackGraphCache(): StackGraphCache | null {
    if (this.stackGraphs === undefined) {
      const d = this.dims;
      const present = PARAM_NAMES.filter((n) => this.layerVars[0]![n] !== undefined);
      this.stackGraphs = process.env.CM2_TF_GRAPH === '0' ? null : new StackGraphCache({ layers: d.layers, hidden: d.hidden, heads: d.heads, kvHeads: d.kvHeads, headDim: d.headDim, intermediate: d.intermediate, eps: d.eps, present });
    }
    return this.stackGraphs;
  }

  private stackGraph(B: number, T: number, head?: HeadDims): StackGraph | null {
    const cache = this.stackGraphCache();
    if (!cache) return null;
    try {
      return cache.get(B, T, head);
    } catch (e) {
      console.warn(`training graph unavailable, training layer by layer: ${(e as Error).message.split('\n')[0]}`);
      cache.dispose();
      this.stackGraphs = null;
      return null;
    }
  }

  /** x [B·T, hidden] through every decoder layer as one graph run, with the backward pass as another (a customGrad). */
  private stackThroughGraph(graph: StackGraph, x: tf.Tensor2D, ctx: LayerContext): tf.Tensor2D {
    const names = graph.dims.present;
    const weights = this.layerVars.flatMap((L) => names.map((n) => L[n]!));
    const tables = [ctx.cosQ, ctx.sinQ, ctx.cosK, ctx.sinK];
    const head = [...tables, ctx.rotate, ...ctx.biasChunks];
    if (!taping()) return graph.runForward([x, ...head, ...weights], false)[0] as tf.Tensor2D;
    const perLayer = names.length;
    const f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
      const save = args.pop() as tf.GradSaveFunc;
      const [xi, ...ws] = args as tf.Tensor[];
      const [value, ...saved] = graph.runForward([xi!, ...head, ...ws], true);
      save([...saved, ...tables]); // the tables too: the tidy around the forward pass disposes what is not saved
      return {
        value: value!,
        gradFunc: (dy: tf.Tensor, s: tf.Tensor[]) => {
          const k = graph.savedPerLayer;
          const feeds = [dy, ...s.slice(-4), this.rotate];
          for (let i = 0; i < this.layerVars.length; i++) feeds.push(...ws.slice(i * perLayer, (i + 1) * perLayer), ...s.slice(i * k, (i + 1) * k));
          const grads = graph.runBackward(feeds);
          tf.dispose(s); // the activations are no longer needed (the engine's later dispose is a no-op)
          return grads;
        },
      };
    });
    return f(x, ...weights) as tf.Tensor2D;
  }

  /**
   * x [B·T, hidden] through every decoder layer, the final norm and the head to log p(target) [B·T] as one graph run,
   * with the backward pass as another (a customGrad over x, the final norm's weight, the head's weight and the layers'
   * weights). `at` is targetIndex of the targets.
   */
  private stackLogprobsThroughGraph(graph: StackGraph, x: tf.Tensor2D, ctx: LayerContext, norm: tf.Tensor1D, head: tf.Tensor2D, at: tf.Tensor2D): tf.Tensor1D {
    const names = graph.dims.present;
    const weights = this.layerVars.flatMap((L) => names.map((n) => L[n]!));
    const tables = [ctx.cosQ, ctx.sinQ, ctx.cosK, ctx.sinK];
    const inputs = [...tables, ctx.rotate, ...ctx.biasChunks];
    if (!taping()) return graph.runForward([x, ...inputs, ...weights, norm, head, at], false)[0] as tf.Tensor1D;
    const perLayer = names.length;
    const layers = this.layerVars.length;
    const f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
      const save = args.pop() as tf.GradSaveFunc;
      const [xi, ni, hi, ...ws] = args as tf.Tensor[];
      const [value, ...saved] = graph.runForward([xi!, ...inputs, ...ws, ni!, hi!, at], true);
      // saved: the layers', then the head's three; the tables and `at`; the norm and head weights too, which may be
      // tensors derived inside the caller's tidy (the norm / T of a sampling temperature) and gone by backward time.
      save([...saved, ...tables, at, ni!, hi!]);
      return {
        value: value!,
        gradFunc: (dy: tf.Tensor, s: tf.Tensor[]) => {
          const k = graph.savedPerLayer;
          const n = layers * k;
          const feeds = [dy, s[n + 8]!, s[n + 9]!, s[n + 7]!, ...s.slice(n, n + 3), ...s.slice(n + 3, n + 7), this.rotate];
          for (let i = 0; i < layers; i++) feeds.push(...ws.slice(i * perLayer, (i + 1) * perLayer), ...s.slice(i * k, (i + 1) * k));
          const out = graph.runBackward(feeds); // dx, the layers' gradients, the final norm's, the head's
          tf.dispose(s);
          return [out[0]!, ...out.slice(-2), ...out.slice(1, -2)];
        },
      };
    });
    return f(x, norm, head, ...weights) as tf.Tensor1D;
  }

  /**
   * The additive attention bias, [B][T][S] flattened: 0 where query t (at slot past + t) may see key slot s (causal,
   * keyMask 1), else -1e9. S may exceed past + T (unused cache slots, masked by causality).
   */
  private biasData(B: number, T: number, past: number, S: number, keyMask?: number[][]): Float32Array {
    const data = new Float32Array(B * T * S);
    for (let b = 0; b < B; b++) {
      const row = keyMask?.[b];
      if (keyMask && (!row || row.length !== past + T)) throw new Error(`keyMask rows must cover ${past + T} keys (cache + input)`);
      for (let t = 0; t < T; t++) {
        const base = (b * T + t) * S;
        for (let s = 0; s < S; s++) if (s > past + t || (row && row[s] === 0)) data[base + s] = MASKED;
      }
    }
    return data;
  }

  /** The training attention bias cut into the query chunks of layer.ts, each [B, 1, b − a, 1, b]. */
  private biasChunks(B: number, T: number, keyMask?: number[][]): tf.Tensor[] {
    const full = this.biasData(B, T, 0, T, keyMask);
    return causalChunks(T).map(([a, b]) => {
      const n = b - a;
      const data = new Float32Array(B * n * b);
      for (let s = 0; s < B; s++) for (let t = 0; t < n; t++) data.set(full.subarray((s * T + a + t) * T, (s * T + a + t) * T + b), (s * n + t) * b);
      return tf.tensor(data, [B, 1, n, 1, b]);
    });
  }

  /** Additive attention bias per sequence, [T, S] (wasm / cpu paths). */
  private attentionBias(B: number, T: number, past: number, keyMask?: number[][]): tf.Tensor2D[] {
    const S = past + T;
    const data = this.biasData(B, T, past, S, keyMask);
    if (!keyMask) {
      const one = tf.tensor2d(data.subarray(0, T * S), [T, S]);
      return Array<tf.Tensor2D>(B).fill(one);
    }
    return Array.from({ length: B }, (_, b) => tf.tensor2d(data.subarray(b * T * S, (b + 1) * T * S), [T, S]));
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
  private slicedAttention(q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D, B: number, T: number, bias: tf.Tensor2D[]): tf.Tensor2D {
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

  /** Decoding with a concatenated KV cache on wasm / cpu (inference only). */
  private forwardCachedPortable(ids: number[][], opts: ForwardOptions): tf.Tensor3D {
    return tf.tidy(() => {
      const d = this.dims;
      const cache = opts.cache!;
      const B = ids.length;
      const T = ids[0]!.length;
      const past = cache.length;
      if (past > 0 && cache.layers[0]!.k?.shape[0] !== B * d.kvHeads) throw new Error('forward: cache batch size differs');
      const { cos, sin } = ropeTables(this.positionsOf(B, T, past, opts.positions), d.headDim, d.ropeTheta);
      const cosT = tf.tensor2d(cos, [B * T, d.headDim]);
      const sinT = tf.tensor2d(sin, [B * T, d.headDim]);
      const bias = this.attentionBias(B, T, past, opts.keyMask);
      let x = embeddingLookup(this.w<tf.Rank.R2>('model.embed_tokens.weight'), ids.flat());
      this.layerVars.forEach((L, i) => {
        x = this.block(x, L, B * T, cosT, sinT, (q, k, v) => this.concatCacheAttention(q, k, v, B, T, bias, cache.layers[i]!));
      });
      cache.length = past + T;
      if (opts.lastOnly) x = tf.gather(x, Array.from({ length: B }, (_, b) => b * T + T - 1));
      x = rmsNorm(x, this.w<tf.Rank.R1>('model.norm.weight'), d.eps);
      return tf.reshape(this.head(x), [B, opts.lastOnly ? 1 : T, d.vocab]);
    });
  }

  /**
   * Attention against a concatenated cache, batched over (sequence, kv head), with the heads of a group stacked along
   * the rows. [B, H, T, d] is [B, kvHeads, group, T, d] in memory, hence the reshapes to [B·kvHeads, group·T, d].
   */
  private concatCacheAttention(q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D, B: number, T: number, bias: tf.Tensor2D[], cache: { k?: tf.Tensor3D; v?: tf.Tensor3D }): tf.Tensor2D {
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

  /** Drops the native inference weights (rebuilt on the next inference call). */
  private releaseFused(): void {
    for (const f of this.fused) if (f) this.disposeFused(f);
    this.fused = [];
  }

  private disposeFused(f: FusedLayer): void {
    tf.dispose(defined<tf.Tensor>([f.wqkv, f.bqkv, f.headNorm, f.o, f.gate, f.up, f.down]));
  }

  /** Layer i's fused inference weights, rebuilt when one of its variables changed since they were built. */
  private fusedLayer(i: number): FusedLayer {
    const L = this.layerVars[i]!;
    const source = defined<tf.Tensor>([L.inNorm, L.q, L.k, L.v, L.qb, L.kb, L.vb, L.qNorm, L.kNorm, L.o, L.gate, L.up, L.down]).map(dataIdOf);
    const have = this.fused[i];
    if (have && have.source.length === source.length && have.source.every((id, j) => id === source[j])) return have;
    if (have) this.disposeFused(have);
    const d = this.dims;
    const { qb, kb, vb, qNorm, kNorm } = L;
    const built: FusedLayer = tf.tidy(() => {
      const rows = (w: tf.Tensor1D, n: number): tf.Tensor => tf.tile(tf.reshape(w, [1, -1]), [n, 1]);
      const f: FusedLayer = {
        source,
        // diag(input_layernorm) · [Wq | Wk | Wv]: the norm's weight folded into the projection
        wqkv: tf.keep(tf.transpose(tf.mul(tf.reshape(L.inNorm, [-1, 1]), tf.concat([L.q, L.k, L.v], 1)))),
        bqkv: qb && kb && vb ? tf.keep(tf.concat([qb, kb, vb])) : undefined,
        headNorm: qNorm && kNorm ? tf.keep(tf.concat([rows(qNorm, d.heads), rows(kNorm, d.kvHeads), tf.ones([d.kvHeads, d.headDim])])) : undefined,
        o: tf.keep(tf.transpose(L.o)),
        gate: tf.keep(tf.transpose(L.gate)),
        up: tf.keep(tf.transpose(L.up)),
        down: tf.keep(tf.transpose(L.down)),
      };
      return f as unknown as tf.TensorContainer;
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
    const d = this.dims;
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
  private nativeCache(cache: KVCache, B: number, needed: number): NativeCache {
    const d = this.dims;
    const have = cache.native;
    if (have && have.batch !== B) throw new Error('forward: cache batch size differs');
    if (have && have.capacity >= needed) return have;
    const r = rawOps();
    const want = Math.max(needed, cache.reserve ?? 0, have ? Math.ceil(have.capacity * 1.5) : 0);
    const capacity = Math.ceil(want / CACHE_CHUNK) * CACHE_CHUNK;
    const K = d.kvHeads;
    const next = tf.tidy(() => {
      const buffer = have
        ? tf.pad(have.buffer, [[0, 0], [0, 0], [0, 0], [0, 0], [0, capacity - have.capacity], [0, 0]])
        : r.zeros([d.layers, 2, B, K, capacity, d.headDim]);
      const perLayer = d.layers === 1 ? [r.reshape(buffer, buffer.shape.slice(1))] : r.unstack(buffer);
      const layers = perLayer.map((l) => {
        const [keys, values] = r.unstack(l) as [tf.Tensor, tf.Tensor];
        return { rows: r.reshape(l, [2 * B * K * capacity, d.headDim]), keys, values };
      });
      return { buffer, layers } as unknown as tf.TensorContainer;
    }) as unknown as { buffer: tf.Tensor; layers: NativeCache['layers'] };
    // Kept: the cache outlives whatever tidy scope the forward call that allocates it runs in.
    tf.keep(next.buffer);
    for (const l of next.layers) [l.rows, l.keys, l.values].forEach((t) => tf.keep(t));
    if (have) this.disposeCache({ length: 0, layers: [], native: have });
    cache.native = { batch: B, capacity, ...next };
    return cache.native;
  }

  /**
   * Greedy next token of the last position of each sequence and its log-probability under the raw distribution. On
   * native TensorFlow both are computed on the device (a KV-cached step with one token per sequence runs as one graph)
   * and only these 2·B numbers are read; elsewhere the logits are read and the argmax taken on the host (lowest id on
   * ties). Same options as forward.
   */
  greedyStep(ids: number[][], opts: ForwardOptions = {}): { ids: number[]; logprobs: number[] } {
    if (isNative() && !taping()) {
      const fromGraph = this.graphStep(ids, opts, ['ids_out', 'nll']);
      const [best, nll] = fromGraph ?? tf.tidy(() => {
        const logits = this.forward(ids, { ...opts, lastOnly: true });
        const rows = tf.reshape(logits, [ids.length, this.dims.vocab]) as tf.Tensor2D;
        const top = tf.argMax(rows, -1) as tf.Tensor1D;
        return [top, greedyNll(rows)];
      });
      const out = { ids: Array.from(best!.dataSync()), logprobs: Array.from(nll!.dataSync(), (x) => -x) };
      tf.dispose([best!, nll!]);
      return out;
    }
    const logits = this.forward(ids, { ...opts, lastOnly: true });
    const data = logits.dataSync();
    logits.dispose();
    const V = this.dims.vocab;
    const out: { ids: number[]; logprobs: number[] } = { ids: [], logprobs: [] };
    for (let b = 0; b < ids.length; b++) {
      const row = data.subarray(b * V, (b + 1) * V);
      let best = 0;
      for (let i = 1; i < V; i++) if (row[i]! > row[best]!) best = i;
      let total = 0;
      for (let i = 0; i < V; i++) total += Math.exp(row[i]! - row[best]!);
      out.ids.push(best);
      out.logprobs.push(-Math.log(total));
    }
    return out;
  }

  /** The decoding-step graph, built on first use (CM2_TF_GRAPH=0 switches it off; a build failure is reported once). */
  private stepGraph(): DecodeGraph | null {
    if (this.decodeGraph !== undefined) return this.decodeGraph;
    if (process.env.CM2_TF_GRAPH === '0') return (this.decodeGraph = null);
    try {
      this.decodeGraph = buildDecodeGraph(this.dims, rotateHalfMatrix(this.dims.headDim));
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
  private graphStep(ids: number[][], opts: ForwardOptions, fetch: string[]): tf.Tensor[] | undefined {
    const cache = opts.cache;
    if (!cache || ids[0]!.length !== 1 || cache.length === 0) return undefined;
    const graph = this.stepGraph();
    if (!graph) return undefined;
    const d = this.dims;
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
    const { cos, sin } = ropeTables(this.positionsOf(B, 1, past, opts.positions), d.headDim, d.ropeTheta);
    const slots = new Int32Array(B * 2 * K);
    for (let b = 0, o = 0; b < B; b++) for (let j = 0; j < 2; j++) for (let g = 0; g < K; g++) slots[o++] = ((j * B + b) * K + g) * S + past;
    const step = [
      tf.tensor1d(ids.map((r) => r[0]!), 'int32'),
      tf.tensor3d(cos, [B, 1, d.headDim]),
      tf.tensor3d(sin, [B, 1, d.headDim]),
      tf.tensor4d(this.biasData(B, 1, past, S, opts.keyMask), [B, 1, 1, S]),
      tf.tensor1d(slots, 'int32'),
    ];
    const feeds: tf.Tensor[] = [...step, rawOps().ints([2, B, K, S, d.headDim]), this.w('model.embed_tokens.weight'), this.w('model.norm.weight')];
    if (graph.untiedHead) feeds.push(this.w('lm_head.weight'));
    this.layerVars.forEach((L, i) => {
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
  private forwardNative(ids: number[][], opts: ForwardOptions): tf.Tensor3D {
    const d = this.dims;
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
    const fused = this.layerVars.map((_, i) => this.fusedLayer(i));
    const hc = this.headConstants();
    const r = rawOps();
    r.trim();
    const out = tf.tidy(() => {
      const hd = d.headDim;
      const K = d.kvHeads;
      const H = d.heads;
      const G = H / K;
      const nh = H + 2 * K;
      const S = store ? store.capacity : T;
      const N = B * T;
      const { cos, sin } = ropeTables(this.positionsOf(B, T, past, opts.positions), hd, d.ropeTheta);
      const C = r.add(r.mul(tf.tensor3d(cos, [N, 1, hd]), hc.a), hc.c);
      const Sn = r.mul(tf.tensor3d(sin, [N, 1, hd]), hc.a);
      const bias = tf.tensor4d(this.biasData(B, T, past, S, opts.keyMask), [B, 1, T, S]);
      // Cache rows of the new keys and values, in the order of k|v rows [B·T·2·K, d] from q|k|v.
      let slots: tf.Tensor | undefined;
      if (store) {
        const idx = new Int32Array(N * 2 * K);
        let o = 0;
        for (let b = 0; b < B; b++) for (let t = 0; t < T; t++) for (let j = 0; j < 2; j++) for (let g = 0; g < K; g++) idx[o++] = ((j * B + b) * K + g) * S + past + t;
        slots = tf.tensor1d(idx, 'int32');
      }
      const norm = (x: tf.Tensor): tf.Tensor => r.mul(x, r.rsqrt(r.add(r.meanLast(r.square(x)), hc.eps)));
      let x = r.gatherRows(this.w('model.embed_tokens.weight'), tf.tensor1d(ids.flat(), 'int32'));
      // A tidy per layer: a long prompt's scores and probabilities ([B, K, G·T, S] each) are freed layer by layer, not
      // held for all layers until the logits (a 30-layer model on 4 × 800 tokens reached 17 GB that way).
      this.layerVars.forEach((L, i) => x = tf.tidy(() => {
        const F = fused[i]!;
        let qkv = r.matMul(norm(x), F.wqkv, false, true);
        if (F.bqkv) qkv = r.add(qkv, F.bqkv);
        let heads = r.reshape(qkv, [N, nh, hd]);
        if (F.headNorm) heads = r.mul(r.mul(heads, r.rsqrt(r.add(r.mul(r.meanLast(r.square(heads)), hc.m), hc.e))), F.headNorm);
        heads = r.add(r.mul(heads, C), r.mul(r.matMul(heads, this.rotate), Sn));
        const [q, kv] = r.split(heads, [H, 2 * K], 1) as [tf.Tensor, tf.Tensor];
        let keys: tf.Tensor;
        let values: tf.Tensor;
        if (store) {
          const view = store.layers[i]!;
          r.inplaceUpdate(view.rows, slots!, r.reshape(kv, [N * 2 * K, hd]));
          keys = view.keys;
          values = view.values;
        } else {
          [keys, values] = r.unstack(r.transpose(r.reshape(kv, [B, T, 2, K, hd]), [2, 0, 3, 1, 4])) as [tf.Tensor, tf.Tensor];
        }
        // [B, K, G·T, S] scores (query head h = kv head · G + g; the scale is in q), bias over [B, H, T, S], softmax, ·v
        const q4 = T === 1 ? r.reshape(q, [B, K, G, hd]) : r.reshape(r.transpose(r.reshape(q, [B, T, H, hd]), [0, 2, 1, 3]), [B, K, G * T, hd]);
        const scores = r.matMul(q4, keys, false, true);
        const p = T === 1 ? r.softmax(r.add(scores, bias)) : r.reshape(r.softmax(r.add(r.reshape(scores, [B, H, T, S]), bias)), [B, K, G * T, S]);
        const o = r.matMul(p, values);
        const attn = T === 1 ? r.reshape(o, [N, H * hd]) : r.reshape(r.transpose(r.reshape(o, [B, H, T, hd]), [0, 2, 1, 3]), [N, H * hd]);
        let proj = r.matMul(attn, F.o, false, true);
        if (L.ob) proj = r.add(proj, L.ob);
        const x2 = r.add(x, proj);
        const h2 = r.mul(norm(x2), L.postNorm);
        const gate = r.matMul(h2, F.gate, false, true);
        return r.add(x2, r.matMul(r.mul(r.mul(gate, r.sigmoid(gate)), r.matMul(h2, F.up, false, true)), F.down, false, true));
      }));
      if (opts.lastOnly && T > 1) x = r.gatherRows(x, tf.tensor1d(Array.from({ length: B }, (_, b) => b * T + T - 1), 'int32'));
      x = r.mul(norm(x), this.w('model.norm.weight'));
      const logits = d.tied ? r.matMul(x, this.w('model.embed_tokens.weight'), false, true) : r.matMul(x, this.w('lm_head.weight'));
      return r.reshape(logits, [B, opts.lastOnly ? 1 : T, d.vocab]) as tf.Tensor3D;
    });
    if (cache) cache.length = past + T;
    return out;
  }

  /**
   * One decoder layer on rows x [N, hidden] through the tape-recorded ops (the wasm/cpu path and KV-cached decoding
   * there): RMSNorm, q/k/v (+ QK-norm), RoPE, `attend`, o-projection, SwiGLU MLP, both residuals.
   */
  private block(x: tf.Tensor2D, L: LayerVars, N: number, cosT: tf.Tensor2D, sinT: tf.Tensor2D, attend: (q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D) => tf.Tensor2D): tf.Tensor2D {
    const d = this.dims;
    const h = rmsNorm(x, L.inNorm, d.eps);
    let q = linear(h, L.q, L.qb);
    let k = linear(h, L.k, L.kb);
    const v = linear(h, L.v, L.vb);
    if (L.qNorm && L.kNorm) {
      q = tf.reshape(rmsNorm(tf.reshape(q, [-1, d.headDim]), L.qNorm, d.eps), [N, -1]);
      k = tf.reshape(rmsNorm(tf.reshape(k, [-1, d.headDim]), L.kNorm, d.eps), [N, -1]);
    }
    q = rope(q, d.heads, cosT, sinT, this.rotate);
    k = rope(k, d.kvHeads, cosT, sinT, this.rotate);
    const x2 = tf.add(x, linear(attend(q, k, v), L.o, L.ob)) as tf.Tensor2D;
    const h2 = rmsNorm(x2, L.postNorm, d.eps);
    return tf.add(x2, linear(swiGlu(linear(h2, L.gate), linear(h2, L.up)), L.down)) as tf.Tensor2D;
  }

  dispose(): void {
    this.releaseFused();
    this.decodeGraph?.dispose();
    this.decodeGraph = undefined;
    this.stackGraphs?.dispose();
    this.stackGraphs = undefined;
    for (const ctx of this.contexts.values()) this.disposeContext(ctx);
    this.contexts.clear();
    tf.dispose([...this.params.values()]);
    this.params.clear();
    this.rotate.dispose();
    if (this.headConst) tf.dispose(Object.values(this.headConst));
    this.headConst = undefined;
  }
}
