/**
 * A GGUF file read as an HF checkpoint (for `cm2 model import`, modelImport.ts): the HF config from the `<arch>.*`
 * metadata, llama.cpp's tensor names mapped to HF's, and every tensor as a source that dequantizes it (ggufQuant.ts),
 * with llama's q/k rows put back in HF's order.
 */
import { z } from 'zod';
import { describeGgufValue, GgufFile, type GgufValue } from './gguf';
import { HF_ARCHITECTURES } from './checkpoint';
import { parseQwenConfig, type QwenConfig, qwenDims } from '../net/qwenConfig';
import { type TensorSource } from './safetensors';
import { paramSpecs } from '../net/params';

/** The model types an import accepts (HF's `model_type`). */
export type ModelType = keyof typeof HF_ARCHITECTURES;

/** Field by field, what zod found wrong with a config. */
export function zodIssues(e: z.ZodError): string {
  return e.issues.map((i) => `field ${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
}

export const GGUF_ARCHITECTURES: Readonly<Record<string, ModelType>> = { llama: 'llama', qwen2: 'qwen2', qwen3: 'qwen3' };

/** The shortest decimal that is the same float32 (9.999999747378752e-06 → 1e-5), as a number. */
export function shortestF32(x: number): number {
  const f = Math.fround(x);
  for (let p = 1; p <= 9; p++) {
    const y = Number(f.toPrecision(p));
    if (Math.fround(y) === f) return y;
  }
  return f;
}

class Meta {
  constructor(private readonly meta: ReadonlyMap<string, GgufValue>, private readonly where: string) {}

  get(key: string): GgufValue | undefined {
    return this.meta.get(key);
  }

  /** A number field; `dflt` when absent (absent and no default: an error naming the key). */
  num(key: string, dflt?: number): number {
    const v = this.meta.get(key);
    if (v === undefined) {
      if (dflt === undefined) throw new Error(`${this.where}: metadata ${key} is missing`);
      return dflt;
    }
    if (Array.isArray(v)) {
      // Some files store per-layer values; one value for every layer is the only kind supported.
      const first = v[0];
      if (v.length > 0 && typeof first === 'number' && v.every((x) => x === first)) return first;
      throw new Error(`${this.where}: metadata ${key} is a per-layer array with different values (${describeGgufValue(v)}); not supported`);
    }
    if (typeof v !== 'number') throw new Error(`${this.where}: metadata ${key} must be a number, got ${describeGgufValue(v)}`);
    return v;
  }

  int(key: string, dflt?: number): number {
    const v = this.num(key, dflt);
    if (!Number.isInteger(v) || v <= 0) throw new Error(`${this.where}: metadata ${key} must be a positive integer, got ${v}`);
    return v;
  }

  str(key: string): string | undefined {
    const v = this.meta.get(key);
    if (v !== undefined && typeof v !== 'string') throw new Error(`${this.where}: metadata ${key} must be a string, got ${describeGgufValue(v)}`);
    return v;
  }
}

/**
 * The HF config.json of a GGUF model (transformers' field names), checked by parseQwenConfig. `hasTensor` tells
 * whether the file has a tensor (the head is tied when there is no output.weight; biases when there are).
 */
export function ggufHfConfig(metadata: ReadonlyMap<string, GgufValue>, hasTensor: (name: string) => boolean, where: string): { config: QwenConfig; raw: Record<string, unknown> } {
  const m = new Meta(metadata, where);
  const arch = m.str('general.architecture');
  if (arch === undefined) throw new Error(`${where}: metadata general.architecture is missing`);
  const modelType = GGUF_ARCHITECTURES[arch];
  if (!modelType) throw new Error(`${where}: general.architecture '${arch}' is not supported (supported: ${Object.keys(GGUF_ARCHITECTURES).join(', ')})`);
  const k = (s: string) => `${arch}.${s}`;
  const experts = m.get(k('expert_count'));
  if (experts !== undefined && experts !== 0) throw new Error(`${where}: ${k('expert_count')} is ${describeGgufValue(experts)}: mixture-of-experts models are not supported`);
  const ropeScaling = m.str(k('rope.scaling.type'));
  if (ropeScaling !== undefined && ropeScaling !== 'none') throw new Error(`${where}: ${k('rope.scaling.type')} '${ropeScaling}' is not supported (only the default RoPE)`);
  if (hasTensor('rope_freqs.weight')) throw new Error(`${where}: tensor rope_freqs.weight (Llama 3.1-style RoPE frequency factors) is not supported (only the default RoPE)`);

  const hidden = m.int(k('embedding_length'));
  const heads = m.int(k('attention.head_count'));
  const kvHeads = m.int(k('attention.head_count_kv'), heads);
  const headDim = m.int(k('attention.key_length'), hidden / heads);
  const valueLength = m.int(k('attention.value_length'), headDim);
  if (valueLength !== headDim) throw new Error(`${where}: ${k('attention.value_length')} ${valueLength} differs from ${k('attention.key_length')} ${headDim}; not supported`);
  const ropeDims = m.get(k('rope.dimension_count'));
  if (ropeDims !== undefined && ropeDims !== headDim) throw new Error(`${where}: ${k('rope.dimension_count')} ${describeGgufValue(ropeDims)} differs from the head size ${headDim} (partial rotary embeddings are not supported)`);
  const tokens = m.get('tokenizer.ggml.tokens');
  const vocabDefault = Array.isArray(tokens) ? tokens.length : undefined;
  const vocab = m.int(k('vocab_size'), vocabDefault);
  const tied = !hasTensor('output.weight');
  const bias = hasTensor('blk.0.attn_q.bias');
  const intId = (key: string): number | undefined => {
    const v = m.get(key);
    return typeof v === 'number' ? v : undefined;
  };
  const bos = intId('tokenizer.ggml.bos_token_id');
  const eos = intId('tokenizer.ggml.eos_token_id');
  const pad = intId('tokenizer.ggml.padding_token_id');
  const ropeTheta = shortestF32(m.num(k('rope.freq_base'), 10000));
  const raw: Record<string, unknown> = {
    architectures: [HF_ARCHITECTURES[modelType]],
    model_type: modelType,
    vocab_size: vocab,
    hidden_size: hidden,
    intermediate_size: m.int(k('feed_forward_length')),
    num_hidden_layers: m.int(k('block_count')),
    num_attention_heads: heads,
    num_key_value_heads: kvHeads,
    head_dim: headDim,
    hidden_act: 'silu',
    max_position_embeddings: m.int(k('context_length'), 2048),
    rms_norm_eps: shortestF32(m.num(k('attention.layer_norm_rms_epsilon'))),
    rope_theta: ropeTheta,
    rope_parameters: { rope_theta: ropeTheta, rope_type: 'default' },
    tie_word_embeddings: tied,
    ...(modelType === 'qwen2' ? {} : { attention_bias: bias }),
    ...(modelType === 'llama' ? { mlp_bias: false } : {}),
    ...(bos !== undefined ? { bos_token_id: bos } : {}),
    ...(eos !== undefined ? { eos_token_id: eos } : {}),
    ...(pad !== undefined ? { pad_token_id: pad } : {}),
    initializer_range: 0.02,
    use_cache: true,
    dtype: 'float32',
  };
  if (modelType === 'qwen2' && !bias) throw new Error(`${where}: a qwen2 model without tensor blk.0.attn_q.bias (Qwen2 has q/k/v biases)`);
  let config: QwenConfig;
  try {
    config = parseQwenConfig(raw);
  } catch (e) {
    throw new Error(`${where}: the model described by its metadata is not supported: ${e instanceof z.ZodError ? zodIssues(e) : (e as Error).message}`);
  }
  return { config, raw };
}

// ---------------------------------------------------------------------------------------------------------------
// GGUF tensors → HF tensors

export const BLOCK_TENSORS: Readonly<Record<string, string>> = {
  attn_norm: 'input_layernorm',
  attn_q: 'self_attn.q_proj',
  attn_k: 'self_attn.k_proj',
  attn_v: 'self_attn.v_proj',
  attn_output: 'self_attn.o_proj',
  attn_q_norm: 'self_attn.q_norm',
  attn_k_norm: 'self_attn.k_norm',
  ffn_norm: 'post_attention_layernorm',
  ffn_gate: 'mlp.gate_proj',
  ffn_up: 'mlp.up_proj',
  ffn_down: 'mlp.down_proj',
};

/** The HF name of a llama.cpp tensor name, or undefined for a name with no HF counterpart here. */
export function ggufToHfName(name: string): string | undefined {
  if (name === 'token_embd.weight') return 'model.embed_tokens.weight';
  if (name === 'output_norm.weight') return 'model.norm.weight';
  if (name === 'output.weight') return 'lm_head.weight';
  const m = /^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$/.exec(name);
  const hf = m ? BLOCK_TENSORS[m[2]!] : undefined;
  return m && hf ? `model.layers.${m[1]}.${hf}.${m[3]}` : undefined;
}

/**
 * Undoes llama.cpp's row permutation of a Llama q or k projection (weight [heads·headDim, in], or bias): its
 * converter stores, per head, row 2i + j for HF row j·headDim/2 + i (the two rotary halves interleaved), so HF row
 * h·headDim + j·headDim/2 + i = GGUF row h·headDim + 2i + j.
 */
export function unpermuteLlamaRows(data: Float32Array, rows: number, heads: number): Float32Array {
  const cols = data.length / rows;
  const headDim = rows / heads;
  if (!Number.isInteger(cols) || !Number.isInteger(headDim) || headDim % 2 !== 0) throw new Error(`cannot unpermute ${rows} rows into ${heads} heads of even size`);
  const half = headDim / 2;
  const out = new Float32Array(data.length);
  for (let h = 0; h < heads; h++) {
    for (let j = 0; j < 2; j++) {
      for (let i = 0; i < half; i++) {
        const to = (h * headDim + j * half + i) * cols;
        const from = (h * headDim + 2 * i + j) * cols;
        out.set(data.subarray(from, from + cols), to);
      }
    }
  }
  return out;
}

export const sameShape = (a: readonly number[], b: readonly number[]) => a.length === b.length && a.every((d, i) => d === b[i]);

/** The imported tensors of a GGUF file: HF name, shape, and a reader that dequantizes (and unpermutes) on demand. */
export function ggufTensorSources(g: GgufFile, config: QwenConfig): { sources: TensorSource[]; sourceTypes: Record<string, number> } {
  const d = qwenDims(config);
  const specs = paramSpecs(d);
  const byHf = new Map<string, string>();
  for (const t of g.tensors) {
    const hf = ggufToHfName(t.name);
    if (hf === undefined) throw new Error(`${g.path}: tensor ${t.name} (${t.typeName} [${t.shape.join(', ')}]) has no counterpart in a ${config.model_type} model here`);
    byHf.set(hf, t.name);
  }
  const used = new Set<string>();
  const sourceTypes: Record<string, number> = {};
  const sources = specs.map((spec): TensorSource => {
    const gname = byHf.get(spec.name);
    if (gname === undefined) throw new Error(`${g.path}: tensor for ${spec.name} is missing (llama.cpp name ${hfToGgufHint(spec.name)})`);
    const t = g.tensor(gname);
    if (!sameShape(t.shape, spec.shape)) throw new Error(`${g.path}: tensor ${gname} has shape [${t.shape.join(', ')}] (GGUF dims [${t.dims.join(', ')}]), expected [${spec.shape.join(', ')}] for ${spec.name}`);
    used.add(gname);
    sourceTypes[t.typeName] = (sourceTypes[t.typeName] ?? 0) + 1;
    const permuteHeads = config.model_type === 'llama' ? (/\.q_proj\./.test(spec.name) ? d.heads : /\.k_proj\./.test(spec.name) ? d.kvHeads : 0) : 0;
    return {
      name: spec.name,
      shape: [...spec.shape],
      data: () => {
        const values = g.read(gname);
        return permuteHeads ? unpermuteLlamaRows(values, spec.shape[0]!, permuteHeads) : values;
      },
    };
  });
  const extra = g.tensors.filter((t) => !used.has(t.name) && !(d.tied && t.name === 'output.weight'));
  if (extra.length > 0) throw new Error(`${g.path}: tensors the model does not use: ${extra.slice(0, 5).map((t) => t.name).join(', ')}${extra.length > 5 ? ', …' : ''}`);
  return { sources, sourceTypes };
}

export function hfToGgufHint(hf: string): string {
  if (hf === 'model.embed_tokens.weight') return 'token_embd.weight';
  if (hf === 'model.norm.weight') return 'output_norm.weight';
  if (hf === 'lm_head.weight') return 'output.weight';
  const m = /^model\.layers\.(\d+)\.(.+)\.(weight|bias)$/.exec(hf);
  const g = m ? Object.entries(BLOCK_TENSORS).find(([, v]) => v === m[2])?.[0] : undefined;
  return m && g ? `blk.${m[1]}.${g}.${m[3]}` : '?';
}
