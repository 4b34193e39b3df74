/**
 * The fields of a Hugging Face `config.json` that the decoder uses: Qwen2, Qwen3 and Llama (SmolLM2, Llama 2/3 with the
 * default RoPE) are one architecture here, told apart by q/k/v bias and per-head q/k RMSNorm.
 *
 * Unknown keys pass through untouched, so a config read from an HF checkpoint is written back as it came
 * (plus defaults for the fields below that it lacked).
 */
import { z } from 'zod';

export const qwenConfigSchema = z.looseObject({
  model_type: z.enum(['qwen3', 'qwen2', 'llama']),
  architectures: z.array(z.string()).optional(),
  vocab_size: z.number().int().positive(),
  hidden_size: z.number().int().positive(),
  intermediate_size: z.number().int().positive(),
  num_hidden_layers: z.number().int().positive(),
  num_attention_heads: z.number().int().positive(),
  num_key_value_heads: z.number().int().positive().optional(),
  /** Qwen3 and newer Llama configs; otherwise hidden_size / num_attention_heads. */
  head_dim: z.number().int().positive().nullish(),
  rms_norm_eps: z.number().positive().default(1e-6),
  /** transformers < 5 writes rope_theta; transformers 5 writes rope_parameters.rope_theta. */
  rope_theta: z.number().positive().optional(),
  rope_parameters: z.looseObject({ rope_theta: z.number().positive().optional(), rope_type: z.string().optional() }).nullish(),
  rope_scaling: z.looseObject({ rope_type: z.string().optional(), type: z.string().optional() }).nullish(),
  tie_word_embeddings: z.boolean().default(false),
  max_position_embeddings: z.number().int().positive().default(32768),
  bos_token_id: z.number().int().nullish(),
  eos_token_id: z.union([z.number().int(), z.array(z.number().int())]).nullish(),
  /** Qwen3 and Llama: bias on q/k/v/o when true. Qwen2 always has q/k/v bias (and never an o bias). */
  attention_bias: z.boolean().optional(),
  /** Llama: bias on the MLP projections (not supported; false in every released Llama). */
  mlp_bias: z.boolean().optional(),
  /** Llama: tensor-parallel slicing used in pretraining; the math is the same for any value with transformers' default path. */
  pretraining_tp: z.number().int().positive().optional(),
  hidden_act: z.string().default('silu'),
  initializer_range: z.number().positive().default(0.02),
  use_sliding_window: z.boolean().optional(),
});

export type QwenConfig = z.infer<typeof qwenConfigSchema>;

/** The numbers the model needs, derived once from a config. */
export interface QwenDims {
  vocab: number;
  hidden: number;
  intermediate: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  eps: number;
  ropeTheta: number;
  tied: boolean;
  /** q/k/v projections carry a bias. */
  qkvBias: boolean;
  /** o projection carries a bias (Qwen3 with attention_bias). */
  oBias: boolean;
  /** per-head RMSNorm of q and k (Qwen3). */
  qkNorm: boolean;
}

export function parseQwenConfig(raw: unknown): QwenConfig {
  const cfg = qwenConfigSchema.parse(raw);
  const ropeType = cfg.rope_scaling?.rope_type ?? cfg.rope_scaling?.type ?? cfg.rope_parameters?.rope_type ?? 'default';
  if (ropeType !== 'default') throw new Error(`config.json: rope scaling '${ropeType}' is not supported (only the default RoPE)`);
  if (cfg.hidden_act !== 'silu') throw new Error(`config.json: hidden_act '${cfg.hidden_act}' is not supported (only silu)`);
  if (cfg.use_sliding_window) throw new Error('config.json: use_sliding_window is not supported');
  if (cfg.mlp_bias) throw new Error('config.json: mlp_bias is not supported (Llama with MLP biases)');
  const d = qwenDims(cfg);
  if (d.heads % d.kvHeads !== 0) throw new Error('config.json: num_attention_heads must be a multiple of num_key_value_heads');
  if (d.headDim % 2 !== 0) throw new Error('config.json: head_dim must be even (RoPE)');
  return cfg;
}

export function qwenDims(cfg: QwenConfig): QwenDims {
  const heads = cfg.num_attention_heads;
  const headDim = cfg.head_dim ?? cfg.hidden_size / heads;
  if (!Number.isInteger(headDim)) throw new Error('config.json: hidden_size is not a multiple of num_attention_heads and head_dim is missing');
  const qwen3 = cfg.model_type === 'qwen3';
  const llama = cfg.model_type === 'llama';
  return {
    vocab: cfg.vocab_size,
    hidden: cfg.hidden_size,
    intermediate: cfg.intermediate_size,
    layers: cfg.num_hidden_layers,
    heads,
    kvHeads: cfg.num_key_value_heads ?? heads,
    headDim,
    eps: cfg.rms_norm_eps,
    ropeTheta: cfg.rope_theta ?? cfg.rope_parameters?.rope_theta ?? 10000,
    tied: cfg.tie_word_embeddings,
    qkvBias: qwen3 || llama ? cfg.attention_bias === true : true,
    oBias: (qwen3 || llama) && cfg.attention_bias === true,
    qkNorm: qwen3,
  };
}

/** Stop tokens named by the config (eos_token_id may be one id or a list). */
export function configEosIds(cfg: QwenConfig): number[] {
  const e = cfg.eos_token_id;
  if (e === undefined || e === null) return [];
  return Array.isArray(e) ? e : [e];
}
