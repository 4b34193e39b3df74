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
 *   model.hfTransposed(name)                 whether that variable is HF's transposed (ParamLayout: optimizer checkpoints)
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
import { parseQwenConfig, qwenDims, type QwenConfig, type QwenDims } from './qwenConfig';
import { greedyNll, isNative, materialize, taping, targetIndex } from './native';
import { decoderLayer } from './layer';
import { graphLength } from './trainGraph';
import { attention as batchedAttention, embeddingLookup, headLogprobs, linear, matMul2d, rmsNorm, rope, ropeTables, rotateHalfMatrix, swiGlu, targetLogprobs, usingReferenceOps } from './ops';
import { Rng } from './random';
import { paramSpecs, transposeData, type ParamLayout, type ParamSpec } from './params';
import { attentionBiasData, attentionBiasPerSequence, concatCacheAttention, slicedAttention } from './portableAttention';
import { type AttachedLora, NativeTraining } from './nativeTraining';
import { NativeInference, type LayerVars } from './nativeInference';
import type { ForwardOptions, KVCache, PackedRows } from './forwardTypes';

export class QwenModel implements ParamLayout {
  readonly config: QwenConfig;
  readonly dims: QwenDims;
  private readonly specs: ParamSpec[];
  private readonly params = new Map<string, tf.Variable>();
  private readonly layerVars: LayerVars[] = [];
  private readonly rotate: tf.Tensor2D;
  /** fused weights, KV cache buffers and the decoding graph of inference on native TensorFlow */
  private readonly native: NativeInference;
  /** layer contexts and training graphs of the trainable path on native TensorFlow */
  private readonly training: NativeTraining;

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
    const host = {
      dims: this.dims,
      layerVars: this.layerVars,
      rotate: this.rotate,
      weight: (name: string) => this.w(name),
      positionsOf: (B: number, T: number, past: number, positions?: number[][]) => this.positionsOf(B, T, past, positions),
      disposeCache: (cache: KVCache) => this.disposeCache(cache),
    };
    this.native = new NativeInference(host);
    this.training = new NativeTraining(host);
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
   * needed, so a large checkpoint is never held whole next to the model (src/model/formats/checkpoint.ts streams it from disk;
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

  /**
   * Values shaped like parameter `name` in the model's own layout (a variable, an optimizer moment, a gradient) in HF
   * layout: a Linear weight's [in, out] transposed to [out, in], anything else as it is.
   */
  toHfLayout(name: string, data: Float32Array): Float32Array {
    const spec = this.specs.find((s) => s.name === name);
    if (!spec) throw new Error(`no parameter ${name}`);
    return spec.kind === 'linear' ? transposeData(data, spec.shape[1]!, spec.shape[0]!) : data;
  }

  /** Whether parameter `name` is held transposed against HF's layout (a Linear weight: [in, out] here, [out, in] there). */
  hfTransposed(name: string): boolean {
    const spec = this.specs.find((s) => s.name === name);
    if (!spec) throw new Error(`no parameter ${name}`);
    return spec.kind === 'linear';
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

  /**
   * LoRA training on frozen weights (lora.ts `lowRank`): the training graphs differentiate these factors (which the
   * tape must watch in place of the weights) and compute no weight gradient; undefined detaches them. False where the
   * trainable path has no training graph (not native TensorFlow, or graphs off): the caller trains through the
   * merged weights instead.
   */
  attachLora(lora: AttachedLora | undefined): boolean {
    if (lora && !(isNative() && !usingReferenceOps() && this.training.stackGraphCache() !== null)) return false;
    this.training.attachLora(lora);
    return true;
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
    if (isNative() && !taping()) return this.native.forward(ids, opts);
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
  tokenLogprobs(ids: number[][], targets: number[][], keyMask?: number[][], temperature = 1, pack?: PackedRows): tf.Tensor2D {
    if (!(temperature > 0)) throw new Error(`tokenLogprobs: temperature must be > 0, got ${temperature}`);
    return tf.tidy(() => {
      const B = ids.length;
      const T = ids[0]?.length ?? 0;
      return tf.reshape(this.logprobs(ids, targets, keyMask, temperature, pack), [B, T]) as tf.Tensor2D;
    });
  }

  /**
   * log p(targets[b][t]) given ids[b][..t], flattened [B·T], through the trainable path: on native TensorFlow with
   * graphs on, the stack graph with the head (embedding lookup eager, everything after it two graph runs), else the
   * final-normed hidden states, then the head.
   */
  private logprobs(ids: number[][], targets: number[][], keyMask?: number[][], temperature = 1, pack?: PackedRows): tf.Tensor1D {
    if (isNative() && !usingReferenceOps()) {
      const viaGraph = this.graphLogprobs(ids, targets, keyMask, temperature, pack);
      if (viaGraph) return viaGraph;
    }
    // logits / T = (final-normed hidden / T) · headᵀ.
    const hidden = this.hidden(ids, pack?.positions, keyMask, pack?.segments);
    return this.targetLogprobs(temperature === 1 ? hidden : tf.div(hidden, temperature), targets.flat());
  }

  /** logprobs through the stack graph with the head (right-padded to graphLength(T), as nativeStack); null without one. */
  private graphLogprobs(ids: number[][], targets: number[][], keyMask?: number[][], temperature = 1, pack?: PackedRows): tf.Tensor1D | null {
    if (this.training.stackGraphCache() === null) return null;
    const d = this.dims;
    const B = ids.length;
    const T = ids[0]!.length;
    const Tg = graphLength(T);
    const graph = this.training.stackGraph(B, Tg, { vocab: d.vocab, tied: d.tied });
    if (!graph) return null;
    this.native.releaseFused();
    const pad = (row: number[]): number[] => (Tg === T ? row : [...row, ...new Array<number>(Tg - T).fill(0)]);
    const ctx = this.training.layerContext(B, Tg, pack?.positions.map(pad), keyMask?.map(pad), pack?.segments.map(pad));
    const embed = this.w<tf.Rank.R2>('model.embed_tokens.weight');
    const x = embeddingLookup(embed, ids.flatMap(pad));
    const head = d.tied ? embed : this.w<tf.Rank.R2>('lm_head.weight');
    // logits / T: the final norm's weight / T scales every logit by 1/T (its gradient follows through the division).
    const norm = this.w<tf.Rank.R1>('model.norm.weight');
    const logp = this.training.stackLogprobsThroughGraph(graph, x, ctx, temperature === 1 ? norm : tf.div(norm, temperature), head, targetIndex(targets.flatMap(pad)));
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
  private hidden(ids: number[][], positions?: number[][], keyMask?: number[][], segments?: number[][]): tf.Tensor2D {
    this.native.releaseFused();
    const d = this.dims;
    const finalNorm = this.w<tf.Rank.R1>('model.norm.weight');
    const native = isNative();
    if (native && !usingReferenceOps()) return rmsNorm(this.nativeStack(ids, positions, keyMask, segments), finalNorm, d.eps);
    const B = ids.length;
    const T = ids[0]!.length;
    const { cos, sin } = ropeTables(this.positionsOf(B, T, 0, positions), d.headDim, d.ropeTheta);
    const cosT = tf.tensor2d(cos, [B * T, d.headDim]);
    const sinT = tf.tensor2d(sin, [B * T, d.headDim]);
    let x = embeddingLookup(this.w<tf.Rank.R2>('model.embed_tokens.weight'), ids.flat());
    const bias = native ? tf.tensor4d(attentionBiasData(B, T, 0, T, keyMask, segments), [B, 1, T, T]) : attentionBiasPerSequence(B, T, 0, keyMask, segments);
    for (const L of this.layerVars) {
      // A tidy per layer frees what the gradient tape did not save as soon as the layer is done.
      x = tf.tidy(() => this.block(x, L, B * T, cosT, sinT, (q, k, v) =>
        native ? batchedAttention(q, k, v, B, T, d.heads, d.kvHeads, bias as tf.Tensor4D) : slicedAttention(d, q, k, v, B, T, bias as tf.Tensor2D[])));
    }
    return rmsNorm(x, finalNorm, d.eps);
  }

  /**
   * The decoder stack's output [B·T, hidden] on native TensorFlow (before the final norm), layer by layer, one
   * customGrad each (layer.ts). Training on native TensorFlow goes through the stack graph with the head instead
   * (`graphLogprobs`); this path serves a forward pass under a tape and training with graphs off (CM2_TF_GRAPH=0).
   */
  private nativeStack(ids: number[][], positions?: number[][], keyMask?: number[][], segments?: number[][]): tf.Tensor2D {
    if (this.training.loraAttached) throw new Error('LoRA training on frozen weights needs the training graph (loss, tokenLogprobs), which could not be built');
    const ctx = this.training.layerContext(ids.length, ids[0]!.length, positions, keyMask, segments);
    let x = embeddingLookup(this.w<tf.Rank.R2>('model.embed_tokens.weight'), ids.flat());
    for (const L of this.layerVars) x = decoderLayer(x, L, ctx);
    return x;
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
      const bias = attentionBiasPerSequence(B, T, past, opts.keyMask);
      let x = embeddingLookup(this.w<tf.Rank.R2>('model.embed_tokens.weight'), ids.flat());
      this.layerVars.forEach((L, i) => {
        x = this.block(x, L, B * T, cosT, sinT, (q, k, v) => concatCacheAttention(d, q, k, v, B, T, bias, cache.layers[i]!));
      });
      cache.length = past + T;
      if (opts.lastOnly) x = tf.gather(x, Array.from({ length: B }, (_, b) => b * T + T - 1));
      x = rmsNorm(x, this.w<tf.Rank.R1>('model.norm.weight'), d.eps);
      return tf.reshape(this.head(x), [B, opts.lastOnly ? 1 : T, d.vocab]);
    });
  }

  /**
   * Greedy next token of the last position of each sequence and its log-probability under the raw distribution. On
   * native TensorFlow both are computed on the device (a KV-cached step with one token per sequence runs as one graph)
   * and only these 2·B numbers are read; elsewhere the logits are read and the argmax taken on the host (lowest id on
   * ties). Same options as forward.
   */
  greedyStep(ids: number[][], opts: ForwardOptions = {}): { ids: number[]; logprobs: number[] } {
    if (isNative() && !taping()) {
      const fromGraph = this.native.graphStep(ids, opts, ['ids_out', 'nll']);
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
    this.native.dispose();
    this.training.dispose();
    tf.dispose([...this.params.values()]);
    this.params.clear();
    this.rotate.dispose();
  }
}
