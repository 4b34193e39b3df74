/** SmolLM2-135M's shape, as the benches build it with random weights (no sequence stops early: the worst case). */
import type { QwenConfig } from '../src/model/net/qwenConfig';

export const SMOLLM2_SHAPE: QwenConfig = {
  model_type: 'qwen2', vocab_size: 49152, hidden_size: 576, intermediate_size: 1536, num_hidden_layers: 30, num_attention_heads: 9,
  num_key_value_heads: 3, rms_norm_eps: 1e-5, rope_theta: 100000, tie_word_embeddings: true, max_position_embeddings: 8192,
  hidden_act: 'silu', initializer_range: 0.041666,
};
