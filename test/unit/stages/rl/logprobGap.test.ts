/**
 * logprobGap (issue 29): the sampler's log-probabilities (the KV-cache decoding path, src/model/net/decodeSession.ts) and
 * the trainer's (one forward over the whole sequence, src/stages/rl/grpo.ts) of the same sampled tokens, at the
 * sampling temperature. ~0 on a tiny model on both backends; small on SmolLM2-135M's shape (30 layers, 9 heads over 3
 * KV heads, left padding, the prefill in pieces) on native TensorFlow.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as tf from '@tensorflow/tfjs';
import type { QwenConfig } from '../../../../src/model/net/qwenConfig';
import { DecodeSession, decodeAsync } from '../../../../src/model/net/decodeSession';
import { QwenModel } from '../../../../src/model/net/qwen';
import { Rng } from '../../../../src/model/net/random';
import { GrpoTrainer, type GrpoSequence } from '../../../../src/stages/rl/grpo';
import { activateBackend, skipBackend } from '../../../helpers/testBackend';

const tiny: QwenConfig = {
  model_type: 'qwen3', vocab_size: 64, hidden_size: 16, intermediate_size: 24, num_hidden_layers: 2, num_attention_heads: 4,
  num_key_value_heads: 2, head_dim: 4, rms_norm_eps: 1e-6, rope_theta: 10000, tie_word_embeddings: false,
  max_position_embeddings: 512, hidden_act: 'silu', initializer_range: 0.3,
};
/** SmolLM2-135M's shape (llama: no QK-norm, tied head), with a smaller vocabulary (the head's size does not change the path). */
const smolShape: QwenConfig = {
  model_type: 'qwen2', vocab_size: 2048, hidden_size: 576, intermediate_size: 1536, num_hidden_layers: 30, num_attention_heads: 9,
  num_key_value_heads: 3, rms_norm_eps: 1e-5, rope_theta: 100000, tie_word_embeddings: true, max_position_embeddings: 2048,
  hidden_act: 'silu', initializer_range: 0.041666,
};

/** Samples G continuations of each prompt, then one zero-lr update over them: its logprobGap. */
async function gapOf(model: QwenModel, prompts: number[][], G: number, T: number, prefillChunkTokens?: number) {
  const session = new DecodeSession(model);
  const reqs = prompts.flatMap((p, i) => Array.from({ length: G }, (_, m) => ({ key: `${i}#${m}`, tokens: p, maxNewTokens: 12, seed: 17 * i + m })));
  const out = await decodeAsync(session, reqs, { temperature: T, ...(prefillChunkTokens ? { prefillChunkTokens } : {}) });
  session.dispose();
  const batch: GrpoSequence[] = reqs.map((q, b) => ({
    tokens: [...q.tokens, ...out.tokens[b]!],
    spans: [{ start: q.tokens.length, end: q.tokens.length + out.tokens[b]!.length, advantage: b % 2 ? 1 : -1 }],
    sampled: out.logprobs[b]!,
  }));
  const trainer = new GrpoTrainer(model, undefined, 0);
  const m = await trainer.step(batch, { lr: 0, klCoef: 0, clipLow: 0.2, clipHigh: 0.2, maxGradNorm: 1, microBatch: 4, padId: 0, temperature: T });
  trainer.optimizer.dispose();
  return m.logprobGap!;
}

for (const backend of ['cpu', 'native'] as const) {
  describe(`logprobGap (${backend})`, { skip: skipBackend(backend) }, () => {
    let previous = 'cpu';
    before(async () => {
      previous = await activateBackend(backend);
    });
    after(async () => {
      await tf.setBackend(previous);
    });

    test('tiny model, T = 0.7, prompts of different lengths: the gap is ~0 and counts every sampled token', async () => {
      const model = QwenModel.init(tiny, 3);
      const rng = new Rng(5);
      const prompts = [9, 23, 14].map((n) => Array.from({ length: n }, () => 1 + Math.floor(rng.next() * 60)));
      const gap = await gapOf(model, prompts, 3, 0.7);
      console.log(`logprobGap tiny (${backend}): mean ${gap.mean.toExponential(2)}, max ${gap.max.toExponential(2)} over ${gap.tokens} tokens`);
      assert.ok(gap.tokens > 9 * 5, `${gap.tokens} tokens`);
      assert.ok(gap.mean < 1e-5 && gap.max < 1e-4, JSON.stringify(gap));
      model.dispose();
    });

    if (backend === 'native') {
      test('SmolLM2-135M\'s shape (30 layers, left padding, prefill in pieces of 64 tokens), T = 0.7: the gap is small', async () => {
        const model = QwenModel.init(smolShape, 11);
        const rng = new Rng(8);
        const prompts = [150, 96].map((n) => Array.from({ length: n }, () => 1 + Math.floor(rng.next() * 2000)));
        const gap = await gapOf(model, prompts, 2, 0.7, 64);
        console.log(`logprobGap SmolLM2 shape (native): mean ${gap.mean.toExponential(2)}, max ${gap.max.toExponential(2)} over ${gap.tokens} tokens`);
        assert.equal(gap.tokens, 4 * 12);
        assert.ok(gap.mean < 1e-3 && gap.max < 1e-2, JSON.stringify(gap));
        model.dispose();
      });
    }
  });
}
