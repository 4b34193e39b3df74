/** Configs of the tiny parity fixtures (test/fixtures/tfjs-tiny-*), shared by scripts/make-tfjs-fixture.ts and the tests. */
import type { QwenConfig } from '../../src/model/net/qwenConfig';

const common = {
  vocab_size: 64, hidden_size: 32, intermediate_size: 48, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2,
  rms_norm_eps: 1e-6, rope_theta: 10000, max_position_embeddings: 128, bos_token_id: 1, eos_token_id: 2, initializer_range: 0.2, hidden_act: 'silu',
};

export const TINY_FIXTURE_SEED = 1234;

export const tinyFixtureConfigs: Record<string, QwenConfig> = {
  'tfjs-tiny-qwen3': { ...common, model_type: 'qwen3', head_dim: 8, tie_word_embeddings: false, attention_bias: false },
  'tfjs-tiny-qwen2-tied': { ...common, model_type: 'qwen2', tie_word_embeddings: true },
  'tfjs-tiny-llama-tied': { ...common, model_type: 'llama', rope_theta: 100000, tie_word_embeddings: true, attention_bias: false },
};
