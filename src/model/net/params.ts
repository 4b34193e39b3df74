/** The parameters of a Qwen / Llama config, in a fixed order, with HF names and HF shapes; layout helpers. */
import type { QwenDims } from './qwenConfig';

export type ParamKind = 'embed' | 'linear' | 'bias' | 'norm';
export interface ParamSpec {
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

/**
 * How a trainer holds its parameters against the layout of HF / PEFT files: `hfTransposed(name)` is true for a 2-D
 * parameter held transposed (QwenModel's Linear weights, [in, out] against HF's [out, in]), false for one held as the
 * files hold it. Checkpoints of the optimizer's moments are written in the files' layout with it (optim/adamw.ts).
 */
export interface ParamLayout {
  hfTransposed(name: string): boolean;
}

/** [rows, cols] row-major → [cols, rows]. */
export function transposeData(data: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(data.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = data[r * cols + c]!;
  return out;
}
